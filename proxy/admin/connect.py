"""Reaching a proxy's admin service from the client commands (``tail``, ``status``, ``mark``, ``rotate``):
the channel ``--admin``/``--ca``/``--server-name`` name, and one call on it whose RPC error ends as one line.

grpc is imported when a command runs, not when the commands are registered.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from replay.errors import UpstreamError, UserError


def channel(address: str, ca: Path | None, server_name: str | None) -> Any:
    """A grpc.aio channel to ``--admin`` (TLS when ``ca`` is given)."""
    import grpc

    from replay.hostport import format_hostport, parse_hostport

    target = format_hostport(*parse_hostport(address, "--admin"))
    if ca is None:
        return grpc.aio.insecure_channel(target)
    try:
        pem = ca.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read --ca {str(ca)!r}: {e.strerror or e}") from None
    _check_ca(ca, pem)
    creds = grpc.ssl_channel_credentials(root_certificates=pem)
    opts = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    return grpc.aio.secure_channel(target, creds, options=opts)


def _check_ca(ca: Path, pem: bytes) -> None:
    """A ``--ca`` that holds no certificate is a bad flag, said now: grpc would only fail the handshake, as
    an unreachable proxy, after logging C-core errors."""
    import ssl

    try:
        ssl.create_default_context(cadata=pem.decode("ascii"))
    except (ssl.SSLError, ValueError, UnicodeDecodeError) as e:
        raise UserError(f"--ca {str(ca)!r} holds no PEM certificate: {e}") from None


async def admin_call(args: Any, fn: Callable[[Any], Any]) -> int:
    """Await ``fn(channel)`` on a channel to ``args.admin``; an RPC error is the proxy's: UpstreamError."""
    import grpc

    async with channel(args.admin, args.ca, args.server_name) as chan:
        try:
            await fn(chan)
        except grpc.aio.AioRpcError as e:
            raise UpstreamError(f"admin {args.admin}: {e.code().name}: {e.details()}") from None
    return 0

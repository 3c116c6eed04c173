"""Reaching a proxy's admin service from the client commands (``tail``, ``status``, ``mark``, ``rotate``):
the channel ``--admin``/``--ca``/``--server-name``/``--cert``/``--key`` name, and one call on it whose
RPC error ends as one line.

grpc is imported when a command runs, not when the commands are registered.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from replay.errors import UpstreamError, UserError

#: How long the look at a refused admin port (:func:`_tls_hint`) may take.
PROBE_TIMEOUT_S = 3.0


def check_flags(ca: Path | None, server_name: str | None, cert: Path | None, key: Path | None) -> None:
    """Flags that cannot apply are a usage error, not a plaintext attempt that fails as an unreachable proxy."""
    if ca is None:
        given = [flag for flag, v in (("--server-name", server_name), ("--cert", cert), ("--key", key)) if v is not None]
        if given:
            raise UserError(f"{given[0]} needs --ca (it is part of TLS to the admin port)")
    if (cert is None) != (key is None):
        raise UserError("--cert and --key go together")


def channel(address: str, ca: Path | None, server_name: str | None,
            cert: Path | None = None, key: Path | None = None) -> Any:  # fmt: skip
    """A grpc.aio channel to ``--admin`` (TLS when ``ca`` is given; with ``cert``/``key``, presenting that
    client certificate, for a proxy that requires one: ``record --tls-client-ca``)."""
    import grpc

    from replay.hostport import format_hostport, parse_hostport

    check_flags(ca, server_name, cert, key)
    target = format_hostport(*parse_hostport(address, "--admin"))
    if ca is None:
        return grpc.aio.insecure_channel(target)
    try:
        pem = ca.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read --ca {str(ca)!r}: {e.strerror or e}") from None
    _check_ca(ca, pem)
    chain: bytes | None = None
    private: bytes | None = None
    if cert is not None and key is not None:
        chain, private = _client_pair(cert, key)
    creds = grpc.ssl_channel_credentials(root_certificates=pem, private_key=private, certificate_chain=chain)
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


def _client_pair(cert: Path, key: Path) -> tuple[bytes, bytes]:
    """The bytes of ``--cert``/``--key``, checked to be a matching pair now (for the same reason as ``--ca``)."""
    import ssl

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key)
        return cert.read_bytes(), key.read_bytes()
    except (OSError, ssl.SSLError) as e:
        raise UserError(f"cannot load --cert/--key ({cert}, {key}): {getattr(e, 'strerror', None) or e}") from None


def _tls_hint(target: str, ca: Path | None, with_cert: bool) -> str:
    """What a failed connection's error ("Socket closed") does not say, told by one TLS handshake with the
    admin port (made only after a call failed UNAVAILABLE): that it speaks TLS (no ``--ca`` was given), or
    that it requires a client certificate (none was given). "" when neither is seen."""
    import socket
    import ssl

    from replay.hostport import parse_hostport

    if ca is not None and with_cert:
        return ""
    host, port = parse_hostport(target, "--admin")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # only whether, and how, the port answers TLS: nothing is trusted or sent
    ctx.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as raw:
            with ctx.wrap_socket(raw, server_hostname=host) as conn:
                # TLS 1.3: a server that requires a client certificate finds it missing after the client's
                # side of the handshake is done, and closes; one that serves answers the preface (SETTINGS).
                conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                try:
                    needs_cert = not conn.recv(1)
                except (ssl.SSLError, ConnectionError):
                    needs_cert = True
    except ssl.SSLError as e:  # TLS 1.2: the refusal is a handshake alert
        reason = str(getattr(e, "reason", "") or "")
        if "ALERT" not in reason:
            return ""
        needs_cert = "CERTIFICATE_REQUIRED" in reason or "HANDSHAKE_FAILURE" in reason
    except OSError:
        return ""
    if ca is None:
        return " (the admin port speaks TLS: give --ca" + (" and --cert/--key)" if needs_cert else ")")
    return " (the admin port requires a client certificate: give --cert/--key)" if needs_cert else ""


async def admin_call(args: Any, fn: Callable[[Any], Any]) -> int:
    """Await ``fn(channel)`` on a channel to ``args.admin``; an RPC error is the proxy's: UpstreamError."""
    import asyncio

    import grpc

    cert, key = getattr(args, "cert", None), getattr(args, "key", None)
    async with channel(args.admin, args.ca, args.server_name, cert, key) as chan:
        try:
            await fn(chan)
        except grpc.aio.AioRpcError as e:
            hint = ""
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                hint = await asyncio.get_running_loop().run_in_executor(None, _tls_hint, args.admin, args.ca, cert is not None)
            raise UpstreamError(f"admin {args.admin}: {e.code().name}: {e.details()}{hint}") from None
    return 0

"""Where ``record --admin`` may listen: loopback, or anywhere with TLS (checked before anything is bound)."""

from __future__ import annotations

from pathlib import Path

from replay.errors import UserError
from replay.hostport import is_loopback, parse_hostport


def admin_address(text: str, tls_cert: Path | None, tls_key: Path | None) -> tuple[str, int, bool]:
    """``(host, port, tls)`` for ``--admin``; refuses a non-loopback address without the proxy's TLS."""
    host, port = parse_hostport(text, "--admin", allow_port_zero=True)
    tls = tls_cert is not None and tls_key is not None
    if not tls and not is_loopback(host):
        raise UserError(f"--admin {text}: a non-loopback admin address needs --tls-cert/--tls-key "
                        "(the admin stream shows live request metadata)")  # fmt: skip
    return host, port, tls

"""``HOST:PORT`` as every command takes it (record, serve, health, check-cancel): one parser, one message,
and one message when an address cannot be listened on."""

from __future__ import annotations

import ipaddress
import os
import socket

from replay.errors import UserError


def parse_hostport(value: str, what: str, *, allow_port_zero: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> ``(host, port)``, or :class:`UserError` naming the flag.

    The port is 1..65535; 0 ("any free port") only where the caller listens and asks for it. grpc
    would otherwise wrap 99999 to another port and read an empty port as 443.
    """
    host, sep, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    lowest = 0 if allow_port_zero else 1
    if (
        not sep
        or not host.strip()
        or not port.isascii()
        or not port.isdigit()
        or not lowest <= int(port) <= 65535
    ):
        raise UserError(f"{what} must be HOST:PORT with a port {lowest}..65535, got {value!r}")
    return host, int(port)


def format_hostport(host: str, port: int) -> str:
    """The inverse of :func:`parse_hostport` (IPv6 hosts in brackets, as grpc wants them)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) only reaches this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cannot_listen(where: str, error: OSError) -> UserError:
    """``cannot listen on WHERE: address already in use``: one line, the reason said once."""
    return UserError(f"cannot listen on {where}: {os_reason(error)}")


def os_reason(error: OSError) -> str:
    """``address already in use``: what an OS error says, without the address asyncio's bind error repeats in its
    own words ("error while attempting to bind on address (...): ..."). A resolver error keeps its own text."""
    if error.errno is not None and error.errno > 0:
        why = os.strerror(error.errno)
        return why[:1].lower() + why[1:]
    return error.strerror or str(error)


def bind_error(host: str, port: int) -> OSError | None:
    """Why ``host:port`` cannot be bound now, or None: tried with a plain socket on each address the name
    resolves to (servers bind every one and are content with one), SO_REUSEADDR as servers bind (a port in
    TIME_WAIT is free). For a refusal in one line before a server's own bind failure says more."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        return e
    first: OSError | None = None
    for family, kind, proto, _, addr in found:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(addr)
            return None
        except OSError as e:
            first = first or e
    return first

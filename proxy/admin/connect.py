"""Reaching a proxy's admin service from the client commands (``tail``, ``status``, ``mark``, ``rotate``):
the channel ``--admin``/``--ca``/``--server-name`` name, and one call on it whose RPC error ends as one line.

The client side of TLS is built here once for every command that connects to a proxy or to Triton
(the admin commands, ``health``, ``check-cancel``): :func:`client_tls` turns ``--ca``/``--server-name``/
``--cert``/``--key`` into channel credentials and options, and :func:`tls_hint` says, when a connection
was closed on a client, whether TLS is why.

grpc is imported when a command runs, not when the commands are registered.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay.errors import UpstreamError, UserError


@dataclass(frozen=True)
class ClientTls:
    """What a grpc channel (or a tritonclient client) needs to speak TLS to the peer."""

    credentials: Any  # grpc.ChannelCredentials
    #: Channel options: the name to expect in the peer's certificate (``--server-name``), or none.
    options: list[tuple[str, str]]
    client_cert: bool  # --cert/--key given


def add_tls_flags(p: argparse.ArgumentParser, peer: str) -> None:
    """``--ca``, ``--server-name``, ``--cert``, ``--key`` on a command that connects to ``peer``."""
    p.add_argument("--ca", type=Path, default=None, metavar="PEM",
                   help=f"connect to {peer} over TLS, verifying its certificate with this CA")  # fmt: skip
    p.add_argument("--server-name", default=None, metavar="NAME", help="with --ca: the certificate name to expect")
    p.add_argument("--cert", type=Path, default=None, metavar="PEM",
                   help=f"with --ca: the client certificate to present (when {peer} requires one: mutual TLS)")  # fmt: skip
    p.add_argument("--key", type=Path, default=None, metavar="PEM", help="with --cert: its private key")


def client_tls(ca: Path | None, server_name: str | None = None, cert: Path | None = None,
               key: Path | None = None) -> ClientTls | None:  # fmt: skip
    """TLS for a channel from the flags; None without ``--ca`` (plaintext, h2c).

    Every file is read and checked now, a bad one is a bad flag (:class:`UserError`): grpc would only
    fail the handshake, as an unreachable peer, after logging C-core errors."""
    if ca is None:
        # A name or a certificate for a connection that has no TLS would be dropped without a word.
        for flag, value in (("--server-name", server_name), ("--cert", cert), ("--key", key)):
            if value is not None:
                raise UserError(f"{flag} needs --ca (TLS is on with --ca)")
        return None
    if (cert is None) != (key is None):
        raise UserError("--cert and --key go together (the client certificate and its private key)")
    quiet_handshake_logs()
    import grpc

    pem = _read(ca, "--ca")
    _check_ca(ca, pem)
    chain = private = None
    if cert is not None and key is not None:
        chain, private = _read(cert, "--cert"), _read(key, "--key")
        _check_pair(cert, key)
    creds = grpc.ssl_channel_credentials(root_certificates=pem, private_key=private, certificate_chain=chain)
    opts = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    return ClientTls(creds, opts, cert is not None)


def quiet_handshake_logs() -> None:
    """Keep grpc's C core from logging each failed TLS handshake on stderr ("I... Handshake failed ..."):
    a second line beside the command's own, whose status details carry the same reason.

    Read once, when grpc is first imported: a command that imports grpc before :func:`client_tls` (through
    tritonclient) calls this first. A GRPC_VERBOSITY the user set wins."""
    import os

    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def channel(address: str, ca: Path | None, server_name: str | None,
            cert: Path | None = None, key: Path | None = None) -> Any:  # fmt: skip
    """A grpc.aio channel to ``--admin`` (TLS when ``ca`` is given; with ``cert``/``key``, presenting that
    client certificate, for a proxy that requires one: ``record --tls-client-ca``)."""
    import grpc

    from replay.hostport import format_hostport, parse_hostport

    target = format_hostport(*parse_hostport(address, "--admin"))
    tls = client_tls(ca, server_name, cert, key)
    if tls is None:
        return grpc.aio.insecure_channel(target)
    return grpc.aio.secure_channel(target, tls.credentials, options=tls.options)


def _read(path: Path, flag: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {flag} {str(path)!r}: {e.strerror or e}") from None


def _check_ca(ca: Path, pem: bytes) -> None:
    """A ``--ca`` that holds no certificate is a bad flag, said now: grpc would only fail the handshake, as
    an unreachable proxy, after logging C-core errors."""
    import ssl

    try:
        ssl.create_default_context(cadata=pem.decode("ascii"))
    except (ssl.SSLError, ValueError, UnicodeDecodeError) as e:
        raise UserError(f"--ca {str(ca)!r} holds no PEM certificate: {e}") from None


def _check_pair(cert: Path, key: Path) -> None:
    """A certificate that is none, or a key that is not its key, is said now (grpc: a failed handshake)."""
    import ssl

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key)
    except (ssl.SSLError, ValueError) as e:
        raise UserError(f"--cert {str(cert)!r} with --key {str(key)!r} does not load: {e}") from None


def closed_on_us(details: str) -> bool:
    """Whether grpc's UNAVAILABLE ``details`` say the port took the connection and then closed it, as a TLS
    port does to a plaintext client and a mutual-TLS one to a client without a certificate: "Socket
    closed", or a reset when that close came with bytes of ours unread (which of the two is timing)."""
    return "Socket closed" in details or "reset by peer" in details


def tls_hint(host: str, port: int, tls: ClientTls | None, timeout: float = 1.0) -> str:
    """Why a peer closed a connection it had accepted, when TLS is why; else ``""``.

    A TLS port closes a plaintext client's connection, and a mutual-TLS one a client without a
    certificate, and grpc says only "Socket closed" for both. One TLS handshake that checks
    nothing (it only asks whether the port speaks TLS and wants a certificate) tells them apart.
    """
    if tls is not None and tls.client_cert:
        return ""
    peer = _tls_probe(host, port, timeout)
    if peer is None:
        return ""
    if tls is None:
        wants = ", and --cert/--key: it closed the connection after the handshake, as a server that " \
            "requires a client certificate does" if peer == "wants-cert" else ""
        return f"the port speaks TLS: give --ca PEM (the CA that signed its certificate){wants}"
    if peer == "wants-cert":
        return "the port closed the connection after the TLS handshake, as a server that requires a " \
            "client certificate does: give --cert PEM --key PEM"
    return ""


def _tls_probe(host: str, port: int, timeout: float) -> str | None:
    """``"tls"``, ``"wants-cert"`` (mutual TLS), or None (no TLS there, or nothing to tell)."""
    import socket
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # nothing is sent: the question is only whether TLS answers
    ctx.set_alpn_protocols(["h2"])
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return None
    with raw:
        try:
            conn = ctx.wrap_socket(raw)
        except ssl.SSLError as e:
            return "tls" if "ALERT" in (e.reason or "") else None  # an alert is TLS; plaintext bytes are not
        except OSError:
            return None
        with conn:
            try:
                # TLS 1.3: a server that requires a client certificate refuses the lack of one after
                # the handshake: an alert (OpenSSL) or a bare close (grpc's BoringSSL) is what the
                # first read gets, where an HTTP/2 server sends its SETTINGS.
                first = conn.recv(1)
            except ssl.SSLError as e:
                return "wants-cert" if "CERTIFICATE_REQUIRED" in (e.reason or "") else "tls"
            except ConnectionResetError:
                return "wants-cert"  # (the close of a refusing server, when its alert was still unread)
            except OSError:
                return "tls"
            return "tls" if first else "wants-cert"


async def admin_call(args: Any, fn: Callable[[Any], Any]) -> int:
    """Await ``fn(channel)`` on a channel to ``args.admin``; an RPC error is the proxy's: UpstreamError."""
    import asyncio

    import grpc

    from replay.hostport import parse_hostport

    cert, key = getattr(args, "cert", None), getattr(args, "key", None)
    async with channel(args.admin, args.ca, args.server_name, cert, key) as chan:
        try:
            await fn(chan)
        except grpc.aio.AioRpcError as e:
            hint = ""
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                # grpc says "Socket closed" of a TLS port reached in plaintext and of a mutual-TLS one reached
                # without a certificate alike: one look at the port tells which (made after a failure only).
                host, port = parse_hostport(args.admin, "--admin")
                tls = client_tls(args.ca, args.server_name, cert, key)
                why = await asyncio.get_running_loop().run_in_executor(None, tls_hint, host, port, tls)
                hint = f" ({why})" if why else ""
            raise UpstreamError(f"admin {args.admin}: {e.code().name}: {e.details()}{hint}") from None
    return 0

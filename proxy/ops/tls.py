"""TLS for unattended runs: client certificates (mutual TLS), counted refusals, reload without a restart.

Reload: the listening socket keeps one *base* context for its whole life (asyncio binds it when the
server starts). Its SNI callback, which OpenSSL runs for every ClientHello (with or without SNI),
switches the new connection to the *current* context, which a reload replaces. Open connections keep
the context they shook hands with, so nothing in flight is dropped. The base context fixes whether
client certificates are required (``--tls-client-ca``): a reload replaces files, not the mode.

Upstream TLS: the relay reads its context per new upstream connection, so a reload just swaps it.

The admin service (``record --admin``, grpc's own TLS, which takes no :mod:`ssl` context) is served
from the same files with the same client-certificate rule: a reload reads them for it too
(:class:`ListenerFiles`), and it too applies them to new connections only.

Refusals: asyncio reports a failed server-side handshake to nobody (only in debug mode). The base
context's SSL objects are of a subclass whose ``do_handshake`` sees the failure, so each refused
client is logged (once per reason per minute, the rest counted) and counted by reason.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog

from replay.errors import UserError

log = structlog.get_logger("triton_tap.tls")

#: A refused handshake of one reason is logged at most this often (a scanner must not flood the log).
REFUSAL_LOG_INTERVAL_S = 60.0


class TlsFlags(Protocol):
    """The TLS flags of ``triton-tap record`` (``ProxyConfig`` has them)."""

    tls_cert: Path | None
    tls_key: Path | None
    tls_client_ca: Path | None
    upstream_tls: bool
    http_upstream_tls: bool
    upstream_ca: Path | None
    upstream_cert: Path | None
    upstream_key: Path | None
    upstream_server_name: str | None


class ListenerFiles(Protocol):
    """Another listener served from ``--tls-cert/--tls-key/--tls-client-ca`` (the admin service)."""

    def read(self) -> object:
        """The files read again, in the listener's form (:class:`UserError` if they cannot be read)."""
        ...

    def use(self, material: object) -> None:
        """Serve new connections with what :meth:`read` returned."""
        ...


def load_chain(ctx: ssl.SSLContext, cert: Path, key: Path, what: str) -> None:
    """``load_cert_chain`` with a :class:`UserError` naming the flags."""
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise UserError(f"cannot load {what} certificate/key ({cert}, {key}): {getattr(e, 'strerror', None) or e}") from None


def server_context(cert: Path, key: Path, client_ca: Path | None) -> ssl.SSLContext:
    """A context for clients (ALPN h2 only: gRPC; the HTTP port's is made from it); with ``client_ca``, client
    certificates are required."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    load_chain(ctx, cert, key, "--tls-cert/--tls-key")
    if client_ca is not None:
        try:
            ctx.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as e:
            raise UserError(f"cannot load --tls-client-ca {client_ca}: {getattr(e, 'strerror', None) or e}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["h2"])
    return ctx


def refusal_reason(e: ssl.SSLError) -> str:
    """A short, bounded label for a failed handshake (OpenSSL's reason code, e.g. ``CERTIFICATE_VERIFY_FAILED``)."""
    reason = getattr(e, "reason", None)
    return str(reason) if reason else type(e).__name__


@dataclass
class TlsCounters:
    """Read by the metrics at scrape time (plain ints; written on the loop thread)."""

    refused: dict[str, int] = field(default_factory=dict)
    reloads: dict[str, int] = field(default_factory=dict)  # "ok" / "failed"
    _logged: dict[str, float] = field(default_factory=dict)

    def refusal(self, reason: str, detail: str) -> None:
        """A client handshake failed: the proxy refused the client, or (an alert the client sent) the client
        refused the proxy."""
        self.refused[reason] = self.refused.get(reason, 0) + 1
        now = time.monotonic()
        if now - self._logged.get(reason, float("-inf")) >= REFUSAL_LOG_INTERVAL_S:
            self._logged[reason] = now
            note = f"logged once per reason per {REFUSAL_LOG_INTERVAL_S:g} s; all are counted"
            if "_ALERT_" in reason:
                # OpenSSL names an alert the peer sent so: the client ended the handshake, most often rejecting
                # the proxy's certificate (expired, an unknown CA, a name it does not hold). Said as the
                # client's refusal, or an expired --tls-cert read as the proxy turning every client away.
                log.warning("tls_client_rejected_handshake", reason=reason, error=detail,
                            failed_so_far=self.refused[reason], note="the client refused the proxy's certificate or "
                            f"TLS settings (is --tls-cert expired, or not signed by a CA the client trusts?); {note}")  # fmt: skip
            else:
                log.warning("tls_client_refused", reason=reason, error=detail, refused_so_far=self.refused[reason],
                            note=note)  # fmt: skip


def _watching_sslobject(counters: TlsCounters) -> type[ssl.SSLObject]:
    class WatchedSSLObject(ssl.SSLObject):
        """An SSL object that reports a failed server-side handshake (asyncio swallows it)."""

        def do_handshake(self) -> None:
            try:
                super().do_handshake()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                raise
            except ssl.SSLError as e:
                counters.refusal(refusal_reason(e), str(e))
                raise

    return WatchedSSLObject


def _signature(paths: tuple[Path | None, ...]) -> tuple[tuple[int, int, int] | None, ...]:
    """What changes when a file is rewritten or its symlink swapped (Kubernetes secret volumes)."""
    out: list[tuple[int, int, int] | None] = []
    for p in paths:
        if p is None:
            out.append(None)
            continue
        try:
            st = os.stat(p)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


class ReloadableTls:
    """The listening and upstream TLS contexts, replaceable for new connections.

    ``build_server``/``build_upstream`` make fresh contexts from the files (raising
    :class:`UserError`); ``reload`` calls them again and swaps what they return.
    """

    def __init__(
        self,
        build_server: Callable[[], ssl.SSLContext | None],
        build_upstream: Callable[[], ssl.SSLContext | None],
        files: tuple[Path | None, ...],
        build_http_upstream: Callable[[], ssl.SSLContext | None] = lambda: None,
        certs: Sequence[tuple[str, Path]] = (),
    ) -> None:
        self.counters = TlsCounters()
        self._certs = certs
        self._build_server = build_server
        self._build_upstream = build_upstream
        self._files = files
        self._signature = _signature(files)
        #: The listening socket's context for its whole life (see the module docstring), or None (h2c).
        self.base: ssl.SSLContext | None = build_server()
        #: What new client connections get: the base until the first reload.
        self.current = self.base
        #: The HTTP port's, alike: the same files, offering HTTP/1.1 (it speaks no HTTP/2: offered h2, a client
        #: such as curl chose it, and the port then refused it as a client breaking HTTP/1.x).
        self.http_base = _http1(build_server())
        self.http_current = self.http_base
        self.upstream: ssl.SSLContext | None = build_upstream()
        #: The HTTP upstream's (``--http-upstream-tls``: the same files, ALPN http/1.1), or None (plaintext).
        self._build_http_upstream = build_http_upstream
        self.http_upstream: ssl.SSLContext | None = build_http_upstream()
        #: Called with the new upstream contexts (gRPC's, HTTP's) after a reload (the relays' attributes are set there).
        self.on_upstream: Callable[[ssl.SSLContext | None, ssl.SSLContext | None], None] | None = None
        #: The admin service's TLS, read again with the listening side's files (set once it listens).
        self.admin: ListenerFiles | None = None
        for ctx in (self.base, self.http_base):
            if ctx is not None:
                ctx.sslobject_class = _watching_sslobject(self.counters)
                ctx.sni_callback = self._switch
        warn_out_of_date(certs)

    @property
    def client_certs_required(self) -> bool:
        """Whether the listening side requires client certificates."""
        return self.base is not None and self.base.verify_mode == ssl.CERT_REQUIRED

    def _switch(self, sslobj: Any, server_name: str | None, base: ssl.SSLContext) -> None:
        current = self.http_current if base is self.http_base else self.current
        if current is not None and current is not base:
            sslobj.context = current

    def reload(self, why: str = "signal") -> bool:
        """Build fresh contexts from the files; keep the old ones (and say why) if that fails."""
        self._signature = _signature(self._files)
        try:
            server = self._build_server() if self.current is not None else None
            http = _http1(self._build_server()) if self.http_current is not None else None
            upstream = self._build_upstream() if self.upstream is not None else None
            http_upstream = self._build_http_upstream() if self.http_upstream is not None else None
            # Read after the context above loaded the same files: what the admin port gets was just checked.
            admin = self.admin.read() if self.admin is not None and server is not None else None
        except UserError as e:
            self.counters.reloads["failed"] = self.counters.reloads.get("failed", 0) + 1
            log.error("tls_reload_failed", why=why, error=str(e), note="the previous certificates stay in use")
            return False
        if server is not None:
            self.current = server
        if http is not None:
            self.http_current = http
        if admin is not None:
            assert self.admin is not None
            self.admin.use(admin)
        if upstream is not None:
            self.upstream = upstream
        if http_upstream is not None:
            self.http_upstream = http_upstream
        if (upstream is not None or http_upstream is not None) and self.on_upstream is not None:
            self.on_upstream(self.upstream, self.http_upstream)
        self.counters.reloads["ok"] = self.counters.reloads.get("ok", 0) + 1
        log.info("tls_reloaded", why=why, listen=server is not None, upstream=upstream is not None,
                 http_upstream=http_upstream is not None, admin=admin is not None)  # fmt: skip
        warn_out_of_date(self._certs)
        return True

    def changed(self) -> bool:
        """Whether a certificate file changed since the last (re)load (a few stat calls)."""
        return _signature(self._files) != self._signature


def out_of_date(cert: Path, now: float | None = None) -> str | None:
    """Why the (first) certificate in ``cert`` is not valid now, by its dates ("expired at ...", "not valid
    before ..."), or None (valid, or its dates unreadable here).

    OpenSSL loads an expired certificate without a word, and every client then refuses the handshake: the
    proxy looks as if it refused them. The ssl module has no public reader of a certificate's dates, only
    the one its own tests use, ``_ssl._test_decode_cert``; where that is gone, nothing is said."""
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return None
    try:
        fields = decode(str(cert))
        not_before, not_after = ssl.cert_time_to_seconds(fields["notBefore"]), ssl.cert_time_to_seconds(fields["notAfter"])
    except (OSError, ssl.SSLError, KeyError, ValueError, TypeError):
        return None  # (a file that loads but does not decode so: the handshake is the judge)
    now = time.time() if now is None else now
    if now >= not_after:
        return f"expired at {_utc(not_after)}"
    if now < not_before:
        return f"not valid before {_utc(not_before)}"
    return None


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def warn_out_of_date(certs: Sequence[tuple[str, Path]]) -> None:
    """Log a warning for each of ``certs`` (flag, path) whose dates make it invalid now: its peers will refuse it."""
    for flag, path in certs:
        problem = out_of_date(path)
        if problem is not None:
            peers = "clients" if flag == "--tls-cert" else "the upstream"
            log.warning("tls_certificate_out_of_date", flag=flag, path=str(path), problem=problem,
                        note=f"{peers} will refuse the handshake: renew it (a reload reads it again)")  # fmt: skip


def tls_certs(cfg: TlsFlags) -> tuple[tuple[str, Path], ...]:
    """The certificates the proxy presents (to clients, to the upstream), with their flags: those whose dates
    are checked at start and at each reload."""
    return tuple((flag, path) for flag, path in (("--tls-cert", cfg.tls_cert), ("--upstream-cert", cfg.upstream_cert))
                 if path is not None)  # fmt: skip


def _http1(ctx: ssl.SSLContext | None) -> ssl.SSLContext | None:
    if ctx is not None:
        ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def listen_ssl(cfg: TlsFlags) -> ssl.SSLContext | None:
    """The TLS context clients are served with (ALPN h2 only: gRPC), or None for h2c."""
    if cfg.tls_cert is None and cfg.tls_key is None:
        if cfg.tls_client_ca is not None:
            raise UserError("--tls-client-ca needs --tls-cert/--tls-key (client certificates are part of TLS)")
        return None
    if cfg.tls_cert is None or cfg.tls_key is None:
        raise UserError("--tls-cert and --tls-key go together")
    return server_context(cfg.tls_cert, cfg.tls_key, cfg.tls_client_ca)


def upstream_ssl(cfg: TlsFlags, *, http: bool = False) -> ssl.SSLContext | None:
    """The TLS context for connections to Triton's gRPC port (``http``: to its HTTP port, ``--http-upstream-tls``,
    ALPN http/1.1), certificate and host name verified, or None for plaintext.

    Apart because Triton serves TLS on its gRPC port only (its HTTP port has none; HTTPS is a front's): one
    flag for both made a TLS gRPC Triton impossible to record with its HTTP port."""
    tls_only = (cfg.upstream_ca, cfg.upstream_cert, cfg.upstream_key, cfg.upstream_server_name)
    if not cfg.upstream_tls and not cfg.http_upstream_tls and any(v is not None for v in tls_only):
        raise UserError("--upstream-ca/--upstream-cert/--upstream-key/--upstream-server-name need --upstream-tls "
                        "or --http-upstream-tls")  # fmt: skip
    if not (cfg.http_upstream_tls if http else cfg.upstream_tls):
        return None
    if (cfg.upstream_cert is None) != (cfg.upstream_key is None):
        raise UserError("--upstream-cert and --upstream-key go together")
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cfg.upstream_ca)
    except (OSError, ssl.SSLError) as e:
        raise UserError(f"cannot load --upstream-ca {cfg.upstream_ca}: {getattr(e, 'strerror', None) or e}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cfg.upstream_cert is not None and cfg.upstream_key is not None:
        load_chain(ctx, cfg.upstream_cert, cfg.upstream_key, "--upstream-cert/--upstream-key")
    ctx.set_alpn_protocols(["http/1.1"] if http else ["h2"])
    return ctx




def tls_files(cfg: TlsFlags) -> tuple[Path | None, ...]:
    """The certificate files a reload reads again (and the watch checks for changes)."""
    return (cfg.tls_cert, cfg.tls_key, cfg.tls_client_ca, cfg.upstream_ca, cfg.upstream_cert, cfg.upstream_key)

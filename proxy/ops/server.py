"""Running the recording proxy: start-up checks, the listening socket, signals, drain, shutdown."""

from __future__ import annotations

import asyncio
import functools
import itertools
import secrets
import signal
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from proxy import __version__
from proxy.capture.budget import MIB, rotate_for_budget
from proxy.capture.retention import prepare_directory
from proxy.capture.writer import CaptureWriter, WriterOptions
from proxy.ops import warmup
from proxy.ops.eventloop import running_loop_name
from proxy.ops.evidence import EvidenceCollector, EvidenceSpec, probe_metrics
from proxy.ops.observe import MetricsServer, ProxyMetrics, RecordObserver
from proxy.ops.tls import ReloadableTls, listen_ssl, tls_certs, tls_files, upstream_ssl
from proxy.ops.upkeep import Upkeep
from proxy.relay.contract import CoreFactory
from proxy.relay.core import H2Core
from proxy.relay.http1 import Http1Core
from proxy.relay.options import RelayOptions
from proxy.relay.relay import Relay
from proxy.triton.metadata import DEFAULT_REDACT
from proxy.wire import frames as wire
from replay import readyfile
from replay.capture import events as ev
from replay.capture import naming
from replay.compiled import active as compiled_modules
from replay.errors import RecordingIncomplete, UpstreamError, UserError
from replay.hostport import cannot_listen, format_hostport, is_loopback, parse_hostport

log = structlog.get_logger("triton_tap.proxy")


@dataclass
class ProxyConfig:
    """Everything ``triton-tap record`` takes."""

    #: The gRPC pair; ``""`` for both when only HTTP is relayed (as ``capture_start`` says it).
    listen: str = "127.0.0.1:8011"
    upstream: str = "127.0.0.1:8001"
    #: ``--http-listen`` / ``--http-upstream``: Triton's HTTP port relayed too (or alone), else None.
    http_listen: str | None = None
    http_upstream: str | None = None
    capture_dir: Path = Path("captures")
    payload: str = "meta"
    payload_cap: int | None = None
    #: ``--payload-store``: where ``full`` payloads go: ``side`` (a raw side file per capture file) or ``inline``.
    payload_store: str = "side"
    rotate_mb: float | None = None
    gzip_rotated: bool = False
    #: how written batches are stored: ``none`` (plain JSONL), ``zstd`` or ``gzip`` (one frame per batch)
    compress: str = "none"
    drain_timeout: float = 10.0
    connect_timeout: float = 3.0
    redact: tuple[str, ...] = DEFAULT_REDACT
    metrics: str | None = None  # HOST:PORT for the Prometheus /metrics endpoint, or None
    evidence: EvidenceSpec | None = None
    #: ``--redact-input``: input tensors kept out of ``full`` payloads (shape, datatype, size, keyed hash stay).
    redact_inputs: tuple[str, ...] = ()
    #: HMAC key of redacted tensors; None: a random one per capture, recorded in ``capture_start``.
    redact_salt: str | None = None
    #: TLS towards clients (both or neither); h2c when unset.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: TLS towards Triton; ``upstream_ca`` None means the system trust store.
    upstream_tls: bool = False
    http_upstream_tls: bool = False
    upstream_ca: Path | None = None
    upstream_cert: Path | None = None
    upstream_key: Path | None = None
    #: SNI, certificate name and ``:authority`` sent upstream (default: the upstream host, client's authority).
    upstream_server_name: str | None = None
    #: ``--admin HOST:PORT``: the admin gRPC service (proxy/admin/), or None (off).
    admin: str | None = None
    # -- unattended operation (docs/operating.md) --
    #: ``--tls-client-ca``: require and verify client certificates on the listening side.
    tls_client_ca: Path | None = None
    #: ``--tls-watch``: check the TLS files for changes this often (seconds; 0: only on SIGHUP).
    tls_watch_s: float = 10.0
    #: ``--max-total-mb``: retention budget of the capture directory.
    max_total_mb: float | None = None
    #: ``--min-free-mb``: pause writing below this much free space (None: min(64 MiB, 5 % of the filesystem)).
    min_free_mb: float | None = None
    #: ``record --workers N``: how many processes share the listening port (see :mod:`proxy.ops.workers`).
    workers: int = 1
    #: ``--event-loop``: ``auto`` (uvloop when installed), ``uvloop`` or ``asyncio`` (see :mod:`proxy.ops.eventloop`).
    event_loop: str = "auto"
    #: Set by the supervisor in each worker process: which worker this is (0-based), and the set's stem.
    worker: int | None = None
    capture_set: str | None = None
    #: ``--ready-file``: one JSON line written once clients can connect, removed at shutdown (:mod:`replay.readyfile`).
    ready_file: Path | None = None


def _with_evidence(emit: Callable[[Any], None], notify: Callable[[ev.CallCancelled], None]) -> Callable[[Any], None]:
    """The capture sink, also telling the evidence collector about every cancel forwarded upstream."""

    def sink(record: Any) -> None:
        emit(record)
        if type(record) is ev.CallCancelled and record.forwarded_upstream:
            try:
                notify(record)
            except Exception as e:  # evidence is an observer: it must never fail the call
                log.warning("evidence_failed", call=record.call, error=f"{type(e).__name__}: {e}")

    return sink


async def _stop_accepting(servers: list[asyncio.base_events.Server]) -> None:
    """Close the listening sockets, after the connections already accepted have their transports.

    asyncio's own loop accepts in the listening socket's reader callback and makes each transport in a task
    of its own, a loop turn later. A close between the two (a stop whose turn came in the same batch as the
    accept: a SIGTERM with a client connecting) fails that task's attach to the closed server: the client
    was accepted, then dropped unanswered, and on 3.13.0 the orphaned transport's ``__del__`` printed a
    TypeError to stderr. So the reader goes first, the accepts already made run (their tasks were queued
    before this one's next step), and only then the close; one more turn runs their ``connection_made``, so
    they join the relays' connections that the stop ends. uvloop, not a selector loop, is left as it was.
    """
    loop = asyncio.get_running_loop()
    selector = isinstance(loop, asyncio.selector_events.BaseSelectorEventLoop)
    if selector:
        for srv in servers:
            for sock in srv.sockets:
                loop.remove_reader(sock.fileno())
        await asyncio.sleep(0)
    for srv in servers:
        srv.close()
    if selector:
        await asyncio.sleep(0)


def _guarded_mark(mark: Callable[[str], None]) -> Callable[[str], None]:
    """The evidence collector's pre-cancel hook, unable to break the relay's cancel path."""

    def before_cancel(call: str) -> None:
        try:
            mark(call)
        except Exception as e:  # as in the sink above
            log.warning("evidence_failed", call=call, error=f"{type(e).__name__}: {e}")

    return before_cancel


def budget_options(cfg: ProxyConfig) -> dict[str, Any]:
    """Rotation, ``--max-total-mb`` and ``--min-free-mb`` as :class:`WriterOptions` fields (UserError if they clash)."""
    rotate = int(cfg.rotate_mb * MIB) if cfg.rotate_mb else None
    max_total = int(cfg.max_total_mb * MIB) if cfg.max_total_mb else None
    if max_total is not None:
        try:
            rotate = rotate_for_budget(max_total, rotate)
        except ValueError as e:
            raise UserError(f"--max-total-mb {cfg.max_total_mb:g} with --rotate-mb {cfg.rotate_mb:g}: {e}") from None
    min_free = int(cfg.min_free_mb * MIB) if cfg.min_free_mb is not None else None
    return {"rotate_bytes": rotate, "max_total_bytes": max_total, "min_free_bytes": min_free}



def check_upstream(
    host: str, port: int, timeout: float, tls: ssl.SSLContext | None = None, server_name: str | None = None,
    *, h2: bool = False,
) -> None:
    """Fail fast, with one line, when nothing listens upstream at start (or its TLS does not verify); ``h2``:
    nor when what listens does not speak HTTP/2 (a gRPC upstream).

    Why ``h2``: a TLS port reached in plaintext (or a plaintext one with --upstream-tls) accepts the
    connection and then closes it, so a connect alone passed, and every call then failed with
    "upstream closed the connection before speaking HTTP/2", nothing naming TLS; ``replay send`` even
    counted the status its own relay made up for each as an outcome it observed.
    """
    where = format_hostport(host, port)
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            if tls is None:
                if h2:
                    _answers_h2(raw, where, tls=False)
                return
            with tls.wrap_socket(raw, server_hostname=server_name or host) as sock:
                if h2:
                    _answers_h2(sock, where, tls=True)
    except ssl.CertificateError as e:  # (before SSLError, of which it is one: its message says what failed)
        raise UpstreamError(f"upstream {where}: TLS certificate rejected: {e.verify_message or e}") from None
    except ssl.SSLError as e:
        raise UpstreamError(f"upstream {where}: TLS handshake failed: {e.reason or e}") from None
    except OSError as e:
        raise UpstreamError(f"upstream {where} is unreachable: {e.strerror or e}") from None


#: How long the start check waits for the upstream's first HTTP/2 frame. A server that says nothing by then is
#: let be (a loaded one may be slow to): only an answer that is no HTTP/2, or a close, fails the start.
H2_PROBE_S = 0.5


def _answers_h2(sock: socket.socket, where: str, *, tls: bool) -> None:
    """The HTTP/2 preface and an empty SETTINGS sent; the peer's first frame must be its SETTINGS (RFC 9113 3.4)."""
    sock.sendall(wire.PREFACE + wire.frame(wire.SETTINGS, 0, 0, b""))
    sock.settimeout(min(H2_PROBE_S, sock.gettimeout() or H2_PROBE_S))
    head = b""
    while len(head) < 9:
        try:
            chunk = sock.recv(9 - len(head))
        except TimeoutError:
            return
        if not chunk:
            break
        head += chunk
    if len(head) == 9 and head[3] == wire.SETTINGS:
        return
    if not tls and (not head or head[:1] == b"\x15"):
        # A close at once, or a TLS alert (0x15): what a TLS port does with a plaintext client hello.
        hint = "it speaks TLS? give --upstream-tls"
    elif tls and not head:
        # A server requiring a client certificate closes once it finds none (TLS 1.3: after the handshake).
        hint = "it wants a client certificate (--upstream-cert, --upstream-key)? or it is no gRPC port"
    else:
        hint = "it is no gRPC port?"
    got = f"sent {head[:9]!r}" if head else "closed the connection"
    raise UpstreamError(f"upstream {where} does not speak HTTP/2: it {got} in answer to the HTTP/2 preface ({hint})")


def capture_options(cfg: ProxyConfig, salt: str, tls_listen: bool, tls_upstream: bool, client_certs: bool) -> dict[str, Any]:
    """The options recorded in ``capture_start`` (what the capture was taken with)."""
    opts: dict[str, Any] = {
        "payload": cfg.payload,
        "payload_cap": cfg.payload_cap,
        "payload_store": cfg.payload_store,
        "rotate_mb": cfg.rotate_mb,
        "gzip_rotated": cfg.gzip_rotated,
        "compress": cfg.compress,
        "drain_timeout_s": cfg.drain_timeout,
        "redact": list(cfg.redact),
        "redact_inputs": list(cfg.redact_inputs),
        # A generated salt is recorded so the capture's hashes can be recomputed from live
        # traffic; a salt the user chose is a secret and is not.
        "redact_salt": salt if cfg.redact_inputs and cfg.redact_salt is None else None,
        "redact_salt_given": cfg.redact_salt is not None,
        "tls_listen": tls_listen,
        "tls_upstream": tls_upstream,
        "tls_client_ca": client_certs,
        "max_total_mb": cfg.max_total_mb,
        "min_free_mb": cfg.min_free_mb,
        "event_loop": running_loop_name(),
        # Which compiled fast paths did the work (else why their Python versions did): a capture says
        # what produced it, as `triton-tap --version` does.
        "compiled": compiled_modules(),
    }
    if cfg.evidence is not None:
        opts["evidence"] = {
            "metrics": cfg.evidence.metrics_url,
            "log": str(cfg.evidence.log_path) if cfg.evidence.log_path else None,
            "window_s": cfg.evidence.window_s,
        }
    return opts


class RecordingProxy:
    """The proxy as an object: ``await start()``, then ``await stop()`` (tests and the CLI)."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        if bool(config.listen) != bool(config.upstream):
            raise UserError("--listen and --upstream go together (the gRPC pair)")
        if (config.http_listen is None) != (config.http_upstream is None):
            raise UserError("--http-listen and --http-upstream go together (the HTTP pair)")
        if not config.listen and config.http_listen is None:
            raise UserError("nothing to relay: give --listen/--upstream (gRPC), --http-listen/--http-upstream, or both")
        #: The gRPC pair, or None when only HTTP is relayed.
        self.grpc_addrs = (
            (parse_hostport(config.listen, "--listen", allow_port_zero=True), parse_hostport(config.upstream, "--upstream"))
            if config.listen and config.upstream else None
        )  # fmt: skip
        #: The HTTP pair, or None.
        self.http_addrs = (
            (parse_hostport(config.http_listen, "--http-listen", allow_port_zero=True),
             parse_hostport(config.http_upstream, "--http-upstream"))
            if config.http_listen is not None and config.http_upstream is not None else None
        )  # fmt: skip
        # (kept: the listening address and upstream of the first relayed port, as before)
        first = self.grpc_addrs or self.http_addrs
        assert first is not None
        self.listen_addr, self.upstream_addr = first
        self.metrics_addr = (
            parse_hostport(config.metrics, "--metrics", allow_port_zero=True) if config.metrics else None
        )
        admin_port = parse_hostport(config.admin, "--admin", allow_port_zero=True)[1] if config.admin else 0
        # Caught here, before anything is bound or created: two servers cannot share a port. The admin service's
        # grpc server binds the relay's address before the relay listens, and took its clients (health checks
        # through the proxy got UNIMPLEMENTED, HTTP clients HTTP/2 bytes).
        bound = [(name, value, port) for name, value, port in (
            ("--listen", config.listen, self.grpc_addrs[0][1] if self.grpc_addrs else 0),
            ("--http-listen", config.http_listen, self.http_addrs[0][1] if self.http_addrs else 0),
            ("--metrics", config.metrics, self.metrics_addr[1] if self.metrics_addr else 0),
            ("--admin", config.admin, admin_port),
        ) if port]  # fmt: skip
        for i, (name, value, port) in enumerate(bound):
            for other, other_value, other_port in bound[i + 1 :]:
                if port == other_port:
                    raise UserError(f"{name} {value} and {other} {other_value} use the same port")
        self.metrics_server: MetricsServer | None = None
        self.metrics: ProxyMetrics | None = None
        if config.payload not in ("none", "meta", "full"):
            raise UserError(f"--payload must be none, meta or full, got {config.payload!r}")
        if config.payload_store not in ("side", "inline"):
            raise UserError(f"--payload-store must be side or inline, got {config.payload_store!r}")
        self.writer: CaptureWriter | None = None
        #: The relay of the first relayed port (gRPC when relayed), as before; ``relays`` has them all.
        self.relay: Relay | None = None
        self.relays: list[Relay] = []
        self.http_relay: Relay | None = None
        #: The records' way to the writer, shared by the relays (made with the first).
        self._emit: Callable[[Any], None] | None = None
        self.evidence: EvidenceCollector | None = None
        self.upkeep: Upkeep | None = None
        self.admin: Any = None  # proxy.admin.service.AdminServer with --admin
        if config.admin is not None:  # refused before anything is bound (proxy/admin/address.py)
            from proxy.admin.address import admin_address

            admin_address(config.admin, config.tls_cert, config.tls_key)
        self._server: asyncio.base_events.Server | None = None
        self._servers: list[asyncio.base_events.Server] = []
        #: Bound ports: ``port`` the gRPC one (the HTTP one when only HTTP is relayed), ``http_port`` HTTP's (0: none).
        self.port = 0
        self.http_port = 0
        self._stopped = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the proxy runs on (for callers in other threads)."""
        assert self._server is not None
        return self._server.get_loop()

    @property
    def capture_path(self) -> Path:
        """The capture file being written."""
        assert self.writer is not None
        return self.writer.path

    async def start(self, *, warm_up: bool = False) -> None:
        """Check, bind and start recording; raises :class:`UserError`/:class:`UpstreamError`.

        ``warm_up``: the proxy is its process's one job (the CLI): what start-up left for the first calls to
        pay is done before clients are served (:mod:`proxy.ops.warmup`)."""
        cfg = self.config
        # Reloadable (SIGHUP, file watch: proxy/ops/upkeep.py) for new connections; open ones keep theirs.
        tls = ReloadableTls(lambda: listen_ssl(cfg), lambda: upstream_ssl(cfg), tls_files(cfg),
                            lambda: upstream_ssl(cfg, http=True), tls_certs(cfg))  # fmt: skip
        server_tls, up_tls = tls.base, tls.upstream
        await self._check(cfg, up_tls, tls.http_upstream)
        salt = cfg.redact_salt if cfg.redact_salt is not None else secrets.token_hex(16)
        # Bind before the capture exists so that a busy port leaves no empty capture behind.
        relay_box: list[Relay] = []
        http_box: list[Relay] = []
        await self._listen(server_tls, tls.http_base, relay_box, http_box)
        grpc, http = self.grpc_addrs, self.http_addrs
        listen = format_hostport(self.listen_addr[0], self.port)
        http_listen = format_hostport(http[0][0], self.http_port) if http is not None else None
        start = ev.CaptureStarted(
            t_ns=time.time_ns(), proxy_version=__version__,
            listen=listen if grpc is not None else "",
            upstream=format_hostport(*grpc[1]) if grpc is not None else "",
            options=capture_options(cfg, salt, server_tls is not None, up_tls is not None, tls.client_certs_required)
            | {"tls_http_upstream": tls.http_upstream is not None},
            capture_set=cfg.capture_set, worker=cfg.worker,
            workers=cfg.workers if cfg.worker is not None else None,
            http_listen=http_listen, http_upstream=format_hostport(*http[1]) if http is not None else None,
        )  # fmt: skip
        writer = self._open_capture(start)
        try:
            # One counter: connection (and call) ids are unique across both ports.
            ids = itertools.count(1)
            if grpc is not None:
                relay_box.append(self._relay(writer, up_tls, salt, grpc[1], H2Core, ids))
            if http is not None:
                self.http_relay = self._relay(writer, tls.http_upstream, salt, http[1], Http1Core, ids)
                http_box.append(self.http_relay)
            self.relays = relay_box + http_box
            self.relay = self.relays[0]
            self.upkeep = self._start_upkeep(tls, self.metrics)
            if cfg.admin is not None:  # record --admin (proxy/admin/): bound before clients are served
                from proxy.admin.service import Served, start_admin

                served = Served(listen=start.listen, upstream=start.upstream, tls_listen=cfg.tls_cert is not None,
                                tls_upstream=cfg.upstream_tls, writer=writer, relays=tuple(self.relays),
                                metrics=self.metrics, http_listen=start.http_listen or "",
                                http_upstream=start.http_upstream or "")  # fmt: skip
                self.admin = await start_admin(cfg.admin, served, cfg.tls_cert, cfg.tls_key, cfg.tls_client_ca)
                tls.admin = self.admin.tls  # SIGHUP and --tls-watch reload the admin port's files too
            if warm_up:
                warmup.warm_up()
            for srv in self._servers:
                await srv.start_serving()
            self._say_ready(listen, http_listen)
        except BaseException:
            if self.admin is not None:
                await self.admin.stop(0)
            writer.abandon()
            for srv in self._servers:
                srv.close()
            self._close_metrics()
            raise
        self._log_recording(start, server_tls is not None, up_tls is not None, tls.client_certs_required)

    async def _check(self, cfg: ProxyConfig, up_tls: ssl.SSLContext | None, http_up_tls: ssl.SSLContext | None) -> None:
        """What must hold before anything is bound or written (TLS material was loaded by the caller):
        the budget flags, the capture directory, the ready file's directory, a reachable upstream."""
        budget_options(cfg)
        if cfg.ready_file is not None:
            readyfile.prepare(cfg.ready_file)
        prepare_directory(cfg.capture_dir)
        loop = asyncio.get_running_loop()
        for pair in (self.grpc_addrs, self.http_addrs):
            if pair is not None:
                await loop.run_in_executor(None, functools.partial(
                    check_upstream, *pair[1], cfg.connect_timeout, up_tls if pair is self.grpc_addrs else http_up_tls,
                    cfg.upstream_server_name, h2=pair is self.grpc_addrs))  # fmt: skip
        if cfg.evidence is not None and cfg.evidence.metrics_url is not None:
            why = await loop.run_in_executor(None, probe_metrics, cfg.evidence.metrics_url, cfg.connect_timeout)
            if why is not None:
                # Only a warning: Triton's metrics may come up later; each evidence record says what it saw.
                log.warning("evidence_metrics_unreachable", url=cfg.evidence.metrics_url, error=why)

    async def _listen(
        self, server_tls: ssl.SSLContext | None, http_tls: ssl.SSLContext | None, relay_box: list[Relay],
        http_box: list[Relay],
    ) -> asyncio.base_events.Server:  # fmt: skip
        """Bind the listening sockets (not serving yet: the boxes get the relays first) and the
        metrics endpoint, if any; the first server (gRPC's when relayed) is returned."""
        for pair, box in ((self.grpc_addrs, relay_box), (self.http_addrs, http_box)):
            if pair is None:
                continue
            host, port = pair[0]
            try:
                srv = await asyncio.get_running_loop().create_server(
                    lambda box=box: box[0].protocol_factory(), host, port, reuse_address=True,
                    start_serving=False, ssl=http_tls if box is http_box else server_tls,
                    # Workers of one set bind the same port; the kernel spreads connections over them.
                    reuse_port=self.config.worker is not None,
                )  # fmt: skip
            except OSError as e:
                for bound in self._servers:
                    bound.close()
                raise cannot_listen(format_hostport(host, port), e) from None
            self._servers.append(srv)
            bound_port = srv.sockets[0].getsockname()[1]
            if box is http_box:
                self.http_port = bound_port
            if not self.port:
                self.port = bound_port
        self._server = self._servers[0]
        if self.metrics_addr is not None:
            self.metrics = ProxyMetrics()
            try:
                self.metrics_server = MetricsServer(self.metrics, *self.metrics_addr)
            except OSError as e:
                for srv in self._servers:
                    srv.close()
                raise UserError(f"cannot serve metrics on {self.config.metrics}: {e.strerror or e}") from None
        return self._server

    def _open_capture(self, start: ev.CaptureStarted) -> CaptureWriter:
        """Create the capture file (its first record is ``start``); on failure nothing stays bound."""
        cfg = self.config
        stem = naming.worker_stem(cfg.capture_set, cfg.worker) if cfg.worker is not None and cfg.capture_set else None
        self.writer = CaptureWriter(
            WriterOptions(directory=cfg.capture_dir, gzip_rotated=cfg.gzip_rotated, compress=cfg.compress, stem=stem,
                          **budget_options(cfg)), start
        )
        try:
            self.writer.open()
        except OSError as e:
            for srv in self._servers:
                srv.close()
            self._close_metrics()
            raise UserError(f"cannot create a capture file in {str(cfg.capture_dir)!r}: {e.strerror or e}") from None
        return self.writer

    def _relay(
        self, writer: CaptureWriter, up_tls: ssl.SSLContext | None, salt: str, upstream: tuple[str, int],
        core: CoreFactory, ids: itertools.count[int],
    ) -> Relay:
        """A port's relay (``core``: its protocol), its records going through the observer (and the evidence
        collector) to ``writer``: the relays of both ports share the observer, the collector and ``ids``."""
        cfg = self.config
        metrics = self.metrics
        if self._emit is None:
            if metrics is not None:
                metrics.attach_writer(writer.stats)
            # One observer between the relays and the writer: the call-end log line and the metrics.
            emit: Callable[[Any], None] = RecordObserver(writer.emit, metrics)
            if cfg.evidence is not None:
                self.evidence = EvidenceCollector(cfg.evidence, writer.emit)
                emit = _with_evidence(emit, self.evidence.notify)
            self._emit = emit
        emit = self._emit
        relay = Relay(
            upstream,
            emit,
            RelayOptions(
                payload=cfg.payload, payload_cap=cfg.payload_cap, payload_store=cfg.payload_store, redact=cfg.redact,
                redact_inputs=frozenset(cfg.redact_inputs), redact_key=salt.encode(),
            ),
            upstream_tls=up_tls,
            upstream_server_name=cfg.upstream_server_name,
            conn_prefix="c" if cfg.worker is None else f"w{cfg.worker}c",
            # The observer wants messages only for the metrics; the evidence collector never does.
            emit_message=writer.emit if metrics is None else None,
            core_factory=core,
            conn_ids=ids,
        )  # fmt: skip
        if self.evidence is not None:
            relay.before_cancel = _guarded_mark(self.evidence.mark)
        if metrics is not None:
            relay.after_read = metrics.forwarded
        return relay

    def _say_ready(self, listen: str, http_listen: str | None) -> None:
        """``--ready-file``: clients can connect now (the socket listens; admin and metrics are up)."""
        if self.config.ready_file is None:
            return
        assert self.writer is not None
        metrics = format_hostport(self.metrics_addr[0], self.metrics_server.port) if self.metrics_server and self.metrics_addr else None
        extra = {"http_listen": http_listen} if http_listen is not None else {}
        readyfile.write(self.config.ready_file, listen if self.grpc_addrs is not None else "", **extra,
                        admin=self.admin.address if self.admin else None, metrics=metrics,
                        capture=str(self.writer.path))  # fmt: skip

    def _log_recording(self, start: ev.CaptureStarted, tls: bool, upstream_tls: bool, client_certs: bool) -> None:
        assert self._server is not None and self.writer is not None
        cfg = self.config
        extra: dict[str, Any] = {}
        if self.metrics_server is not None and self.metrics_addr is not None:
            extra["metrics"] = format_hostport(self.metrics_addr[0], self.metrics_server.port)
        if self.admin is not None:
            # The bound port (a free one for --admin HOST:0; port + k for worker k): where status, tail and mark go.
            extra["admin"] = self.admin.address
        if cfg.worker is not None:
            extra["worker"] = cfg.worker
        if not tls and not all(is_loopback(s.getsockname()[0]) for srv in self._servers for s in srv.sockets):
            # Clients' metadata (tokens included) and tensors would cross the network in clear.
            log.warning("listening_without_tls", listen=start.listen, hint="use --tls-cert/--tls-key or a loopback address")
        log.info(
            "recording",
            listen=start.listen,
            upstream=start.upstream,
            http_listen=start.http_listen,
            http_upstream=start.http_upstream,
            capture=str(self.writer.path),
            payload=cfg.payload,
            **extra,
            tls=tls,
            upstream_tls=upstream_tls,
            client_certs=client_certs,
            min_free_bytes=self.writer.ops.min_free,
            max_total_mb=cfg.max_total_mb,
            compiled=start.options["compiled"],
        )

    async def stop(self) -> None:
        """Drain (bounded by ``drain_timeout``), end what is left as ``proxy_shutdown``, close."""
        assert self.relay is not None and self.writer is not None and self._server is not None
        if self._stopped:
            return
        self._stopped = True
        await _stop_accepting(self._servers)
        if self.config.ready_file is not None:  # no longer accepting connections
            readyfile.remove(self.config.ready_file)
        relays = self.relays or [self.relay]
        for relay in relays:
            relay.begin_shutdown()
        deadline = time.monotonic() + self.config.drain_timeout
        drained = True
        for relay in relays:
            drained = await relay.wait_idle(max(0.0, deadline - time.monotonic())) and drained
        left = sum(relay.open_calls for relay in relays)
        if not drained:
            log.warning("drain_timeout", open_calls=left, timeout_s=self.config.drain_timeout)
        for relay in relays:
            relay.abort_all("proxy_shutdown")
        # Server.wait_closed() semantics differ across Python versions (3.11 may wait on client
        # connections forever); wait for our own tunnels instead, bounded, then cut what is left.
        deadline = time.monotonic() + 2.0
        while any(relay.tunnels for relay in relays) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for relay in relays:
            relay.hard_close()
        if self.evidence is not None:
            await self.evidence.close()
        if self.upkeep is not None:
            await self.upkeep.close()
        await self.writer.close({"calls.open_at_shutdown": left})
        if self.admin is not None:  # after capture_end, so Tail streams deliver it
            await self.admin.stop()
        self._close_metrics()
        if self.writer.not_closed is None:
            log.info("capture_closed", capture=[str(p) for p in self.writer.paths if p.exists()])

    # -- upkeep: SIGHUP, certificate reload, capture budget (docs/operating.md) -----------------

    def _start_upkeep(self, tls: ReloadableTls, metrics: ProxyMetrics | None) -> Upkeep:
        assert self.writer is not None and self.relay is not None
        relays = list(self.relays)

        def set_upstream(grpc_ctx: ssl.SSLContext | None, http_ctx: ssl.SSLContext | None) -> None:
            for relay in relays:
                # read per new upstream connection
                relay.upstream_tls = http_ctx if relay is self.http_relay else grpc_ctx

        tls.on_upstream = set_upstream
        upkeep = Upkeep(self.writer, tls, self.config.tls_watch_s)
        if metrics is not None:
            metrics.attach(upkeep.collect)
        upkeep.start()
        return upkeep

    def reload(self, why: str = "signal") -> None:
        """SIGHUP: new capture file, certificates read again for new connections (call on the loop)."""
        if self.upkeep is not None and not self._stopped:
            self.upkeep.reload(why)

    def _close_metrics(self) -> None:
        if self.metrics_server is not None:
            self.metrics_server.close()
            self.metrics_server = None


async def run(config: ProxyConfig) -> None:
    """Run until SIGTERM/SIGINT, then drain and close the capture (the CLI's main)."""
    proxy = RecordingProxy(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Before start(): the ready file tells a script it may signal us now, and a SIGTERM that came before the
    # handler would kill the process with the capture open and the ready file left behind.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, proxy.reload)  # logrotate's postrotate convention
    await proxy.start(warm_up=True)
    try:
        await stop.wait()
        log.info("shutting_down", open_calls=sum(relay.open_calls for relay in proxy.relays))
    finally:
        await proxy.stop()
    if proxy.writer is not None and proxy.writer.not_closed is not None:
        # Not a clean stop, whatever the signal was: the capture lost its end and the records before it.
        n, why = proxy.writer.not_closed
        raise RecordingIncomplete(f"the capture {str(proxy.writer.path)!r} was not closed: {n} record(s), its "
                                  f"capture_end among them, could not be written ({why})")  # fmt: skip

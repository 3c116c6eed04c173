"""The admin gRPC service of a running proxy (``record --admin HOST:PORT``): Status, Rotate, Mark, Tail.

It runs on the proxy's own event loop (grpc.aio) and only reads the relay's state; records reach
Tail streams through :class:`proxy.admin.hub.TapHub`, fed by the capture writer's thread, so the
relay does no work for watchers. The address must be loopback unless the proxy serves TLS
(``--tls-cert/--tls-key``, reused here): the stream shows live request metadata. With
``--tls-client-ca`` the admin port requires client certificates signed by it, as the relay does, and
a reload of the TLS files (SIGHUP, ``--tls-watch``) reaches the admin port too (:class:`AdminTls`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import structlog

from proxy import __version__
from proxy.admin.address import admin_address
from proxy.admin.hub import MAX_QUEUE, Dropped, TailFilter, TapHub
from proxy.admin.pb import admin_pb2 as pb
from proxy.admin.pb import admin_pb2_grpc as pb_grpc
from proxy.capture.writer import NotWritten
from replay.aioserver import Handlers
from replay.capture import events as ev
from replay.errors import UserError
from replay.hostport import bind_error, format_hostport, os_reason

if TYPE_CHECKING:
    from proxy.capture.writer import CaptureWriter
    from proxy.ops.observe import ProxyMetrics
    from proxy.relay.relay import Relay

log = structlog.get_logger("triton_tap.admin")


@dataclass(frozen=True, slots=True)
class Served:
    """What the service serves of a running proxy, handed over by whoever runs it: the parts it reads
    (the relay's open calls, the metrics) and drives (the writer: rotate, mark, the tap), and what Status
    says of the proxy itself (fixed once it listens)."""

    #: The gRPC pair ("" for both when only HTTP is relayed, as ``capture_start`` says them).
    listen: str
    upstream: str
    tls_listen: bool
    tls_upstream: bool
    writer: CaptureWriter
    #: Every relay of the proxy (gRPC's, HTTP's): their open calls are the status's.
    relays: tuple[Relay, ...]
    metrics: ProxyMetrics | None
    #: The HTTP pair, "" for both when no HTTP is relayed.
    http_listen: str = ""
    http_upstream: str = ""


class AdminServicer(pb_grpc.AdminServiceServicer):
    """The four RPCs, over one running proxy's :class:`Served` parts."""

    def __init__(self, served: Served, hub: TapHub, handlers: Handlers) -> None:
        self.served = served
        self.hub = hub
        self.handlers = handlers
        self.t0 = time.monotonic()

    def _open_calls(self) -> list[Any]:
        return [c for r in self.served.relays for t in list(r.tunnels) for c in list(t.calls.values())]

    async def Status(self, request: pb.StatusRequest, context: Any) -> pb.StatusResponse:
        self.handlers.enter()
        served = self.served
        writer, metrics = served.writer, served.metrics
        calls = self._open_calls()
        snapshots = {c.id: c.inflight.snapshot() for c in calls}
        models = self.hub.recent_models({call: set(in_flight) for call, (in_flight, _r) in snapshots.items()})
        kinds, causes, dropped = writer.counts()
        counters = pb.Counters(records=kinds, calls_by_cause=causes, dropped=dropped)
        if metrics is not None:
            for i, d in enumerate(("c2s", "s2c")):
                counters.messages[d] = metrics.messages[i]
                counters.message_bytes[d] = metrics.bytes[i]
        subs, sent, lost = self.hub.stats()
        first, nxt = self.hub.recent_range()
        open_calls = []
        for c in sorted(calls, key=lambda c: c.t0):
            in_flight, responded = snapshots[c.id]
            latest, by_id = models.get(c.id, ("", {}))
            # `executing` is responded's deprecated first name, still filled for v1 clients (admin.proto).
            open_calls.append(pb.OpenCall(call=c.id, method=c.method, model=latest, age_ms=c.elapsed_ms(),
                                          in_flight=in_flight, responded=responded, executing=responded,
                                          in_flight_models=[by_id.get(rid, "") for rid in in_flight]))  # fmt: skip
        return pb.StatusResponse(
            version=__version__, uptime_s=time.monotonic() - self.t0, listen=served.listen, upstream=served.upstream,
            tls_listen=served.tls_listen, tls_upstream=served.tls_upstream, open_calls=open_calls,
            counters=counters, capture_files=[str(x) for x in list(writer.paths) if x.exists()], writer_queue=writer.backlog,
            tail=pb.TailStats(subscribers=subs, records_sent=sent, records_dropped=lost),
            recent_first_seq=first, next_seq=nxt, http_listen=served.http_listen, http_upstream=served.http_upstream,
        )  # fmt: skip

    async def Rotate(self, request: pb.RotateRequest, context: Any) -> pb.RotateResponse:
        self.handlers.enter()
        try:
            closed, new = await self.served.writer.rotate()
        except RuntimeError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except OSError as e:
            await context.abort(grpc.StatusCode.INTERNAL, f"rotation failed: {e.strerror or e}")
        log.info("capture_rotated", closed=str(closed), new=str(new))
        return pb.RotateResponse(closed_file=str(closed), new_file=str(new))

    async def Mark(self, request: pb.MarkRequest, context: Any) -> pb.MarkResponse:
        self.handlers.enter()
        t_ns = time.time_ns()
        try:
            stored = self.served.writer.emit_confirmed(ev.MarkRecorded(t_ns=t_ns, note=request.note,
                                                                       labels=dict(request.labels)))  # fmt: skip
        except RuntimeError as e:  # the proxy is stopping: an OK here would claim a mark no file holds
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{e} (the proxy is stopping): not marked")
        # OK only once the mark is in the capture file: queued is not written (a pause for low free space, a
        # full disk or a vanished directory drops it into a gap count).
        try:
            await stored
        except NotWritten as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"not marked: {e}")
        return pb.MarkResponse(t_ns=t_ns)

    async def Tail(self, request: pb.TailRequest, context: Any) -> AsyncIterator[pb.TailResponse]:
        self.handlers.enter()
        f = request.filter
        flt = TailFilter(models=frozenset(f.models), methods=frozenset(f.methods),
                         request_ids=frozenset(f.request_ids), kinds=frozenset(f.kinds))  # fmt: skip
        limit = min(request.max_queue, MAX_QUEUE) if request.max_queue > 0 else MAX_QUEUE
        sub, first, lost = self.hub.subscribe(
            flt, from_seq=request.from_seq if request.HasField("from_seq") else None, max_queue=limit,
            open_methods={c.id: c.method for c in self._open_calls()},
        )  # fmt: skip
        # Read once, here: the finally below may run after grpc released the call (a client that cancels, or a
        # stop, while this generator waits at a yield: asyncio closes it later, in a task of its own), and
        # context.peer() then dereferences the released call (grpc 1.85's aio server: a segfault of the proxy).
        peer = context.peer()
        log.info("tail_started", peer=peer, first_seq=first)
        try:
            yield pb.TailResponse(started=pb.TailStarted(first_seq=first, from_seq_lost=lost))
            while True:
                items = await sub.next_items()
                if not items:  # the hub closed (the proxy stops) and everything was delivered
                    if sub.error is not None:
                        await context.abort(grpc.StatusCode.INTERNAL, sub.error)
                    return
                for item in items:
                    if isinstance(item, Dropped):
                        d = pb.TailDropped(count=item.count, first_seq=item.first_seq, last_seq=item.last_seq)
                        yield pb.TailResponse(dropped=d)
                    else:
                        seq, kind, line = item
                        yield pb.TailResponse(record=pb.TailRecord(seq=seq, kind=kind, json=line))
        finally:
            self.hub.unsubscribe(sub)
            log.info("tail_ended", peer=peer, sent=sub.sent, dropped=sub.dropped)


class AdminServer:
    """The grpc.aio server of one proxy."""

    def __init__(self, server: Any, port: int, hub: TapHub, host: str, handlers: Handlers,
                 tls: AdminTls | None = None) -> None:  # fmt: skip
        self.server = server
        #: Its TLS files, read again by the proxy's reloads (None: plaintext on loopback).
        self.tls = tls
        self.handlers = handlers
        self.port = port
        self.hub = hub
        self.address = format_hostport(host, port)

    async def stop(self, grace: float = 2.0) -> None:
        """Let Tail streams deliver what is queued (the capture_end included), then stop; handlers still
        finishing get as long again."""
        self.hub.close()
        await self.handlers.stop(self.server, grace)


class AdminTls:
    """The admin port's TLS: the proxy's ``--tls-cert/--tls-key`` and, with ``--tls-client-ca``, client
    certificates required as on the relay's port.

    grpc's dynamic credentials ask :meth:`_fetch` before each new handshake for a configuration to
    switch to: a reload (:class:`proxy.ops.tls.ReloadableTls`) reads the files again (:meth:`read`) and
    leaves the result for that (:meth:`use`), so new admin connections get the new files while open
    ones keep theirs, and the server is not restarted (a Tail stream goes on). Whether client
    certificates are required is fixed for the server's life, as on the relay's port.
    """

    def __init__(self, cert: Path, key: Path, client_ca: Path | None) -> None:
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self._lock = threading.Lock()  # _fetch runs on grpc's threads, use on the event loop's
        self._pending: Any = None
        self.initial: Any = self.read()

    def read(self) -> Any:
        """The files as a ``grpc.ServerCertificateConfiguration``; UserError if they cannot be read."""
        try:
            pair = (self.key.read_bytes(), self.cert.read_bytes())
            roots = self.client_ca.read_bytes() if self.client_ca is not None else None
        except OSError as e:
            raise UserError(f"cannot read --tls-cert/--tls-key/--tls-client-ca for --admin: {e.strerror or e}") from None
        return grpc.ssl_server_certificate_configuration([pair], root_certificates=roots)

    def use(self, material: object) -> None:
        """Serve new connections with ``material`` (from :meth:`read`)."""
        with self._lock:
            self._pending = material

    def _fetch(self) -> Any:
        # None: keep the current configuration (grpc calls this before every handshake).
        with self._lock:
            config, self._pending = self._pending, None
        return config

    def credentials(self) -> Any:
        """Server credentials that follow :meth:`use`."""
        return grpc.dynamic_ssl_server_credentials(
            self.initial, self._fetch, require_client_authentication=self.client_ca is not None
        )


async def start_admin(
    address: str, served: Served, tls_cert: Path | None, tls_key: Path | None, tls_client_ca: Path | None = None
) -> AdminServer:
    """Bind ``address`` (``--admin``; TLS with the proxy's own ``--tls-cert/--tls-key``, client certificates
    required with its ``--tls-client-ca``) and serve the running proxy's ``served`` parts; UserError if impossible."""
    host, port, tls = admin_address(address, tls_cert, tls_key)
    # Tried first with a plain socket: grpc's own bind failure writes a C-core log line to stderr (E-level, which
    # GRPC_VERBOSITY=ERROR still shows) before this refusal, which came as two lines.
    if port and (error := bind_error(host, port)) is not None:
        raise UserError(f"cannot serve --admin on {address}: {os_reason(error)}")
    admin_tls = AdminTls(tls_cert, tls_key, tls_client_ca) if tls and tls_cert and tls_key else None
    hub = TapHub()
    handlers = Handlers()
    # Not SO_REUSEPORT (grpc's default): a second proxy given the same --admin would share the port, and each
    # command would reach one of them at random. Here the second one cannot start.
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    pb_grpc.add_AdminServiceServicer_to_server(AdminServicer(served, hub, handlers), server)  # type: ignore[no-untyped-call]
    where = format_hostport(host, port)
    try:
        if admin_tls is not None:
            bound = server.add_secure_port(where, admin_tls.credentials())
        else:
            bound = server.add_insecure_port(where)
    except RuntimeError as e:  # grpc's "Failed to bind to address ...; set GRPC_VERBOSITY=debug ..."
        why = "address in use or not available" if "Failed to bind" in str(e) else str(e)
        raise UserError(f"cannot serve --admin on {address}: {why}") from None
    if not bound:
        raise UserError(f"cannot serve --admin on {address}: address in use or not available")
    await server.start()
    writer = served.writer
    # The first file's capture_start is written already (the file exists before anything binds): the
    # records in memory start with it, as the file does, so a Tail --from-seq 0 is not told seq 0 is gone.
    opening = writer.opening
    if opening and opening[-1][0] + len(opening[-1][1]) == writer.written:
        for first, records, lines in opening:
            hub.publish(first, records, lines)
    else:  # (written since, or not at all: a full disk; the next record's seq)
        hub.next_seq = writer.written
    writer.tap = hub.publish
    if served.metrics is not None:
        served.metrics.attach_tap(hub.stats)
    log.info("admin_serving", address=format_hostport(host, bound), tls=tls, client_certs=tls_client_ca is not None and tls)
    return AdminServer(server, bound, hub, host, handlers, admin_tls)

"""The HTTP/2 relay: one upstream connection per client connection, every frame passed on verbatim.

Why frames and not a gRPC proxy: only at the HTTP/2 level can the proxy tell an explicit cancel
(RST_STREAM CANCEL) from a dead client (EOF) or a deadline, forward the client's own headers
(user-agent included) untouched, and keep up with the wire (see the README's measurements).

Why verbatim: stream ids, settings, flow-control windows, pings and HPACK state are negotiated end
to end between the client and Triton; the proxy reads each frame (:mod:`proxy.wire.frames`), records what
it means and writes the same bytes on. So backpressure is the endpoints' own (a client that stops
reading a stream stops granting window for it, and Triton stops sending), nothing is buffered per
call, and the bytes Triton gets are the bytes the client sent. The proxy writes frames of its own
only where it must speak for a side that is gone or refuses: statuses when the upstream is lost
or unreachable, RST_STREAM upstream when the client is lost, GOAWAY at shutdown and on a protocol
error — and those never touch HPACK state (:func:`proxy.wire.frames.encode_block`).

Shape: :class:`Tunnel` owns the two asyncio transports and one :class:`proxy.wire.frames.FrameReader` per
direction. Bytes in -> frames -> records + the same frames out, written once per read. All
per-message work is one pass in :meth:`Tunnel._messages`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import hpack.hpack
import structlog

from proxy.relay.peercert import client_subject
from proxy.triton import causes, labels
from proxy.triton.inflight import InFlight
from proxy.triton.metadata import DEFAULT_REDACT, REDACT_SUFFIXES
from proxy.triton.redact import redact_request
from proxy.wire import frames as wire
from replay.capture import events as ev

log = structlog.get_logger("triton_tap.relay")

#: Bytes of a message kept for labelling in ``meta``/``none`` mode (tensor bytes come last).
LABEL_KEEP = 1024 * 1024
#: Bytes the proxy lets queue towards one peer before it stops reading the other one: with the
#: end-to-end windows this only binds when a peer stops reading its socket altogether.
WRITE_HIGH = 4 * 1024 * 1024
WRITE_LOW = 1024 * 1024
#: Cancelled upstream streams per connection still watched for late frames (oldest forgotten first).
LATE_WATCH = 256
#: ``late`` records per cancelled call; then one ``overflow`` record and the call is no longer watched.
LATE_RECORDS = 64


class _NoLog:
    def debug(self, *args: Any, **kwargs: Any) -> None:
        pass


# hpack calls log.debug() per header field (~50 calls per unary call) even when nothing listens.
hpack.hpack.log = _NoLog()  # type: ignore[assignment]

REDACTED = "<redacted>"
#: ``--payload none`` keeps that a response carried an in-band error, not its text.
NONE_ERROR_TEXT = "(error text not recorded: --payload none)"
_ERROR_NAMES = {int(c): c.name for c in h2.errors.ErrorCodes}
ENHANCE_YOUR_CALM = int(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)


class Assembler:
    """Cuts one direction of a stream's DATA into gRPC messages (5-byte prefix + body)."""

    __slots__ = ("_flag", "_hash", "_hdr", "_keep", "_kept", "_length", "_parts", "_remaining")

    def __init__(self, keep: int, hashing: bool) -> None:
        self._hdr = bytearray()
        self._remaining = -1
        self._flag = 0
        self._length = 0
        self._parts: list[Any] = []
        self._kept = 0
        self._keep = keep
        self._hash: Any = hashlib.sha256() if hashing else None

    @property
    def partial(self) -> bool:
        """Bytes of an unfinished message are buffered."""
        return bool(self._hdr) or self._remaining >= 0

    def feed(self, data: bytes | memoryview) -> list[tuple[int, int, bytes, bool, str | None]]:
        """Complete messages in ``data``: ``(flag, length, kept bytes, truncated, sha256)``."""
        out: list[tuple[int, int, bytes, bool, str | None]] = []
        i = 0
        n = len(data)
        while i < n:
            if self._remaining < 0:
                hdr = self._hdr
                if not hdr and n - i >= 5:
                    self._flag = data[i]
                    self._length = int.from_bytes(data[i + 1 : i + 5], "big")
                    i += 5
                    # Fast path: the whole message is inside this chunk.
                    if self._length <= n - i and self._length <= self._keep:
                        body = bytes(data[i : i + self._length])
                        i += self._length
                        digest = None
                        if self._hash is not None:
                            digest = hashlib.sha256(body).hexdigest()
                        out.append((self._flag, self._length, body, False, digest))
                        continue
                else:
                    take = min(5 - len(hdr), n - i)
                    hdr += data[i : i + take]
                    i += take
                    if len(hdr) < 5:
                        break
                    self._flag = hdr[0]
                    self._length = int.from_bytes(hdr[1:5], "big")
                    hdr.clear()
                self._remaining = self._length
                self._parts = []
                self._kept = 0
                if self._hash is not None:
                    self._hash = hashlib.sha256()
            take = min(self._remaining, n - i)
            if take:
                chunk = data[i : i + take]
                if self._kept < self._keep:
                    k = min(take, self._keep - self._kept)
                    # A copy: a view would keep the whole read buffer alive until the message ends.
                    self._parts.append(bytes(chunk if k == take else chunk[:k]))
                    self._kept += k
                if self._hash is not None:
                    self._hash.update(chunk)
                i += take
                self._remaining -= take
            if self._remaining == 0:
                body = b"".join(self._parts)
                digest = self._hash.hexdigest() if self._hash is not None else None
                out.append((self._flag, self._length, body, self._length > self._kept, digest))
                self._remaining = -1
                self._parts = []
        return out


@dataclass(frozen=True)
class RelayOptions:
    """What the relay records and how it treats secrets."""

    payload: str = "meta"  # none | meta | full
    payload_cap: int | None = None
    redact: tuple[str, ...] = DEFAULT_REDACT
    #: ``--redact-input``: input tensors whose data never reaches the capture (``full`` mode).
    redact_inputs: frozenset[str] = frozenset()
    #: HMAC key for redacted tensors' hashes (the capture's redaction salt).
    redact_key: bytes = b""

    def redacts(self, name: str) -> bool:
        """Whether a metadata key's value must not reach the capture in clear."""
        return name in self.redact or name.endswith(REDACT_SUFFIXES)


class Call:
    """One RPC: a stream, seen from both sides (the same stream id on both connections)."""

    __slots__ = (
        "c2s_asm",
        "ended",
        "id",
        "index",
        "inflight",
        "method",
        "mkind",
        "resp_headers",
        "s2c_asm",
        "sid",
        "t0",
        "timeout_ms",
    )  # fmt: skip

    def __init__(self, call_id: str, sid: int, method: str, timeout_ms: float | None, opts: RelayOptions) -> None:
        self.id = call_id
        self.sid = sid
        self.method = method
        self.mkind = labels.method_kind(method)
        self.t0 = time.monotonic_ns()
        self.timeout_ms = timeout_ms
        self.inflight = InFlight(unary=self.mkind == labels.UNARY_INFER)
        keep = LABEL_KEEP if opts.payload != "full" else max(LABEL_KEEP, opts.payload_cap or 2**62)
        hashing = opts.payload == "full"
        self.c2s_asm = Assembler(keep, hashing)
        self.s2c_asm = Assembler(keep, hashing)
        self.index = [0, 0]
        self.resp_headers: list[tuple[bytes, bytes]] | None = None
        self.ended = False

    def elapsed_ms(self) -> float:
        """Milliseconds since the request HEADERS."""
        return (time.monotonic_ns() - self.t0) / 1e6


class _Late:
    """A call whose cancel the proxy forwarded upstream, watched for frames the upstream still sends."""

    __slots__ = ("asm", "call_id", "mkind", "records", "t_rst")

    def __init__(self, call: Call) -> None:
        self.call_id = call.id
        self.mkind = call.mkind
        self.t_rst = time.monotonic_ns()
        # A message cut by the cancel: its tail arrives late and must not be read as a new one.
        self.asm = call.s2c_asm if call.s2c_asm.partial else Assembler(LABEL_KEEP, False)
        self.records = 0


#: Causes for which the proxy itself gives the client a status (the upstream cannot): code, message.
_PROXY_ANSWERS: dict[str, tuple[int, str]] = {
    "upstream_disconnect": (14, "triton-tap: upstream connection lost"),
    "proxy_shutdown": (14, "triton-tap: proxy shutting down"),
    "proxy_error": (13, "triton-tap: internal error (see the proxy's log)"),
}


def _pairs(headers: list[tuple[bytes, bytes]]) -> list[list[str]]:
    return [[k.decode("latin-1"), _text(k, v)] for k, v in headers]


def _text(name: bytes, value: bytes) -> str:
    """A header value as recorded. Binary (``-bin``) values sent in gRPC's "true binary" form (a NUL
    then raw bytes, used when both peers advertise it in SETTINGS) are recorded in the usual
    unpadded base64 form, so a capture reads the same whichever form the peers agreed on."""
    if value[:1] == b"\0" and name.endswith(b"-bin"):
        return base64.b64encode(value[1:]).decode("ascii").rstrip("=")
    return value.decode("latin-1")


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for k, v in headers:
        if k == name:
            return v
    return None


def _grpc_status(headers: list[tuple[bytes, bytes]]) -> tuple[bytes | None, str | None]:
    """The raw ``grpc-status`` and the percent-decoded ``grpc-message`` of a trailer block."""
    msg = _header(headers, b"grpc-message")
    return _header(headers, b"grpc-status"), unquote(msg.decode("latin-1")) if msg is not None else None


def _status_trailers(code: int, message: str, with_response_headers: bool) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    if with_response_headers:
        out += [(b":status", b"200"), (b"content-type", b"application/grpc")]
    out += [(b"grpc-status", str(code).encode()), (b"grpc-message", message.encode())]
    return out


# How long a client may take to close the connection itself after its last call ended.
_LINGER_S = 2.0
#: Streams a client may open after the GOAWAY it got (each refused) before that counts as abuse.
KEPT_BACK_LIMIT = 1024


class _Side(asyncio.Protocol):
    """One transport of a tunnel; forwards everything to the tunnel."""

    def __init__(self, tunnel: Tunnel, upstream: bool) -> None:
        self.tunnel = tunnel
        self.upstream = upstream
        self.transport: asyncio.Transport | None = None
        #: Why reading this side is paused: "connect" (upstream not there yet), "peer" (the other
        #: side's write buffer is full). Reading resumes when no reason is left.
        self.hold: set[str] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(WRITE_HIGH, WRITE_LOW)
        self.tunnel.side_made(self)

    def data_received(self, data: bytes) -> None:
        self.tunnel.side_data(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.tunnel.side_lost(self, exc)

    def pause_writing(self) -> None:
        self.tunnel.other(self).hold_reading("peer", True)

    def resume_writing(self) -> None:
        self.tunnel.other(self).hold_reading("peer", False)

    def eof_received(self) -> bool:
        return False

    def hold_reading(self, reason: str, on: bool) -> None:
        """Pause (``on``) or release reading for ``reason``."""
        before = bool(self.hold)
        if on:
            self.hold.add(reason)
        else:
            self.hold.discard(reason)
        t = self.transport
        if t is None or t.is_closing() or before == bool(self.hold):
            return
        if self.hold:
            t.pause_reading()
        else:
            t.resume_reading()


class Relay:
    """Everything the tunnels share: options, the capture sink, id counters, open tunnels."""

    def __init__(
        self,
        upstream: tuple[str, int],
        emit: Callable[[Any], None],
        options: RelayOptions | None = None,
        upstream_tls: ssl.SSLContext | None = None,
        upstream_server_name: str | None = None,
    ) -> None:
        self.upstream = upstream
        self.emit = emit
        self.options = options or RelayOptions()
        self.upstream_tls = upstream_tls
        self.upstream_server_name = upstream_server_name
        #: ``:authority`` sent upstream instead of the client's (a TLS upstream may route on it).
        self.authority = upstream_server_name.encode() if upstream_server_name else None
        self.tunnels: set[Tunnel] = set()
        self._conn_ids = itertools.count(1)
        self.open_calls = 0
        #: Called with the call id just before a cancel is forwarded upstream (``record --evidence``
        #: marks the end of Triton's log there: Triton may log the cancel before the record exists).
        self.before_cancel: Callable[[str], None] | None = None

    def protocol_factory(self) -> asyncio.Protocol:
        """For ``loop.create_server``: a new tunnel per client connection."""
        # The tunnel joins ``tunnels`` when its connection is made: a TLS client refused at the
        # handshake never gets that far, and must not stay in the set forever.
        return Tunnel(self, f"c{next(self._conn_ids)}").down

    def begin_shutdown(self) -> None:
        """Stop taking new calls: GOAWAY to every client, in-flight calls go on."""
        for t in list(self.tunnels):
            t.goaway_down()

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is open (True) or ``timeout`` seconds passed (False)."""
        deadline = time.monotonic() + timeout
        while self.open_calls and time.monotonic() < deadline:
            # Condition polling at a short interval: calls end from protocol callbacks that have no
            # awaitable to hand out, and shutdown is not a hot path.
            await asyncio.sleep(0.01)
        return self.open_calls == 0

    def hard_close(self) -> None:
        """Drop every connection still open without waiting for buffered bytes."""
        for t in list(self.tunnels):
            for side in (t.down, t.up):
                if side.transport is not None:
                    side.transport.abort()
        self.tunnels.clear()

    def abort_all(self, cause: str) -> None:
        """End every open call with ``cause`` (``proxy_shutdown``) and close every connection."""
        for t in list(self.tunnels):
            t.abort(cause)


Frame = tuple[int, int, int, Any, memoryview]


class Tunnel:
    """A client connection, its upstream connection, and the calls between them."""

    def __init__(self, relay: Relay, conn_id: str) -> None:
        self.relay = relay
        self.emit = relay.emit
        self.opts = relay.options
        self.conn_id = conn_id
        self.down = _Side(self, upstream=False)
        self.up = _Side(self, upstream=True)
        self.c2s = wire.FrameReader(expect_preface=True)
        self.s2c = wire.FrameReader(expect_preface=False)
        #: Open calls by stream id (a call leaves when it ends).
        self.calls: dict[int, Call] = {}
        self.peer = ""
        #: Subject of the verified client certificate (``--tls-client-ca``), else None.
        self.client_subject: str | None = None
        self.up_ready = False
        self.up_lost = False
        self.down_lost = False
        #: Last stream id of the GOAWAY the client got (from us or forwarded), or None.
        self.goaway_last: int | None = None
        self.max_down_id = 0
        # Header blocks go upstream re-encoded (never verbatim) once the proxy rewrites one
        # (``:authority``) or keeps one back: the upstream's HPACK table then no longer mirrors
        # the client's, and literal-only blocks are valid against any table state.
        self.reencode_c2s = relay.authority is not None
        self._connect_task: asyncio.Task[None] | None = None
        # upstream stream id -> cancelled call still watched for late frames (insertion = age order)
        self._late: dict[int, _Late] = {}
        # when the current client read arrived: the start of a cancel's way upstream
        self._down_read_ns = 0
        # bytes for each side, written once at the end of a read
        self._to_up: list[Any] = []
        self._to_down: list[Any] = []
        self.refuser: _Refuser | None = None
        # True while the frames of the current read were already written (see side_data)
        self._early = False
        self._linger: asyncio.TimerHandle | None = None
        # The client must see a SETTINGS frame first (RFC 9113 3.4): the upstream's, or, when the
        # proxy must speak before the upstream did, an empty one of the proxy's, whose ACK the
        # client then sends is not the upstream's to see.
        self._down_settings = False
        self._own_settings_acks = 0
        #: Streams whose HEADERS the proxy kept back (refused after its GOAWAY): the upstream never
        #: heard of them, so nothing else of theirs may reach it.
        self._kept_back: set[int] = set()

    def other(self, side: _Side) -> _Side:
        """The transport facing the other peer."""
        return self.up if side is self.down else self.down

    # -- transports ----------------------------------------------------------------------------

    def side_made(self, side: _Side) -> None:
        if side is self.down:
            assert side.transport is not None
            self.relay.tunnels.add(self)
            peer = side.transport.get_extra_info("peername")
            self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
            self.client_subject = client_subject(side.transport)
            # Hold the client's bytes until the upstream connection exists.
            side.hold_reading("connect", True)
            self._connect_task = asyncio.get_running_loop().create_task(
                self._connect(), name=f"triton-tap-upstream-connect-{self.conn_id}"
            )
        else:
            self.up_ready = True

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.relay.upstream
        tls = self.relay.upstream_tls
        try:
            await loop.create_connection(
                lambda: self.up, host, port, ssl=tls,
                server_hostname=(self.relay.upstream_server_name or host) if tls is not None else None,
            )  # fmt: skip
        except OSError as e:  # ssl.SSLError and certificate errors included
            reason = f"triton-tap: upstream {host}:{port} unreachable: {e.strerror or e}"
            log.warning("upstream_connect_failed", conn=self.conn_id, error=reason)
            # Someone must speak HTTP/2 to the client to give it a status: a small h2 server.
            self.refuser = _Refuser(self, reason)
        if not self.down_lost:
            self.down.hold_reading("connect", False)

    def side_data(self, side: _Side, data: bytes) -> None:
        if self.down_lost if side is self.down else self.up_lost:
            return  # that connection is being closed (protocol error): nothing more from it counts
        if side is self.down:
            if self.refuser is not None:
                self.refuser.feed(data)
                return
            self._down_read_ns = time.monotonic_ns()
            reader, handle = self.c2s, self._c2s_frame
        else:
            reader, handle = self.s2c, self._s2c_frame
        try:
            try:
                frames = reader.feed(data)
            except wire.FrameError as e:
                # What the frames before the bad one said did happen: handle it, then the error.
                for f in e.before:
                    handle(*f)
                raise
            if frames and self._plain(side, frames):
                # Latency: every frame of this read goes on unchanged, so it is written before
                # the recording work (labels, records) instead of after it.
                self._write_early(side, frames)
                self._early = True
                try:
                    for f in frames:
                        handle(*f)
                finally:
                    self._early = False
            else:
                for f in frames:
                    handle(*f)
        except wire.FrameError as e:
            self._flush()
            self._protocol_error(side, e.code, str(e), goaway=True)
            return
        except Exception:
            # A bug of ours must cost one connection, never the proxy, and be recorded as ours.
            log.exception("relay_internal_error", conn=self.conn_id)
            self.abort("proxy_error")
            return
        self._flush()

    def _plain(self, side: _Side, frames: list[Frame]) -> bool:
        """Whether every frame of a read is passed on verbatim whatever the calls' state."""
        if side is self.up:
            for f in frames:
                if f[0] == wire.GOAWAY or f[0] == wire.PUSH_PROMISE:
                    return False
            return True
        if (
            self.reencode_c2s or self.goaway_last is not None or self.up_lost
            or self._own_settings_acks
        ):  # fmt: skip
            return False
        kept = self._kept_back
        for f in frames:
            ftype = f[0]
            if ftype == wire.RST_STREAM or ftype == wire.PUSH_PROMISE or (kept and f[2] in kept):
                return False
        return True

    def _write_early(self, side: _Side, frames: list[Frame]) -> None:
        # Bytes the handlers queued before (none in practice) go first: order is kept.
        self._flush()
        lost = self.up_lost if side is self.down else self.down_lost
        t = self.other(side).transport
        if t is not None and not lost and not t.is_closing():
            span = (self.c2s if side is self.down else self.s2c).span
            if span is not None:
                t.write(span)  # one slice of the read: no copy for a 100 MB tensor's frames
            else:
                t.write(frames[0][4] if len(frames) == 1 else b"".join([f[4] for f in frames]))

    def _own_down(self, frames: bytes) -> None:
        """Frames of the proxy's own for the client (after a SETTINGS frame, if none went yet)."""
        if not self._down_settings:
            self._down_settings = True
            self._own_settings_acks += 1
            self._to_down.append(wire.frame(wire.SETTINGS, 0, 0))
        self._to_down.append(frames)

    def _fwd_up(self, raw: Any) -> None:
        """A client frame goes upstream unchanged."""
        if not self._early:
            self._to_up.append(raw)

    def _fwd_down(self, raw: Any) -> None:
        """An upstream frame goes to the client unchanged."""
        if not self._early:
            self._to_down.append(raw)

    def _flush(self) -> None:
        if self._to_up:
            out, self._to_up = self._to_up, []
            t = self.up.transport
            if t is not None and not self.up_lost and not t.is_closing():
                t.write(out[0] if len(out) == 1 else b"".join(out))
        if self._to_down:
            out, self._to_down = self._to_down, []
            t = self.down.transport
            if t is not None and not self.down_lost and not t.is_closing():
                t.write(out[0] if len(out) == 1 else b"".join(out))

    def _protocol_error(self, side: _Side, code: int, error: str, goaway: bool) -> None:
        """Record the violation, tell the offender (GOAWAY), close that side; its calls end when it is lost."""
        log.warning("http2_protocol_error", conn=self.conn_id, upstream=side.upstream, error=error)
        self.emit(
            ev.ProtocolViolated(
                t_ns=time.time_ns(), conn=self.conn_id, side="upstream" if side.upstream else "client",
                error=error, error_code=code,
                open_calls=[c.id for c in self.calls.values()],
            )
        )  # fmt: skip
        if goaway:
            debug = error.encode()[:256]
            if side.upstream:
                self._to_up.append(wire.goaway(0, code, debug))
            else:
                # A GOAWAY may never raise an earlier one's last stream id (RFC 9113 6.8).
                last = self.max_down_id if self.goaway_last is None else min(self.goaway_last, self.max_down_id)
                self._own_down(wire.goaway(last, code, debug))
            self._flush()
        t = side.transport
        # Nothing more may be sent on that connection; its calls end when the transport is lost.
        if side.upstream:
            self.up_lost = True
        else:
            self.down_lost = True
        if t is not None:
            t.close()

    def side_lost(self, side: _Side, exc: Exception | None) -> None:
        if side is self.down:
            self.down_lost = True
            for call in list(self.calls.values()):
                self._cancel(call, "client_disconnect", None)
            self._flush()
            if self.up.transport is not None:
                self.up.transport.close()
            if self._connect_task is not None and not self._connect_task.done():
                self._connect_task.cancel()
            self.relay.tunnels.discard(self)
        else:
            if self.down_lost or not self.up_ready:
                return
            self.up_lost = True
            self.down.hold_reading("peer", False)
            if not self._down_settings and self.max_down_id == 0 and self.goaway_last is None:
                self._refuse_connection(exc)
                return
            for call in list(self.calls.values()):
                self._cancel(call, "upstream_disconnect", None)
            self.goaway_down()
            self._flush()
            self._maybe_close_down()

    def _refuse_connection(self, exc: Exception | None) -> None:
        """The upstream closed before it spoke HTTP/2 (an mTLS upstream rejecting our certificate,
        a port-forward with nothing behind it) and the client has opened no call yet: it is served
        as when the upstream is unreachable, every call UNAVAILABLE with the reason. A GOAWAY instead
        would send a gRPC client round reconnecting until its deadline, never telling it why."""
        reason = "triton-tap: upstream closed the connection before speaking HTTP/2" + (f" ({exc})" if exc else "")
        log.warning("upstream_closed_early", conn=self.conn_id, error=reason)
        self.refuser = _Refuser(self, reason)
        # What the client sent so far went to the lost upstream: the refuser gets a preface in its
        # place (the client's settings do not matter for statuses), then anything unread.
        rest = self.c2s.unread()
        self.refuser.feed(rest if self.c2s.expecting_preface else wire.PREFACE + wire.frame(wire.SETTINGS, 0, 0) + rest)

    def goaway_down(self) -> None:
        """Tell the client to open no new calls on this connection; open calls go on."""
        if self.goaway_last is None and not self.down_lost:
            self.goaway_last = self.max_down_id
            if self.refuser is not None:
                self.refuser.goaway()
            else:
                self._own_down(wire.goaway(self.max_down_id, wire.NO_ERROR))
                self._flush()
            self._maybe_close_down()

    def _maybe_close_down(self) -> None:
        t = self.down.transport
        if self.goaway_last is not None and not self.calls and t is not None:
            self._flush()
            if self._linger is None and not t.is_closing():
                self._linger = asyncio.get_running_loop().call_later(_LINGER_S, self._linger_close)

    def _linger_close(self) -> None:
        """Close the client connection if it has not closed itself since its last call ended.

        Not at once: gRPC C-core clients drop bytes that arrive in the same read as the
        connection's end (TCP FIN, or RST when we close with their last frames unread); closing
        right after the final trailers made the client report "Socket closed (GOAWAY received)"
        instead of the status we sent, about one run in five. A client that got GOAWAY and has no
        calls left closes on its own.
        """
        self._linger = None
        t = self.down.transport
        if self.calls or t is None:
            # A call crossed the GOAWAY (legal below its last stream id): its end arms this again.
            return
        t.close()

    def abort(self, cause: str) -> None:
        """End every open call with ``cause`` and close both connections."""
        for call in list(self.calls.values()):
            self._cancel(call, cause, None)
        self.goaway_down()
        self._flush()
        self._maybe_close_down()
        if self.up.transport is not None:
            self.up.transport.close()

    # -- client -> upstream ----------------------------------------------------------------------

    def _c2s_frame(self, ftype: int, flags: int, sid: int, payload: Any, raw: memoryview) -> None:
        if sid in self._kept_back:
            self._kept_back_frame(ftype, flags, sid, payload)
            return
        if ftype == wire.DATA:
            call = self.calls.get(sid)
            if call is not None:
                self._messages(call, 0, wire.data_payload(flags, payload))
                if flags & wire.END_STREAM:
                    self.emit(ev.HalfClosed(t_ns=time.time_ns(), call=call.id))
            self._fwd_up(raw)
        elif ftype == wire.HEADERS:
            self._c2s_headers(flags, sid, payload, raw)
        elif ftype == wire.RST_STREAM:
            call = self.calls.get(sid)
            if call is None:
                self._fwd_up(raw)
                return
            cause = causes.client_reset_cause(call.timeout_ms, call.elapsed_ms())
            # The client's own RST goes upstream (the cause's clock started with this read).
            self._cancel(call, cause, int.from_bytes(payload, "big"), raw, self._down_read_ns)
        elif ftype == wire.SETTINGS:
            if not flags & wire.ACK:
                self._settings(payload, self.s2c)
            elif self._own_settings_acks:
                # The ACK of the proxy's own SETTINGS (see _own_down): the upstream never sent it.
                self._own_settings_acks -= 1
                return
            self._fwd_up(raw)
        elif ftype == wire.PUSH_PROMISE:
            raise wire.FrameError(wire.PROTOCOL_ERROR, "PUSH_PROMISE from a client")
        else:
            # PING, WINDOW_UPDATE, PRIORITY, GOAWAY, the preface and unknown extension frames:
            # end to end, like everything else.
            self._fwd_up(raw)

    def _kept_back_frame(self, ftype: int, flags: int, sid: int, payload: Any) -> None:
        """A frame on a stream the upstream never heard of: dropped, its flow-control credit returned.

        (A header block was decoded already, which keeps HPACK in step, and every later block goes
        upstream re-encoded.)"""
        if ftype == wire.DATA:
            if len(payload):
                self._own_down(wire.window_update(0, len(payload)))
            if flags & wire.END_STREAM:
                self._kept_back.discard(sid)
        elif ftype == wire.RST_STREAM:
            self._kept_back.discard(sid)

    @staticmethod
    def _settings(payload: memoryview, reader: wire.FrameReader) -> None:
        """A peer's SETTINGS bound what the *other* peer may send it: ``reader`` reads that peer."""
        for ident, value in wire.settings_values(payload):
            if ident == wire.SETTINGS_HEADER_TABLE_SIZE:
                reader.allow_table_size(value)
            elif ident == wire.SETTINGS_MAX_FRAME_SIZE and wire.DEFAULT_MAX_FRAME <= value < 2**24:
                # The largest value ever advertised: a lower one binds only once the sender has
                # acknowledged it (RFC 9113 6.5.3), and the receiver judges exact bounds itself.
                # Out-of-range values are the receiving peer's to reject.
                reader.max_frame = max(reader.max_frame, value)

    def _c2s_headers(self, flags: int, sid: int, headers: list[tuple[bytes, bytes]], raw: memoryview) -> None:
        end = bool(flags & wire.END_STREAM)
        call = self.calls.get(sid)
        if call is None and sid & 1 and sid > self.max_down_id:
            if self.goaway_last is not None and sid > self.goaway_last and len(self._kept_back) >= KEPT_BACK_LIMIT:
                raise wire.FrameError(ENHANCE_YOUR_CALM, "client kept opening streams after GOAWAY")
            call = self._request(sid, headers)
            if self.up_lost:
                self._kept_back.add(sid)
                self._fail_down(call, "upstream_disconnect", *_PROXY_ANSWERS["upstream_disconnect"])
                return
            if self.goaway_last is not None and sid > self.goaway_last:
                # Above the last stream id of the GOAWAY the client got (the proxy's at shutdown,
                # or the upstream's passed on): never processed, so it must not reach the upstream
                # (the client may retry it elsewhere). Its header block is kept back.
                self.reencode_c2s = True
                self._kept_back.add(sid)
                self._refuse(call, "triton-tap: connection is shutting down (GOAWAY): stream not processed")
                return
            self._forward_headers(sid, headers, end, raw)
        else:
            # Trailers from the client, or a stream the upstream will judge (closed, even id).
            self._forward_headers(sid, headers, end, raw)
        if end and call is not None and not call.ended:
            self.emit(ev.HalfClosed(t_ns=time.time_ns(), call=call.id))

    def _forward_headers(self, sid: int, headers: list[tuple[bytes, bytes]], end: bool, raw: memoryview) -> None:
        if not self.reencode_c2s:
            self._fwd_up(raw)
            return
        authority = self.relay.authority
        if authority is not None:
            headers = [(k, authority) if k == b":authority" else (k, v) for k, v in headers]
        # Each block starts with a dynamic table size update to 0: valid whatever the upstream
        # advertised (RFC 7541 4.2), and the literal-only blocks never need its table.
        block = b"\x20" + wire.encode_block(headers)
        self._to_up.append(wire.headers_frames(sid, block, end, self.c2s.max_frame))

    def _request(self, sid: int, headers: list[tuple[bytes, bytes]]) -> Call:
        self.max_down_id = sid
        path = _header(headers, b":path") or b""
        timeout = _header(headers, b"grpc-timeout")
        timeout_ms = causes.parse_grpc_timeout(timeout.decode("latin-1")) if timeout else None
        call = Call(f"{self.conn_id}.{sid}", sid, path.decode("latin-1"), timeout_ms, self.opts)
        self.calls[sid] = call
        self.relay.open_calls += 1
        meta = [[k, REDACTED if self.opts.redacts(k) else v] for k, v in _pairs(headers)]
        self.emit(
            ev.CallStarted(
                t_ns=time.time_ns(), call=call.id, conn=self.conn_id, method=call.method,
                peer=self.peer, metadata=meta, timeout_ms=timeout_ms, client_subject=self.client_subject,
            )
        )  # fmt: skip
        return call

    def _refuse(self, call: Call, reason: str) -> None:
        """REFUSED_STREAM to the client: never processed, so the client may retry it itself."""
        self._own_down(wire.rst_stream(call.sid, wire.REFUSED_STREAM))
        self._end(call, "error", "UNAVAILABLE", reason, None, rst=wire.REFUSED_STREAM)

    # -- upstream -> client ----------------------------------------------------------------------

    def _s2c_frame(self, ftype: int, flags: int, sid: int, payload: Any, raw: memoryview) -> None:
        if ftype == wire.DATA:
            call = self.calls.get(sid)
            if call is not None:
                self._messages(call, 1, wire.data_payload(flags, payload))
                self._fwd_down(raw)
                if flags & wire.END_STREAM:
                    self._end(call, "error", "INTERNAL", "upstream ended the stream without a grpc-status", None)
                return
            if sid in self._late:
                self._late_frame(sid, "data", wire.data_payload(flags, payload), bool(flags & wire.END_STREAM))
            self._fwd_down(raw)
        elif ftype == wire.HEADERS:
            self._fwd_down(raw)
            call = self.calls.get(sid)
            if call is None:
                if sid in self._late:
                    self._late_frame(sid, "headers", payload, bool(flags & wire.END_STREAM))
            elif flags & wire.END_STREAM:
                self._end_with_status(call, payload)
            elif call.resp_headers is None:
                call.resp_headers = payload
        elif ftype == wire.RST_STREAM:
            self._fwd_down(raw)
            code = int.from_bytes(payload, "big")
            call = self.calls.get(sid)
            if call is not None:
                status = causes.RST_TO_STATUS.get(code, "INTERNAL")
                self._end(call, "error", status, f"upstream reset the stream (HTTP/2 error {code})", None, rst=code)
            elif sid in self._late:
                self._late_frame(sid, "rst", code, True)
        elif ftype == wire.SETTINGS:
            if not flags & wire.ACK:
                self._settings(payload, self.c2s)
                self._down_settings = True
            self._fwd_down(raw)
        elif ftype == wire.GOAWAY:
            self._up_goaway(payload, raw)
        elif ftype == wire.PUSH_PROMISE:
            raise wire.FrameError(wire.PROTOCOL_ERROR, "PUSH_PROMISE: gRPC clients never accept server push")
        else:
            self._fwd_down(raw)

    def _up_goaway(self, payload: memoryview, raw: memoryview) -> None:
        last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        code = int.from_bytes(payload[4:8], "big")
        if code != wire.NO_ERROR:
            # The upstream ends the connection with an error, in answer to frames it got from the
            # client verbatim (or, like ENHANCE_YOUR_CALM for too many pings, to the client's
            # behaviour): the client gets the upstream's own GOAWAY and loses its connection, the
            # violation is the client's as the upstream judged it, and the open calls end as
            # upstream_disconnect (the upstream, not the client, ended them).
            if self.goaway_last is not None and last > self.goaway_last:
                # A GOAWAY may never raise an earlier one's last stream id (RFC 9113 6.8).
                self._own_down(wire.goaway(self.goaway_last, code, bytes(payload[8:])))
            else:
                self._fwd_down(raw)
            self._flush()
            debug = bytes(payload[8:]).decode("utf-8", "replace")
            name = _ERROR_NAMES.get(code, str(code))
            error = f"the upstream rejected the client's frames: GOAWAY {name}" + (f" ({debug})" if debug else "")
            self.up_lost = True
            self._protocol_error(self.down, code, error, goaway=False)
            for call in list(self.calls.values()):
                self._cancel(call, "upstream_disconnect", None)
            return
        for call in list(self.calls.values()):
            if call.sid > last:
                # Never processed upstream (RFC 9113 6.8): REFUSED_STREAM lets the client retry it.
                self._refuse(call, "triton-tap: upstream connection is shutting down (GOAWAY)")
        # Passed on so the client opens new calls on a new connection (and so a new upstream
        # connection); calls in flight drain. A GOAWAY may never raise an earlier one's last id.
        if self.goaway_last is None or last < self.goaway_last:
            self.goaway_last = last
            self._fwd_down(raw)
        self._maybe_close_down()

    def _end_with_status(self, call: Call, trailers: list[tuple[bytes, bytes]]) -> None:
        raw, details = _grpc_status(trailers)
        if raw is None or not raw.isdigit() or len(raw) > 4:  # bytes.isdigit(): ASCII only
            self._end(call, "error", "UNKNOWN", details or "upstream trailers without grpc-status", trailers)
            return
        code = int(raw)
        cause = causes.upstream_status_cause(code, call.timeout_ms, call.elapsed_ms())
        if cause == "deadline":
            in_flight, executing = call.inflight.snapshot()
            self.emit(
                ev.CallCancelled(
                    t_ns=time.time_ns(), call=call.id, cause="deadline", in_flight=in_flight,
                    executing=executing, rst_code=None, elapsed_ms=call.elapsed_ms(),
                    forwarded_upstream=False,
                )
            )  # fmt: skip
        self._end(call, cause, causes.status_name(code), details, trailers)

    # -- messages --------------------------------------------------------------------------------

    def _messages(self, call: Call, direction: int, data: memoryview) -> None:
        """Cut, label and record every complete message in ``data`` (the hot path's one pass)."""
        asm = call.c2s_asm if direction == 0 else call.s2c_asm
        done = asm.feed(data)
        if not done:
            return
        mkind = call.mkind
        payload = self.opts.payload
        t_ns = time.time_ns()
        dname: ev.Direction = "c2s" if direction == 0 else "s2c"
        for flag, length, body, truncated, digest in done:
            idx = call.index[direction]
            call.index[direction] = idx + 1
            fields: dict[str, Any] = {}
            if mkind and not flag:
                try:
                    if direction == 0:
                        fields = labels.request_labels(body, truncated)
                        call.inflight.sent(fields["request_id"])
                    else:
                        if mkind == labels.STREAM:
                            fields = labels.stream_response_labels(body, truncated)
                        else:
                            fields = labels.response_labels(body, truncated)
                        call.inflight.answered(fields["request_id"], fields["final"])
                except Exception as e:
                    fields = {"decode_error": f"not a valid {'request' if direction == 0 else 'response'}: {e}"}
            elif mkind and flag:
                fields = {"decode_error": "compressed message: not decoded"}
            if payload == "none" and fields:
                # Ids, finals, model and "there was an error" drive the request state machine and the
                # in-flight evidence of cancels; tensor specs and error texts are what none leaves out.
                fields.pop("inputs", None)
                fields.pop("output_tensors", None)
                if fields.get("error"):
                    fields["error"] = NONE_ERROR_TEXT
            if payload == "full":
                cut, withheld = truncated, False
                if direction == 0 and mkind and self.opts.redact_inputs:
                    red = None if flag or truncated else redact_request(body, self.opts.redact_inputs, self.opts.redact_key)
                    if red is None:
                        # Cannot prove the named tensors are out of it: store no bytes at all.
                        body, digest, cut, withheld = b"", None, True, True
                        fields.setdefault("decode_error", "payload withheld: cannot redact a cut, compressed or undecodable request")
                    elif red[0] is not body:
                        body = red[0]
                        digest = hashlib.sha256(body).hexdigest()
                        fields["inputs"] = red[1]
                cap = self.opts.payload_cap
                fields["payload_sha256"] = digest
                shown = body if cap is None else body[:cap]
                fields["payload"] = None if withheld else base64.b64encode(shown).decode("ascii")
                fields["payload_truncated"] = cut or len(shown) < len(body)
            self.emit(
                ev.MessageSeen(
                    t_ns=t_ns, call=call.id, dir=dname, index=idx, size=length,
                    compressed=bool(flag), **fields,
                )
            )  # fmt: skip

    # -- endings ---------------------------------------------------------------------------------

    def _cancel(
        self, call: Call, cause: str, rst_code: int | None, rst: Any = None, learned_ns: int = 0
    ) -> None:
        """The call ends by a cancel-like event: recorded, and the upstream stream reset at once.

        ``rst`` is the client's RST_STREAM frame to pass on (else the proxy sends its own CANCEL);
        ``learned_ns`` (monotonic) is when the proxy learned of it, if earlier than now.
        """
        in_flight, executing = call.inflight.snapshot()
        forwarded = False
        rst_us: float | None = None
        if not self.up_lost and self.refuser is None:
            learned = learned_ns or time.monotonic_ns()
            if self.relay.before_cancel is not None:
                self.relay.before_cancel(call.id)
            self._to_up.append(rst if rst is not None else wire.rst_stream(call.sid, wire.CANCEL))
            # Written now rather than after the whole read: the cancel is what Triton must see
            # first, and its latency is measured to the socket.
            self._flush()
            forwarded = True
            rst_us = (time.monotonic_ns() - learned) / 1e3
            self._watch_late(call)
        self.emit(
            ev.CallCancelled(
                t_ns=time.time_ns(), call=call.id, cause=cause, in_flight=in_flight, executing=executing,  # type: ignore[arg-type]
                rst_code=rst_code, elapsed_ms=call.elapsed_ms(), forwarded_upstream=forwarded,
                upstream_rst_us=rst_us,
            )
        )  # fmt: skip
        answer = _PROXY_ANSWERS.get(cause)
        if answer is not None:
            self._fail_down(call, cause, *answer)
            return
        self._end(call, cause, ev.STATUS_FOR_CAUSE[cause], None, None)

    def _fail_down(self, call: Call, cause: str, code: int, message: str) -> None:
        """Give the client a gRPC status of our own (the upstream cannot)."""
        if not self.down_lost:
            trailers = _status_trailers(code, message, call.resp_headers is None)
            self._own_down(wire.headers_frames(call.sid, wire.encode_block(trailers), True, self.s2c.max_frame))
        self._end(call, cause, causes.status_name(code), message, None)

    def _end(
        self,
        call: Call,
        cause: str,
        status: str,
        details: str | None,
        trailers: list[tuple[bytes, bytes]] | None,
        rst: int | None = None,
    ) -> None:
        if call.ended:
            return
        call.ended = True
        self.calls.pop(call.sid, None)
        self.relay.open_calls -= 1
        # The relay holds nothing per call: what the client did not get is in the socket buffer,
        # shared by every call of the connection, so it can be told only when that is empty.
        t = self.down.transport
        undelivered = 0 if t is None or self.down_lost or not t.get_write_buffer_size() else None
        self.emit(
            ev.CallEnded(
                t_ns=time.time_ns(), call=call.id, status=status, details=details, cause=cause,  # type: ignore[arg-type]
                trailers=_pairs(trailers) if trailers is not None else None,
                initial_metadata=_pairs(call.resp_headers) if call.resp_headers is not None else None,
                duration_ms=call.elapsed_ms(), messages_c2s=call.index[0], messages_s2c=call.index[1],
                upstream_rst_code=rst, s2c_undelivered_bytes=undelivered,
            )
        )  # fmt: skip
        self._maybe_close_down()

    # -- late frames after a forwarded cancel ------------------------------------------------------

    def _watch_late(self, call: Call) -> None:
        if len(self._late) >= LATE_WATCH:
            # Triton usually sends nothing after our RST: old entries would otherwise live as long
            # as the connection.
            del self._late[next(iter(self._late))]
        self._late[call.sid] = _Late(call)

    def _late_frame(self, sid: int, kind: str, data: Any, end_stream: bool) -> None:
        """A frame the upstream sent on a stream after the cancel went upstream: recorded as ``late``.

        It is passed on like every frame (the client's HTTP/2 stack discards frames on a stream it
        reset, RFC 9113 5.1, and counts them for flow control; a header block must reach it for
        HPACK's sake).
        """
        late = self._late[sid]
        since = (time.monotonic_ns() - late.t_rst) / 1e6
        if kind == "data":
            for flag, length, body, truncated, _ in late.asm.feed(data):
                fields: dict[str, Any] = {}
                if late.mkind and not flag:
                    try:
                        if late.mkind == labels.STREAM:
                            got = labels.stream_response_labels(body, truncated)
                        else:
                            got = labels.response_labels(body, truncated)
                        fields = {"request_id": got["request_id"], "final": got["final"], "error": got.get("error")}
                    except Exception:
                        # A late message that does not decode is still recorded, by size.
                        pass
                self._late_emit(sid, late, "message", length, since, **fields)
        elif kind == "headers":
            headers: list[tuple[bytes, bytes]] = data
            size = sum(len(k) + len(v) for k, v in headers)
            error = None
            status, details = _grpc_status(headers)
            if status is not None:
                error = status.decode("latin-1") + (" " + details if details else "")
            self._late_emit(sid, late, "trailers" if end_stream else "headers", size, since, error=error)
        else:
            self._late_emit(sid, late, "rst", 0, since, rst_code=int(data))
        if end_stream:
            self._late.pop(sid, None)

    def _late_emit(self, sid: int, late: _Late, frame: str, size: int, since: float, **fields: Any) -> None:
        if sid not in self._late:
            return
        late.records += 1
        if late.records > LATE_RECORDS:
            frame, size, fields = "overflow", 0, {}
            del self._late[sid]
        self.emit(
            ev.LateFrameSeen(t_ns=time.time_ns(), call=late.call_id, frame=frame, size=size,  # type: ignore[arg-type]
                             since_cancel_ms=since, **fields)
        )  # fmt: skip


class _Refuser:
    """Speaks HTTP/2 to a client whose upstream could not be reached: every call gets UNAVAILABLE.

    The one place the proxy terminates HTTP/2 itself (with ``h2``): there is no peer to relay to.
    """

    def __init__(self, tunnel: Tunnel, reason: str) -> None:
        self.tunnel = tunnel
        self.reason = reason
        self.conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=False, header_encoding=None, validate_inbound_headers=False)
        )
        self.conn.initiate_connection()
        self.closed = False
        self._write()

    def _write(self) -> None:
        t = self.tunnel.down.transport
        data = self.conn.data_to_send()
        if data and t is not None and not t.is_closing():
            t.write(data)

    def feed(self, data: bytes) -> None:
        """Bytes from the client."""
        tunnel = self.tunnel
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError as e:
            self._write()
            if self.closed:
                # After our GOAWAY h2 refuses every frame; the client has done nothing wrong.
                return
            tunnel._protocol_error(tunnel.down, int(getattr(e, "error_code", None) or 1), str(e) or type(e).__name__, goaway=False)
            return
        try:
            for event in events:
                if isinstance(event, h2.events.RequestReceived):
                    call = tunnel._request(event.stream_id, event.headers)
                    try:
                        self.conn.send_headers(event.stream_id, _status_trailers(14, self.reason, True), end_stream=True)
                    except h2.exceptions.ProtocolError:
                        pass
                    tunnel._end(call, "upstream_disconnect", "UNAVAILABLE", self.reason, None)
                elif isinstance(event, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        except Exception:
            log.exception("relay_internal_error", conn=tunnel.conn_id)
            tunnel.abort("proxy_error")
            return
        self._write()

    def goaway(self) -> None:
        """No new calls on this connection."""
        self.closed = True
        self.conn.close_connection(last_stream_id=self.tunnel.max_down_id)
        self._write()

"""The HTTP/2 frame relay: one upstream connection per client connection, one stream per stream.

Why frames and not a gRPC proxy: only at the HTTP/2 level can the proxy tell an explicit cancel
(RST_STREAM CANCEL) from a dead client (EOF) or a deadline, forward the client's own headers
(user-agent included) untouched, and keep up with the wire (see the README's measurements).

Shape: :class:`Tunnel` owns two sans-IO ``h2`` connections (server role towards the client,
client role towards Triton) and the two asyncio transports. Bytes in -> h2 events -> forwarded
frames + capture records. All per-message work is one pass in :meth:`Tunnel._messages`.

Flow control (end-to-end backpressure): DATA received on one side is acknowledged to its sender
only once it has been handed to the other side's h2 connection, i.e. once the receiver granted
window for it. What the proxy holds per stream and direction is therefore bounded by the window it
advertises (:data:`STREAM_WINDOW`), whatever the peers do; a stalled stream cannot starve the
others because every stream has its own window and the connection window is large.
"""

from __future__ import annotations

import asyncio
import base64
import collections
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
import h2.settings
import h2.stream
import hpack.hpack
import hyperframe.exceptions
import hyperframe.frame
import structlog

from replay import causes, labels
from replay import events as ev
from replay.inflight import InFlight
from replay.redact import redact_request

log = structlog.get_logger("triton_tap.relay")

#: Per-stream window the proxy advertises on both sides: the most it buffers per stream/direction.
STREAM_WINDOW = 4 * 1024 * 1024
#: Connection window: large, so one stalled stream never blocks its neighbours.
CONNECTION_WINDOW = 256 * 1024 * 1024
#: Bytes of a message kept for labelling in ``meta``/``none`` mode (tensor bytes come last).
LABEL_KEEP = 1024 * 1024
MAX_HEADER_LIST = 16 * 1024 * 1024
#: Cancelled upstream streams per connection still watched for late frames (oldest forgotten first).
LATE_WATCH = 256
#: ``late`` records per cancelled call; then one ``overflow`` record and the call is no longer watched.
LATE_RECORDS = 64


def _frame_repr(self: hyperframe.frame.Frame) -> str:
    return f"{type(self).__name__}(stream_id={self.stream_id})"


# h2 4.x evaluates repr(frame) for a trace log on every received frame, and hyperframe's repr
# hex-encodes the whole payload before cutting it to 20 characters: 2/3 of the proxy's CPU with
# 100 MB tensors, ~1.2 us per small frame. Nothing here logs frames.
hyperframe.frame.Frame.__repr__ = _frame_repr  # type: ignore[method-assign]


class _NoLog:
    def debug(self, *args: Any, **kwargs: Any) -> None:
        pass


# hpack calls log.debug() per header field (~50 calls per unary call) even when nothing listens.
hpack.hpack.log = _NoLog()  # type: ignore[assignment]

REDACTED = "<redacted>"
DEFAULT_REDACT = ("authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key")
#: ``--payload none`` keeps that a response carried an in-band error, not its text.
NONE_ERROR_TEXT = "(error text not recorded: --payload none)"
#: Metadata keys ending with one of these are always redacted too.
REDACT_SUFFIXES = ("-token", "-secret")


class PatchedH2Connection(h2.connection.H2Connection):
    """``h2`` with the two behaviours a transparent relay cannot accept switched off.

    1. A GOAWAY, received or sent, moves h2 to CLOSED and rejects every later frame, so streams
       the GOAWAY promised to finish could not drain (neither the upstream's nor ours at shutdown):
       we keep the state machine open and stop opening streams ourselves.
    2. A frame on a stream closed by END_STREAM is a *connection* error in h2 (RFC 9113 5.1 "MUST"),
       which would kill every other call on the connection because of one late frame (Triton sends
       trailers then RST_STREAM at a server deadline, and a client may still be sending): we
       answer it as a stream error instead.
    Pinned to h2 4.x; tests/proxy/test_framing.py fails if these internals move.
    """

    def _receive_goaway_frame(self, frame: Any) -> Any:
        before = self.state_machine.state
        result = super()._receive_goaway_frame(frame)
        if before is not h2.connection.ConnectionState.CLOSED:
            self.state_machine.state = before
        return result

    def close_connection(
        self, error_code: int = 0, additional_data: bytes | None = None, last_stream_id: int | None = None
    ) -> None:
        before = self.state_machine.state
        super().close_connection(error_code, additional_data, last_stream_id)
        if before is not h2.connection.ConnectionState.CLOSED:
            self.state_machine.state = before

    def receive_data(self, data: Any) -> list[Any]:
        """h2's ``receive_data``, except that a protocol error keeps the events of the frames before it.

        h2 raises out of its frame loop and drops what the earlier frames of the same read produced
        (a request's HEADERS and DATA arriving in one segment with a bad frame after them): the
        capture would lose calls that did happen. They ride on the exception as ``events_before``.
        """
        events: list[Any] = []
        self.incoming_buffer.add_data(data)
        self.incoming_buffer.max_frame_size = self.max_inbound_frame_size
        try:
            for frame in self.incoming_buffer:
                events.extend(self._receive_frame(frame))
        except hyperframe.exceptions.InvalidPaddingError as e:
            self._terminate_connection(h2.errors.ErrorCodes.PROTOCOL_ERROR)
            err = h2.exceptions.ProtocolError("Received frame with invalid padding.")
            err.events_before = events  # type: ignore[attr-defined]
            raise err from e
        except h2.exceptions.ProtocolError as e:
            self._terminate_connection(e.error_code)
            e.events_before = events  # type: ignore[attr-defined]
            raise
        return events

    def _stream_is_closed_by_reset(self, stream_id: int) -> bool:
        closed: bool = super()._stream_is_closed_by_reset(stream_id) or self._stream_is_closed_by_end(stream_id)
        return closed

    # Frames on a stream we reset never become h2 events (h2 answers them itself), so a cancelled
    # call's late responses would vanish unseen. ``late_hook(stream_id, kind, data, end_stream)``
    # sees them (kind ``data``/``headers``/``rst``); h2 then drops them as before, so they are
    # never forwarded. Only frames on closed streams and RST_STREAMs reach the hook: not the hot path.
    late_hook: Callable[[int, str, Any, bool], None] | None = None

    def _handle_data_on_closed_stream(self, events: Any, exc: Any, frame: Any) -> Any:
        if self.late_hook is not None:
            self.late_hook(frame.stream_id, "data", frame.data, "END_STREAM" in frame.flags)
        return super()._handle_data_on_closed_stream(events, exc, frame)

    def _receive_headers_frame(self, frame: Any) -> Any:
        if (
            self.late_hook is not None
            and self._stream_closed_by(frame.stream_id) is h2.stream.StreamClosedBy.SEND_RST_STREAM
        ):
            # Decoded here (once) so the HPACK table stays in step; then what h2 does for a frame on
            # a stream it reset: a stream error, answered with RST_STREAM, no event.
            headers = h2.connection._decode_headers(self.decoder, frame.data)
            self.state_machine.process_input(h2.connection.ConnectionInputs.RECV_HEADERS)
            self.late_hook(frame.stream_id, "headers", headers, "END_STREAM" in frame.flags)
            raise h2.exceptions.StreamClosedError(frame.stream_id)
        return super()._receive_headers_frame(frame)

    def _receive_rst_stream_frame(self, frame: Any) -> Any:
        if self.late_hook is not None:
            self.late_hook(frame.stream_id, "rst", frame.error_code, True)
        return super()._receive_rst_stream_frame(frame)


def _config(client_side: bool) -> h2.config.H2Configuration:
    return h2.config.H2Configuration(
        client_side=client_side,
        header_encoding=None,
        validate_outbound_headers=False,
        normalize_outbound_headers=False,
        validate_inbound_headers=False,
        normalize_inbound_headers=False,
        split_outbound_cookies=False,
    )


def _new_connection(client_side: bool) -> PatchedH2Connection:
    conn = PatchedH2Connection(config=_config(client_side))
    conn.local_settings = h2.settings.Settings(
        client=client_side,
        initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 2**31 - 1,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST,
            h2.settings.SettingCodes.MAX_FRAME_SIZE: 1024 * 1024,
            h2.settings.SettingCodes.ENABLE_PUSH: 0,
        },
    )
    # h2 checks inbound header blocks against this, independently of the advertised setting.
    conn.max_inbound_frame_size = 1024 * 1024
    conn.initiate_connection()
    conn.increment_flow_control_window(CONNECTION_WINDOW - 65535)
    return conn


class Assembler:
    """Cuts one direction of a stream's DATA into gRPC messages (5-byte prefix + body)."""

    __slots__ = ("_flag", "_hash", "_hdr", "_keep", "_kept", "_length", "_parts", "_remaining")

    def __init__(self, keep: int, hashing: bool) -> None:
        self._hdr = bytearray()
        self._remaining = -1
        self._flag = 0
        self._length = 0
        self._parts: list[bytes] = []
        self._kept = 0
        self._keep = keep
        self._hash: Any = hashlib.sha256() if hashing else None

    @property
    def partial(self) -> bool:
        """Bytes of an unfinished message are buffered."""
        return bool(self._hdr) or self._remaining >= 0

    def feed(self, data: bytes) -> list[tuple[int, int, bytes, bool, str | None]]:
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
                        body = data[i : i + self._length]
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
                    self._parts.append(chunk if k == take else chunk[:k])
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
    """One RPC: a client stream and its upstream twin."""

    __slots__ = (
        "c2s_asm",
        "c2s_end",
        "c2s_queue",
        "client_done",
        "down_id",
        "ended",
        "id",
        "index",
        "inflight",
        "method",
        "mkind",
        "resp_headers",
        "s2c_asm",
        "s2c_end_bare",
        "s2c_queue",
        "s2c_rst",
        "s2c_trailers",
        "t0",
        "timeout_ms",
        "up_end_recv",
        "up_end_sent",
        "up_id",
        "up_reset",
    )  # fmt: skip

    def __init__(self, call_id: str, down_id: int, method: str, timeout_ms: float | None, opts: RelayOptions) -> None:
        self.id = call_id
        self.down_id = down_id
        self.up_id: int | None = None
        self.method = method
        self.mkind = labels.method_kind(method)
        self.t0 = time.monotonic_ns()
        self.timeout_ms = timeout_ms
        self.inflight = InFlight(unary=self.mkind == labels.UNARY_INFER)
        # (data, flow-controlled length to acknowledge once sent)
        self.c2s_queue: collections.deque[list[Any]] = collections.deque()
        self.c2s_end = False  # client END_STREAM waiting behind queued data
        self.s2c_queue: collections.deque[list[Any]] = collections.deque()
        self.s2c_trailers: list[tuple[bytes, bytes]] | None = None
        self.s2c_rst: int | None = None  # upstream RST_STREAM to forward after trailers
        self.s2c_end_bare = False  # upstream END_STREAM on DATA without trailers
        keep = LABEL_KEEP if opts.payload != "full" else max(LABEL_KEEP, opts.payload_cap or 2**62)
        hashing = opts.payload == "full"
        self.c2s_asm = Assembler(keep, hashing)
        self.s2c_asm = Assembler(keep, hashing)
        self.index = [0, 0]
        self.resp_headers: list[tuple[bytes, bytes]] | None = None
        self.ended = False
        self.client_done = False  # we sent END_STREAM or RST_STREAM to the client
        self.up_reset = False  # the upstream stream was reset (by either side) or its connection died
        self.up_end_recv = False
        self.up_end_sent = False

    @property
    def up_closed(self) -> bool:
        """Nothing more can happen on the upstream stream."""
        return self.up_id is None or self.up_reset or (self.up_end_recv and self.up_end_sent)

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
        self.asm = Assembler(LABEL_KEEP, False)
        self.records = 0


def _coalesce(q: collections.deque[list[Any]], limit: int) -> None:
    """Join the chunks at the head of ``q`` into one of at most ``limit`` bytes: one h2 send_data
    and one acknowledge instead of one per DATA frame received."""
    if len(q[0][0]) + len(q[1][0]) > limit:
        return
    parts: list[bytes] = []
    acked = size = 0
    while q and size + len(q[0][0]) <= limit:
        data, n = q.popleft()
        parts.append(data)
        acked += n
        size += len(data)
    q.appendleft([b"".join(parts), acked])


#: Causes for which the proxy itself gives the client a status (the upstream cannot): code, message.
_PROXY_ANSWERS: dict[str, tuple[int, str]] = {
    "upstream_disconnect": (14, "triton-tap: upstream connection lost"),
    "proxy_shutdown": (14, "triton-tap: proxy shutting down"),
    "proxy_error": (13, "triton-tap: internal error (see the proxy's log)"),
}


def _pairs(headers: list[tuple[bytes, bytes]]) -> list[list[str]]:
    return [[k.decode("latin-1"), v.decode("latin-1")] for k, v in headers]


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


def _close_after_peer(transport: asyncio.Transport) -> None:
    """Let the client close the connection; close it ourselves only if it has not after a while.

    gRPC C-core clients drop bytes that arrive in the same read as the connection's end (TCP FIN,
    or RST when we close with their last frames unread): closing right after the final trailers
    made the client report "Socket closed (GOAWAY received)" instead of the status we sent, about
    one run in five. A client that got GOAWAY and has no calls left closes on its own.
    """
    if not transport.is_closing():
        asyncio.get_running_loop().call_later(_LINGER_S, transport.close)


class _Side(asyncio.Protocol):
    """One transport of a tunnel; forwards everything to the tunnel."""

    def __init__(self, tunnel: Tunnel, upstream: bool) -> None:
        self.tunnel = tunnel
        self.upstream = upstream
        self.transport: asyncio.Transport | None = None
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.tunnel.side_made(self)

    def data_received(self, data: bytes) -> None:
        self.tunnel.side_data(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.tunnel.side_lost(self, exc)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.tunnel.flush_all()

    def eof_received(self) -> bool:
        return False


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
        tunnel = Tunnel(self, f"c{next(self._conn_ids)}")
        self.tunnels.add(tunnel)
        return tunnel.down

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


class Tunnel:
    """A client connection, its upstream connection, and the calls between them."""

    def __init__(self, relay: Relay, conn_id: str) -> None:
        self.relay = relay
        self.emit = relay.emit
        self.opts = relay.options
        self.conn_id = conn_id
        self.down = _Side(self, upstream=False)
        self.up = _Side(self, upstream=True)
        self.dconn = _new_connection(client_side=False)
        self.uconn = _new_connection(client_side=True)
        self.by_down: dict[int, Call] = {}
        self.by_up: dict[int, Call] = {}
        self.peer = ""
        self.up_ready = False
        self.up_failed: str | None = None
        self.up_lost = False
        self.down_lost = False
        self.goaway_sent = False
        self.up_goaway = False  # the upstream sent GOAWAY: no new streams towards it
        self.max_down_id = 0
        self._connect_task: asyncio.Task[None] | None = None
        # calls with upstream DATA queued during the current read: flushed once, after the read
        self._s2c_dirty: dict[int, Call] = {}
        # upstream stream id -> cancelled call still watched for late frames (insertion = age order)
        self._late: dict[int, _Late] = {}
        self.uconn.late_hook = self._late_frame
        # when the current client read arrived: the start of a cancel's way upstream
        self._down_read_ns = 0

    # -- transports ----------------------------------------------------------------------------

    def side_made(self, side: _Side) -> None:
        if side is self.down:
            assert side.transport is not None
            peer = side.transport.get_extra_info("peername")
            self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
            # Hold the client's bytes until the upstream connection exists; our SETTINGS go out now.
            side.transport.pause_reading()
            self._write(self.down, self.dconn)
            self._connect_task = asyncio.get_running_loop().create_task(
                self._connect(), name=f"triton-tap-upstream-connect-{self.conn_id}"
            )
        else:
            self.up_ready = True
            self._write(self.up, self.uconn)

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
            self.up_failed = f"triton-tap: upstream {host}:{port} unreachable: {e.strerror or e}"
            log.warning("upstream_connect_failed", conn=self.conn_id, error=self.up_failed)
        if self.down.transport is not None and not self.down_lost:
            self.down.transport.resume_reading()

    def side_data(self, side: _Side, data: bytes) -> None:
        conn = self.dconn if side is self.down else self.uconn
        try:
            if side is self.down:
                self._down_read_ns = time.monotonic_ns()
            try:
                events = conn.receive_data(data)
            except h2.exceptions.ProtocolError as e:
                # What the frames before the bad one said did happen: handle it, then the error.
                self._handle(side, getattr(e, "events_before", []))
                raise
            self._handle(side, events)
        except h2.exceptions.ProtocolError as e:
            # The peer broke HTTP/2: h2 has queued a GOAWAY for it; the other side stays intact.
            self._protocol_error(side, e)
            return
        except Exception:
            # A bug of ours must cost one connection, never the proxy, and be recorded as ours.
            log.exception("relay_internal_error", conn=self.conn_id)
            self.abort("proxy_error")
            return
        self._write(self.up, self.uconn)
        self._write(self.down, self.dconn)

    def _handle(self, side: _Side, events: list[Any]) -> None:
        if side is self.down:
            for e in events:
                self._down_event(e)
        else:
            for e in events:
                # Anything but DATA first sends the DATA queued before it: order is kept.
                if self._s2c_dirty and type(e) is not h2.events.DataReceived:
                    self._flush_dirty()
                self._up_event(e)
            if self._s2c_dirty:
                self._flush_dirty()

    def _protocol_error(self, side: _Side, e: h2.exceptions.ProtocolError) -> None:
        """Record the violation, send h2's GOAWAY, close that side; its calls end when it is lost."""
        code = int(getattr(e, "error_code", None) or h2.errors.ErrorCodes.PROTOCOL_ERROR)
        log.warning("http2_protocol_error", conn=self.conn_id, upstream=side.upstream, error=str(e))
        self.emit(
            ev.ProtocolViolated(
                t_ns=time.time_ns(), conn=self.conn_id, side="upstream" if side.upstream else "client",
                error=str(e) or type(e).__name__, error_code=code,
                open_calls=[c.id for c in self.by_down.values() if not c.ended],
            )
        )  # fmt: skip
        self._write(self.down, self.dconn)
        self._write(self.up, self.uconn)
        # That h2 connection is CLOSED from now on, but the transport's connection_lost comes
        # later: until then nothing may be sent on it, or the other side would be blamed for the
        # error h2 raises.
        if side.upstream:
            self.up_lost = True
        else:
            self.down_lost = True
        if side.transport is not None:
            side.transport.close()

    def _flush_dirty(self) -> None:
        dirty = list(self._s2c_dirty.values())
        self._s2c_dirty.clear()
        for call in dirty:
            self._flush_s2c(call)

    def side_lost(self, side: _Side, exc: Exception | None) -> None:
        if side is self.down:
            self.down_lost = True
            for call in list(self.by_down.values()):
                if not call.ended:
                    self._cancel(call, "client_disconnect", None)
            self._write(self.up, self.uconn)
            if self.up.transport is not None:
                self.up.transport.close()
            if self._connect_task is not None and not self._connect_task.done():
                self._connect_task.cancel()
            self.relay.tunnels.discard(self)
        else:
            if self.down_lost or not self.up_ready:
                return
            self.up_lost = True
            for call in list(self.by_down.values()):
                if not call.ended:
                    self._cancel(call, "upstream_disconnect", None)
            self.goaway_down()
            self._maybe_close_down()

    def _write(self, side: _Side, conn: h2.connection.H2Connection) -> None:
        data = conn.data_to_send()
        if data and side.transport is not None and not side.transport.is_closing():
            side.transport.write(data)

    def flush_all(self) -> None:
        """Retry every queued transfer (after window updates, settings changes, transport resume)."""
        for call in list(self.by_down.values()):
            self._flush_c2s(call)
            self._flush_s2c(call)
        self._write(self.up, self.uconn)
        self._write(self.down, self.dconn)

    def goaway_down(self) -> None:
        """Tell the client to open no new calls on this connection; open calls go on."""
        if not self.goaway_sent and not self.down_lost:
            self.goaway_sent = True
            self.dconn.close_connection(last_stream_id=self.max_down_id)
            self._write(self.down, self.dconn)
            self._maybe_close_down()

    def _maybe_close_down(self) -> None:
        if self.goaway_sent and not self.by_down and self.down.transport is not None:
            # Frames h2 queued just now (the last call's trailers) must leave before the close.
            self._write(self.down, self.dconn)
            _close_after_peer(self.down.transport)

    def abort(self, cause: str) -> None:
        """End every open call with ``cause`` and close both connections."""
        for call in list(self.by_down.values()):
            if not call.ended:
                self._cancel(call, cause, None)
        self.goaway_down()
        self._write(self.up, self.uconn)
        self._write(self.down, self.dconn)
        if self.down.transport is not None:
            _close_after_peer(self.down.transport)
        if self.up.transport is not None:
            self.up.transport.close()

    # -- client side events --------------------------------------------------------------------

    def _down_event(self, e: Any) -> None:
        if isinstance(e, h2.events.DataReceived):
            call = self.by_down.get(e.stream_id)
            if call is None or call.ended:
                self.dconn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                return
            self._messages(call, 0, e.data)
            call.c2s_queue.append([e.data, e.flow_controlled_length])
            self._flush_c2s(call)
        elif isinstance(e, h2.events.WindowUpdated):
            if e.stream_id:
                call = self.by_down.get(e.stream_id)
                if call is not None:
                    self._flush_s2c(call)
            else:
                for call in list(self.by_down.values()):
                    self._flush_s2c(call)
        elif isinstance(e, h2.events.RequestReceived):
            self._request(e)
        elif isinstance(e, h2.events.StreamEnded):
            call = self.by_down.get(e.stream_id)
            if call is not None and not call.ended:
                self.emit(ev.HalfClosed(t_ns=time.time_ns(), call=call.id))
                call.c2s_end = True
                self._flush_c2s(call)
        elif isinstance(e, h2.events.StreamReset):
            call = self.by_down.get(e.stream_id)
            if call is not None and not call.ended:
                cause = causes.client_reset_cause(call.timeout_ms, call.elapsed_ms())
                self._cancel(call, cause, e.error_code, self._down_read_ns)
            elif call is not None:
                self._forget(call)
        elif isinstance(e, h2.events.RemoteSettingsChanged):
            for call in list(self.by_down.values()):
                self._flush_s2c(call)

    def _request(self, e: Any) -> None:
        sid = e.stream_id
        self.max_down_id = max(self.max_down_id, sid)
        headers: list[tuple[bytes, bytes]] = e.headers
        path = _header(headers, b":path") or b""
        timeout = _header(headers, b"grpc-timeout")
        timeout_ms = causes.parse_grpc_timeout(timeout.decode("latin-1")) if timeout else None
        call = Call(f"{self.conn_id}.{sid}", sid, path.decode("latin-1"), timeout_ms, self.opts)
        self.by_down[sid] = call
        self.relay.open_calls += 1
        meta = [
            [k, REDACTED if self.opts.redacts(k) else v]
            for k, v in _pairs(headers)
        ]
        self.emit(
            ev.CallStarted(
                t_ns=time.time_ns(), call=call.id, conn=self.conn_id, method=call.method,
                peer=self.peer, metadata=meta, timeout_ms=timeout_ms,
            )
        )  # fmt: skip
        if self.up_failed is not None or self.up_lost or not self.up_ready:
            reason = self.up_failed or "triton-tap: upstream connection lost"
            self._fail_down(call, "upstream_disconnect", 14, reason)
            return
        if self.up_goaway:
            # The upstream is going away and will not take this stream; the client has (or is about
            # to get) our GOAWAY: refused, never processed, so the client retries on a new connection.
            call.client_done = True
            self.dconn.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
            self._end(call, "error", "UNAVAILABLE", "triton-tap: upstream connection is shutting down (GOAWAY)", None,
                      rst=h2.errors.ErrorCodes.REFUSED_STREAM)  # fmt: skip
            return
        up_id = self.uconn.get_next_available_stream_id()
        authority = self.relay.authority
        if authority is not None:
            headers = [(k, authority) if k == b":authority" else (k, v) for k, v in headers]
        try:
            self.uconn.send_headers(up_id, headers, end_stream=False)
        except h2.exceptions.TooManyStreamsError:
            # The upstream's concurrent-stream limit: refuse this stream only (REFUSED_STREAM says
            # "never processed", so the client may retry it itself); the proxy never queues or
            # re-sends on its own.
            call.client_done = True
            self.dconn.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
            self._end(call, "error", "UNAVAILABLE", "triton-tap: upstream concurrent-stream limit reached", None,
                      rst=h2.errors.ErrorCodes.REFUSED_STREAM)  # fmt: skip
            return
        call.up_id = up_id
        self.by_up[up_id] = call

    def _flush_c2s(self, call: Call) -> None:
        if call.up_id is None or call.up_reset or self.up.paused:
            return
        try:
            if not self._pump(self.uconn, call.up_id, call.c2s_queue, self.dconn, call.down_id):
                return
            if call.c2s_end:
                call.c2s_end = False
                self.uconn.end_stream(call.up_id)
                call.up_end_sent = True
                if call.ended and call.up_closed:
                    self._forget(call)
        except h2.exceptions.ProtocolError:
            # Upstream already closed this stream: discard what the client still sends, but keep
            # acknowledging it so the connection window does not leak.
            while call.c2s_queue:
                self.dconn.acknowledge_received_data(call.c2s_queue.popleft()[1], call.down_id)
            call.c2s_end = False
            call.up_reset = True

    @staticmethod
    def _pump(
        conn: h2.connection.H2Connection,
        sid: int,
        q: collections.deque[list[Any]],
        source: h2.connection.H2Connection,
        source_sid: int | None,
    ) -> bool:
        """Send queued DATA on ``sid`` as far as its window allows; True when the queue emptied.

        A chunk's bytes are acknowledged to ``source`` only once sent, which is what makes the
        backpressure end to end.
        """
        if len(q) > 1:
            _coalesce(q, conn.max_outbound_frame_size)
        while q:
            item = q[0]
            data = item[0]
            window = conn.local_flow_control_window(sid)
            if window <= 0:
                return False
            size = min(len(data), window, conn.max_outbound_frame_size)
            if size < len(data):
                # A memoryview keeps the rest without copying it once per frame sent.
                view = data if isinstance(data, memoryview) else memoryview(data)
                conn.send_data(sid, view[:size])
                item[0] = view[size:]
                continue
            conn.send_data(sid, data)
            q.popleft()
            if source_sid is not None:
                source.acknowledge_received_data(item[1], source_sid)
        return True

    # -- upstream side events ------------------------------------------------------------------

    def _up_event(self, e: Any) -> None:
        if isinstance(e, h2.events.DataReceived):
            call = self.by_up.get(e.stream_id)
            if call is None or call.ended:
                self.uconn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                return
            self._messages(call, 1, e.data)
            call.s2c_queue.append([e.data, e.flow_controlled_length])
            # Flushed after the whole read (side_data): the frames of one read leave as one.
            self._s2c_dirty[call.down_id] = call
        elif isinstance(e, h2.events.WindowUpdated):
            if e.stream_id:
                call = self.by_up.get(e.stream_id)
                if call is not None:
                    self._flush_c2s(call)
            else:
                for call in list(self.by_down.values()):
                    self._flush_c2s(call)
        elif isinstance(e, h2.events.ResponseReceived):
            call = self.by_up.get(e.stream_id)
            if call is None or call.ended:
                return
            headers = e.headers
            if e.stream_ended is not None:
                # Trailers-only response: status in the only HEADERS frame.
                call.resp_headers = None
                call.s2c_trailers = headers
                self._flush_s2c(call)
            else:
                call.resp_headers = headers
                self.dconn.send_headers(call.down_id, headers)
        elif isinstance(e, h2.events.TrailersReceived):
            call = self.by_up.get(e.stream_id)
            if call is not None and not call.ended:
                call.s2c_trailers = e.headers
                self._flush_s2c(call)
        elif isinstance(e, h2.events.StreamEnded):
            call = self.by_up.get(e.stream_id)
            if call is not None:
                call.up_end_recv = True
                if not call.ended and call.s2c_trailers is None:
                    call.s2c_end_bare = True
                    self._flush_s2c(call)
                elif call.ended and call.up_closed:
                    self._forget(call)
        elif isinstance(e, h2.events.StreamReset):
            call = self.by_up.get(e.stream_id)
            if call is None:
                return
            call.up_reset = True
            if call.ended:
                # Late reset after a complete response (Triton: trailers then RST NO_ERROR): pass
                # it on after what is queued, so the client stops sending too.
                call.s2c_rst = e.error_code
                self._flush_s2c(call)
                self._forget(call)
                return
            if call.s2c_trailers is not None or call.s2c_end_bare:
                # The response is complete; its reset must not overtake queued data/trailers.
                call.s2c_rst = e.error_code
                self._flush_s2c(call)
            else:
                self._upstream_reset(call, e.error_code)
        elif isinstance(e, h2.events.ConnectionTerminated):
            # Upstream GOAWAY: pass it on so the client opens new calls on a new connection (and
            # so a new upstream connection); calls in flight drain.
            self.up_goaway = True
            last = e.last_stream_id if e.last_stream_id is not None else 2**31 - 1
            for call in list(self.by_up.values()):
                if call.up_id is not None and call.up_id > last and not call.ended:
                    # Never processed upstream (RFC 9113 6.8): REFUSED_STREAM lets the client retry it.
                    call.up_reset = True
                    self._upstream_reset(call, h2.errors.ErrorCodes.REFUSED_STREAM)
            self.goaway_down()
        elif isinstance(e, h2.events.RemoteSettingsChanged):
            for call in list(self.by_down.values()):
                self._flush_c2s(call)

    def _flush_s2c(self, call: Call) -> None:
        if self.down.paused or self.down_lost:
            return
        conn = self.dconn
        if call.client_done:
            if call.s2c_rst is not None:
                rst, call.s2c_rst = call.s2c_rst, None
                try:
                    conn.reset_stream(call.down_id, rst)
                except h2.exceptions.ProtocolError:
                    pass
            return
        sid = call.down_id
        try:
            if not self._pump(conn, sid, call.s2c_queue, self.uconn, call.up_id):
                return
            if call.s2c_trailers is not None:
                trailers = call.s2c_trailers
                conn.send_headers(sid, trailers, end_stream=True)
                call.client_done = True
                self._end_with_status(call, trailers)
            elif call.s2c_end_bare:
                conn.end_stream(sid)
                call.client_done = True
                self._end(call, "error", "INTERNAL", "upstream ended the stream without a grpc-status", None)
            if call.client_done and call.s2c_rst is not None:
                conn.reset_stream(sid, call.s2c_rst)
                call.s2c_rst = None
        except h2.exceptions.ProtocolError:
            # The client already closed or reset this stream.
            call.client_done = True

    # -- messages --------------------------------------------------------------------------------

    def _messages(self, call: Call, direction: int, data: bytes) -> None:
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

    def _end_with_status(self, call: Call, trailers: list[tuple[bytes, bytes]]) -> None:
        raw, details = _grpc_status(trailers)
        if raw is None or not raw.isdigit():
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

    def _upstream_reset(self, call: Call, code: int) -> None:
        """Upstream reset the stream before sending a status."""
        call.client_done = True
        try:
            self.dconn.reset_stream(call.down_id, code)
        except h2.exceptions.ProtocolError:
            pass
        status = causes.RST_TO_STATUS.get(code, "INTERNAL")
        self._end(call, "error", status, f"upstream reset the stream (HTTP/2 error {code})", None, rst=code)

    def _cancel(self, call: Call, cause: str, rst_code: int | None, learned_ns: int = 0) -> None:
        """The call ends by a cancel-like event: record it first, then act on both sides.

        ``learned_ns`` (monotonic) is when the proxy learned of it, if earlier than now (the read
        that carried the client's RST_STREAM).
        """
        learned_ns = learned_ns or time.monotonic_ns()
        in_flight, executing = call.inflight.snapshot()
        forwarded = False
        rst_us: float | None = None
        if call.up_id is not None and not call.up_closed and not self.up_lost:
            if self.relay.before_cancel is not None:
                self.relay.before_cancel(call.id)
            try:
                self.uconn.reset_stream(call.up_id, h2.errors.ErrorCodes.CANCEL)
                forwarded = True
            except h2.exceptions.ProtocolError:
                pass
            if forwarded:
                # Written now rather than after the whole read: the cancel is what Triton must see
                # first, and its latency is measured to the socket.
                self._write(self.up, self.uconn)
                rst_us = (time.monotonic_ns() - learned_ns) / 1e3
                self._watch_late(call)
        call.up_reset = True
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
        call.client_done = True
        self._end(call, cause, causes.STATUS_FOR_CAUSE[cause], None, None)

    # -- late frames after a forwarded cancel ------------------------------------------------------

    def _watch_late(self, call: Call) -> None:
        assert call.up_id is not None
        if len(self._late) >= LATE_WATCH:
            # Triton usually sends nothing after our RST: old entries would otherwise live as long
            # as the connection.
            del self._late[next(iter(self._late))]
        self._late[call.up_id] = _Late(call)
        if call.s2c_asm.partial:
            # A message cut by the cancel: its tail arrives late and must not be read as a new one.
            self._late[call.up_id].asm = call.s2c_asm

    def _late_frame(self, sid: int, kind: str, data: Any, end_stream: bool) -> None:
        """A frame the upstream sent on a stream the proxy reset: recorded as ``late``, never forwarded."""
        late = self._late.get(sid)
        if late is None:
            return
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

    def _fail_down(self, call: Call, cause: str, code: int, message: str) -> None:
        """Give the client a gRPC status of our own (the upstream cannot)."""
        if not call.client_done and not self.down_lost:
            call.s2c_trailers = _status_trailers(code, message, call.resp_headers is None)
            try:
                self.dconn.send_headers(call.down_id, call.s2c_trailers, end_stream=True)
            except h2.exceptions.ProtocolError:
                pass
            call.client_done = True
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
        self.relay.open_calls -= 1
        self.emit(
            ev.CallEnded(
                t_ns=time.time_ns(), call=call.id, status=status, details=details, cause=cause,  # type: ignore[arg-type]
                trailers=_pairs(trailers) if trailers is not None else None,
                initial_metadata=_pairs(call.resp_headers) if call.resp_headers is not None else None,
                duration_ms=call.elapsed_ms(), messages_c2s=call.index[0], messages_s2c=call.index[1],
                upstream_rst_code=rst,
                s2c_undelivered_bytes=sum(len(i[0]) for i in call.s2c_queue) if call.s2c_queue else 0,
            )
        )  # fmt: skip
        if call.client_done and call.up_closed:
            self._forget(call)
        self._maybe_close_down()

    def _forget(self, call: Call) -> None:
        """Drop a finished call's bookkeeping; late frames are acknowledged and ignored."""
        if not call.ended:
            return
        # Bytes still queued were never forwarded: give their window back at connection level.
        while call.c2s_queue:
            self.dconn.acknowledge_received_data(call.c2s_queue.popleft()[1], call.down_id)
        if call.up_id is not None:
            while call.s2c_queue:
                self.uconn.acknowledge_received_data(call.s2c_queue.popleft()[1], call.up_id)
            self.by_up.pop(call.up_id, None)
        self.by_down.pop(call.down_id, None)
        self._maybe_close_down()

"""A minimal gRPC-over-HTTP/2 client that sends recorded bytes as they are (asyncio + h2).

Raw HTTP/2 rather than grpc.aio, because send must do exactly what the recorded client did and
nothing else: an RST_STREAM(CANCEL) at a chosen moment, a TCP close *without* resetting the streams
first (grpc.aio's ``channel.close()`` cancels every call before it closes, which a recorder would
see as a cancel, not a disconnect), the recorded ``grpc-timeout`` header verbatim with the client's
own timer behind it, the recorded compressed flag, and the headers in the recorded order with none
of grpc's own added. Responses are only counted (gRPC message prefixes), never decoded: the
recorder in front of the target captures them.

Every call ends with the outcome the client observed (:data:`OUTCOMES`): the server's grpc-status
or RST_STREAM, or send's own cancel or disconnect; or, when it observed none, why not: the
connection was lost under the call, or the call was never opened. A frame for a call that is
already over ends nothing else: gRPC clients ignore such frames, so send does too.

A GOAWAY ends only what it says it ends (RFC 9113 6.8): the calls above its last stream id were never
processed, and no new call goes out on the connection; the calls up to it are still read to their end
(a graceful GOAWAY, NO_ERROR, is how a gRPC server shutting down lets its calls in flight finish).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.stream
from hyperframe.frame import GoAwayFrame

#: The server's grpc-status ended the call (in :attr:`Stream.status`).
STATUS = "grpc-status"
#: The server reset the stream (RST_STREAM, code in :attr:`Stream.reset`).
RESET = "reset by the server"
#: send ended it itself: a re-enacted cancel, deadline or disconnect, or ``--drain`` ran out.
BY_SEND = "ended by send"
#: The server ended the stream without a grpc-status (no gRPC outcome).
NO_STATUS = "ended without grpc-status"
#: The connection ended under the open call: the server's answer, if any, never reached send.
LOST = "connection lost"
#: Never opened: its connection was gone (or could not be made) when the call was due.
NOT_SENT = "not sent"
#: Sent, and above the last stream id of the server's GOAWAY: the server says it never processed it
#: (RFC 9113 6.8), an answer observed, as a RST_STREAM(REFUSED_STREAM) is.
REFUSED = "refused unprocessed"
#: Every outcome, in the order the summary lists them.
OUTCOMES = (STATUS, RESET, REFUSED, BY_SEND, NO_STATUS, LOST, NOT_SENT)
#: Outcomes in which send did not observe how the server ended the call.
UNOBSERVED = frozenset({NO_STATUS, LOST, NOT_SENT})


#: The frames that end or carry a call (not WINDOW_UPDATE or PRIORITY, which RFC 9113 lets trail a closed stream).
_STRAY = frozenset({"HeadersFrame", "DataFrame", "RstStreamFrame"})
_BY_SERVER_RESET = h2.stream.StreamClosedBy.RECV_RST_STREAM


class _Client(h2.connection.H2Connection):
    """h2's client connection, except that a frame for a stream that is already over ends nothing else.

    h2 already answers a frame on a stream *it* reset with an RST_STREAM, but a frame arriving after
    the server's own END_STREAM (a second trailers block, say, after the server's RST_STREAM) it
    treats as a connection error: it sends GOAWAY and every other call on the connection is lost.
    gRPC clients ignore such frames for that stream only; a re-enacted client must do the same, or
    one stray frame costs every later call on the connection. The headers are HPACK-decoded before
    h2 raises, so the decoder stays in step with the server's encoder.

    Nor does it judge the server's header fields, as gRPC clients do not: Triton's status message for an
    input of the wrong shape ends in a space, which h2 took for a protocol error, and the connection's
    later calls were lost with that one. The fields are recorded as they came, as the proxy records them.
    """

    def __init__(self) -> None:
        super().__init__(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8", validate_inbound_headers=False)
        )
        self.stray_frames = 0
        # The events of the current receive_data so far: h2 drops them when a later frame of the same read
        # raises ProtocolError, and the calls they ended would be lost with the connection.
        self.decoded: list[h2.events.Event] = []

    def receive_data(self, data: Any) -> list[h2.events.Event]:
        self.decoded = []
        return super().receive_data(data)

    def _receive_frame(self, frame: Any) -> list[h2.events.Event]:
        events = self._receive_one(frame)
        self.decoded.extend(events)
        return events

    def _receive_one(self, frame: Any) -> list[h2.events.Event]:
        if isinstance(frame, GoAwayFrame):
            return [_terminated(frame)]
        # A frame on a stream the server reset h2 answers by itself, without an error: counted here. (Not on
        # one send reset: those frames may still have been in flight, and h2 answers them too.)
        if frame.stream_id and type(frame).__name__ in _STRAY and self._stream_closed_by(frame.stream_id) is _BY_SERVER_RESET:
            self.stray_frames += 1
        try:
            return super()._receive_frame(frame)
        except h2.exceptions.StreamClosedError:
            self.stray_frames += 1
            return []


def _terminated(frame: GoAwayFrame) -> h2.events.ConnectionTerminated:
    """The server's GOAWAY as h2's event, without h2's state machine seeing the frame.

    h2 (4.x) moves the whole connection to CLOSED on a received GOAWAY and raises ProtocolError for every
    frame after it, whatever the GOAWAY's error code and last stream id: the calls the server goes on to
    finish (RFC 9113 6.8: those up to the last stream id may still complete, as a gRPC server shutting down
    gracefully lets them) could not be read to their end; and since ``receive_data`` raises for the first
    such frame, the events it had decoded before the GOAWAY in that same read were dropped too. Kept from
    h2's handler, the GOAWAY leaves every stream, flow control and the HPACK decoder as they were, so h2
    goes on reading (and acknowledging) the remaining calls. What h2 no longer enforces, no new stream after
    it, :meth:`Connection.start` does.
    """
    event = h2.events.ConnectionTerminated()
    try:
        event.error_code = h2.errors.ErrorCodes(frame.error_code)
    except ValueError:  # an extension's code: kept as the number
        event.error_code = frame.error_code
    event.last_stream_id = frame.last_stream_id
    event.additional_data = frame.additional_data or None
    return event


@dataclass
class Stream:
    """What the client knows about one of its calls."""

    id: int
    responses: int = 0
    status: str | None = None  # grpc-status of the trailers (or of a trailers-only response)
    message: str | None = None  # its grpc-message (decoded); HTTP: an error reply's JSON "error"
    reset: int | None = None  # RST_STREAM code the server sent
    outcome: str | None = None  # one of OUTCOMES, set once, when the call ends
    why: str | None = None  # for LOST and NOT_SENT: what ended the connection
    done: asyncio.Event = field(default_factory=asyncio.Event)
    progress: asyncio.Event = field(default_factory=asyncio.Event)  # set on every response and at the end
    _need: int = 5  # bytes still wanted: of a prefix (while _in_prefix) or of a body
    _in_prefix: bool = True
    _prefix: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> None:
        """Count the complete gRPC messages in ``data`` (5-byte prefix + body)."""
        i, n = 0, len(data)
        while i < n:
            if self._in_prefix:
                take = min(5 - len(self._prefix), n - i)
                self._prefix += data[i : i + take]
                i += take
                if len(self._prefix) == 5:
                    self._need = int.from_bytes(self._prefix[1:5], "big")
                    self._prefix.clear()
                    self._in_prefix = False
                    if self._need == 0:
                        self._message()
            else:
                take = min(self._need, n - i)
                self._need -= take
                i += take
                if self._need == 0:
                    self._message()

    def _message(self) -> None:
        self._in_prefix = True
        self.responses += 1
        self.progress.set()

    def finish(self, outcome: str, why: str | None = None) -> None:
        """The stream is over, as observed (one of OUTCOMES); the first ending observed is the one kept."""
        if not self.done.is_set():
            self.outcome, self.why = outcome, why
        self.done.set()
        self.progress.set()


class Connection:
    """One HTTP/2 connection (h2c) carrying the calls of one captured client connection."""

    def __init__(self, host: str, port: int, name: str) -> None:
        self.host, self.port, self.name = host, port, name
        self._h2 = _Client()
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._window = asyncio.Event()
        self.streams: dict[int, Stream] = {}
        self.closed = False
        self.lost: str | None = None  # why the connection can carry no more calls (None while it can)
        self._goaway_said: str | None = None  # the server's first GOAWAY, described
        self._last_stream_id: int | None = None  # the lowest of the server's GOAWAYs so far
        self._goaway_error: str | None = None  # why, after a GOAWAY with an error code: the connection is over

    @property
    def stray_frames(self) -> int:
        """Frames that arrived for calls the server had already ended, and were ignored (frames after our own
        RST_STREAM are h2's to answer and are not counted)."""
        return self._h2.stray_frames

    async def open(self) -> None:
        """Connect and send the connection preface."""
        reader, self._writer = await asyncio.open_connection(self.host, self.port)
        self._h2.initiate_connection()
        self._flush()
        self._reader_task = asyncio.create_task(self._read(reader), name=f"send-read-{self.name}")

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data and self._writer is not None and not self.closed:
            self._writer.write(data)

    def start(self, headers: list[tuple[str, str]]) -> Stream:
        """Open a call with ``headers`` (pseudo-headers first); ended NOT_SENT if the connection is gone."""
        if self.lost is not None or self.closed:
            stream = Stream(0)
            stream.finish(NOT_SENT, self.lost or "its connection was closed")
            return stream
        sid = self._h2.get_next_available_stream_id()
        stream = Stream(sid)
        try:
            self._h2.send_headers(sid, headers)
        except h2.exceptions.ProtocolError as e:  # e.g. the server's max concurrent streams reached
            stream.finish(NOT_SENT, f"HTTP/2 refused to open it: {e}")
            return stream
        self.streams[sid] = stream
        self._flush()
        return stream

    async def send_message(self, stream: Stream, body: bytes, compressed: bool) -> None:
        """One gRPC message, flow control respected."""
        data = memoryview(bytes([1 if compressed else 0]) + len(body).to_bytes(4, "big") + body)
        while data and not stream.done.is_set() and not self.closed:
            try:
                room = min(self._h2.local_flow_control_window(stream.id), self._h2.max_outbound_frame_size)
            except h2.exceptions.StreamClosedError:  # the server ended it already
                return
            if room <= 0:
                self._window.clear()
                await self._window.wait()
                continue
            self._h2.send_data(stream.id, data[:room].tobytes())
            data = data[room:]
            self._flush()
            assert self._writer is not None
            try:
                await self._writer.drain()
            except OSError as e:  # reset or closed by the peer while we wrote
                self._lose(f"writing failed: {_describe(e)}")

    def half_close(self, stream: Stream) -> None:
        """END_STREAM: the client sends no more."""
        self._quietly(lambda: self._h2.end_stream(stream.id), stream)

    def cancel(self, stream: Stream, code: int = h2.errors.ErrorCodes.CANCEL) -> None:
        """RST_STREAM(CANCEL), as a gRPC client cancels (or gives up at its deadline); ``code``: another
        the recorded client reset with (ENHANCE_YOUR_CALM: it refused a response over its receive limit)."""
        self._quietly(lambda: self._h2.reset_stream(stream.id, code), stream)
        stream.finish(BY_SEND)

    def _quietly(self, action: object, stream: Stream) -> None:
        if self.closed or stream.done.is_set():
            return
        try:
            action()  # type: ignore[operator]
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            return  # the stream ended under us: nothing left to do on it
        self._flush()

    def disconnect(self) -> None:
        """Close the TCP connection at once, no GOAWAY, no reset: what a vanished client does."""
        if self._writer is not None and not self.closed:
            self.closed = True
            self._writer.close()
        self._end_all(BY_SEND)

    async def close(self) -> None:
        """A clean goodbye (GOAWAY) once the calls are over; idempotent."""
        if self._writer is not None and not self.closed:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self._h2.close_connection()
            self._flush()
            self.closed = True
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        # A call still open here was not waited for (send is stopping): no outcome was observed.
        self._end_all(LOST, "send stopped before the call ended")
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task

    def _end_all(self, outcome: str, why: str | None = None) -> None:
        for s in self.streams.values():
            s.finish(outcome, why)
        self._window.set()

    def _lose(self, why: str) -> None:
        """The connection can carry no more calls: every open call ends LOST (saying ``why``), every later
        one NOT_SENT (saying why the connection took no more calls: ``why``, or the GOAWAY that said so first)."""
        if self.lost is None:
            self.lost = why
        if self._writer is not None and not self.closed:
            self._flush()  # h2's GOAWAY, when it is h2 that gave up on the connection
            self.closed = True
            self._writer.close()
        self._end_all(LOST, why)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        why = "the connection was closed"
        try:
            while not self.closed:
                data = await reader.read(65536)
                if not data:
                    break
                for event in self._h2.receive_data(data):
                    self._event(event)
                if self._goaway_error is not None:
                    return  # the server ends the connection: the calls still open are lost (finally)
                self._flush()  # WINDOW_UPDATEs too, after a graceful GOAWAY: the server can finish sending
        except OSError as e:
            why = f"connection error: {_describe(e)}"
        except h2.exceptions.ProtocolError as e:
            why = f"HTTP/2 protocol error: {type(e).__name__}: {e}"
            for event in self._h2.decoded:  # what came before the bad frame in that read still happened
                self._event(event)
        finally:
            if self.closed and self._goaway_error is None:
                # send closed it (a re-enacted disconnect, or the end of the run): a call it had not
                # ended by then was not waited for.
                self._end_all(LOST, "send closed the connection before the call ended")
            elif self._goaway_said is not None and self._goaway_error is None:
                # The server's graceful GOAWAY kept these calls, but the connection ended before they did.
                self._lose(f"{why} after the server's {self._goaway_said}, before the call ended")
            else:
                self._lose(self._goaway_error or self.lost or why)

    def _event(self, event: object) -> None:
        if isinstance(event, h2.events.DataReceived):
            self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            s = self.streams.get(event.stream_id)
            if s is not None:
                s.feed(event.data)
        elif isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
            s = self.streams.get(event.stream_id)
            for k, v in event.headers or ():
                key = k.decode() if isinstance(k, bytes) else str(k)
                if key == "grpc-status" and s is not None:
                    s.status = v.decode() if isinstance(v, bytes) else str(v)
                elif key == "grpc-message" and s is not None:
                    s.message = unquote(v.decode() if isinstance(v, bytes) else str(v))
        elif isinstance(event, h2.events.StreamReset):
            s = self.streams.get(event.stream_id)
            if s is not None:
                s.reset = int(event.error_code)
                s.finish(RESET)
        elif isinstance(event, h2.events.StreamEnded):
            s = self.streams.get(event.stream_id)
            if s is not None:
                s.finish(STATUS if s.status is not None else NO_STATUS)
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self._window.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._goaway(event)

    def _goaway(self, event: h2.events.ConnectionTerminated) -> None:
        """The server's GOAWAY (see :func:`_terminated`): no new call on this connection; the calls above its
        last stream id end here; those up to it are read on to their end. After an error code the server
        closes the connection: the rest of this read is still applied, then the calls still open are lost."""
        code = event.error_code
        name = code.name if isinstance(code, h2.errors.ErrorCodes) else str(code)
        extra = (event.additional_data or b"").decode("utf-8", "replace")
        goaway = f"GOAWAY {name}" + (f" ({extra})" if extra else "")
        if self._goaway_said is None:
            self._goaway_said = goaway
        if code != h2.errors.ErrorCodes.NO_ERROR:
            self._goaway_error = f"{goaway} ended the connection"
        if self.lost is None:
            self.lost = self._goaway_error or f"{goaway}: the server takes no new call on this connection"
        last = event.last_stream_id if event.last_stream_id is not None else 0
        # A later GOAWAY may lower the last stream id (gRPC servers send 2^31-1 first), never raise it.
        if self._last_stream_id is not None:
            last = min(last, self._last_stream_id)
        self._last_stream_id = last
        for s in self.streams.values():
            if s.id > last:
                # Not LOST: the server did answer, that it never processed the call (RFC 9113 6.8). Nor NOT_SENT:
                # its HEADERS went out, and "sent N call(s)" counts it.
                s.finish(REFUSED, f"{goaway} (stream {s.id} above its last stream id {last})")
        self._window.set()  # a refused call waiting to send stops waiting


def _describe(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__

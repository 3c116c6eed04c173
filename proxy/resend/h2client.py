"""A minimal gRPC-over-HTTP/2 client that sends recorded bytes as they are (asyncio + h2).

Raw HTTP/2 rather than grpc.aio, because send must do exactly what the recorded client did and
nothing else: an RST_STREAM(CANCEL) at a chosen moment, a TCP close *without* resetting the streams
first (grpc.aio's ``channel.close()`` cancels every call before it closes, which a recorder would
see as a cancel, not a disconnect), the recorded ``grpc-timeout`` header verbatim with the client's
own timer behind it, the recorded compressed flag, and the headers in the recorded order with none
of grpc's own added. Responses are only counted (gRPC message prefixes), never decoded: the
recorder in front of the target captures them.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions


@dataclass
class Stream:
    """What the client knows about one of its calls."""

    id: int
    responses: int = 0
    status: str | None = None  # grpc-status of the trailers (or of a trailers-only response)
    reset: int | None = None  # RST_STREAM code the server sent
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

    def finish(self) -> None:
        """The stream is over (end, reset, or the connection went)."""
        self.done.set()
        self.progress.set()


class Connection:
    """One HTTP/2 connection (h2c) carrying the calls of one captured client connection."""

    def __init__(self, host: str, port: int, name: str) -> None:
        self.host, self.port, self.name = host, port, name
        self._h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._window = asyncio.Event()
        self.streams: dict[int, Stream] = {}
        self.closed = False

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
        """Open a call with ``headers`` (pseudo-headers first)."""
        sid = self._h2.get_next_available_stream_id()
        stream = self.streams[sid] = Stream(sid)
        if self.closed:
            stream.finish()
            return stream
        self._h2.send_headers(sid, headers)
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
            await self._writer.drain()

    def half_close(self, stream: Stream) -> None:
        """END_STREAM: the client sends no more."""
        self._quietly(lambda: self._h2.end_stream(stream.id), stream)

    def cancel(self, stream: Stream) -> None:
        """RST_STREAM(CANCEL), as a gRPC client cancels (or gives up at its deadline)."""
        self._quietly(lambda: self._h2.reset_stream(stream.id, h2.errors.ErrorCodes.CANCEL), stream)
        stream.finish()

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
        self._end_all()

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
        self._end_all()
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task

    def _end_all(self) -> None:
        for s in self.streams.values():
            s.finish()
        self._window.set()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while not self.closed:
                data = await reader.read(65536)
                if not data:
                    break
                for event in self._h2.receive_data(data):
                    self._event(event)
                self._flush()
        except (OSError, h2.exceptions.ProtocolError):
            pass  # the connection is gone: every open call ends below
        finally:
            self.closed = True
            self._end_all()

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
        elif isinstance(event, h2.events.StreamReset):
            s = self.streams.get(event.stream_id)
            if s is not None:
                s.reset = int(event.error_code)
                s.finish()
        elif isinstance(event, h2.events.StreamEnded):
            s = self.streams.get(event.stream_id)
            if s is not None:
                s.finish()
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self._window.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closed = True
            self._end_all()

"""A minimal HTTP/1.1 client that sends recorded HTTP requests as they are (asyncio + h11).

Not httpx or tritonclient.http, because send must do exactly what the recorded client did: the request
line and headers in the recorded order and case, nothing added (no user-agent, no accept-encoding), the
recorded body bytes, and a TCP reset at a chosen moment (after N events, or before the first) *without*
reading on, which is how an HTTP client cancels a Triton request (a plain close sends only a FIN, which
Triton, and the recording proxy after it, take for a half-close: Triton may still answer). Replies are only counted (one per body;
server-sent events one per event), never decoded: the recorder in front of the target
captures them. Events are counted by the recorder's own splitter (:class:`~proxy.triton.http_labels.SseSplitter`),
so send's count and the capture's agree (comments and blocks without data are no event; CR, LF and CRLF
all end a line).

One :class:`HttpConnection` per captured client connection: keep-alive, one request at a time (h11's
client does not pipeline; a captured pipelined request waits for the previous reply). Every exchange ends
with the outcome the client observed: the body's end (status in :attr:`~proxy.resend.h2client.Stream.status`),
send's own disconnect, or, when it observed none, why not (the connection lost, or never sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct

import h11

from proxy.resend.h2client import BY_SEND, LOST, NOT_SENT, Stream
from proxy.triton.http_labels import SseSplitter, is_event_stream

#: The reply's body ended cleanly (its length reached or its chunked terminator): status in ``Stream.status``.
BODY_END = "HTTP body ended"
#: send only counts events: its splitter keeps a few bytes of each, not the recorder's whole event.
_EVENT_KEEP = 64
#: An error reply's body is kept up to this, for its JSON ``error`` (:attr:`Stream.message`).
_ERROR_KEEP = 4096


class HttpConnection:
    """One HTTP/1.1 connection carrying the calls of one captured client connection, one at a time."""

    def __init__(self, host: str, port: int, name: str) -> None:
        self.host, self.port, self.name = host, port, name
        self._h11 = h11.Connection(h11.CLIENT)
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.StreamReader | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._turn = asyncio.Lock()  # one exchange at a time
        self._current: Stream | None = None
        self._events: SseSplitter | None = None  # the reply's event splitter when it is an event stream
        self._error: bytearray | None = None  # an error reply's body, so far (up to _ERROR_KEEP)
        self.closed = False
        #: send shut its writing side (a recorded client's FIN): no request follows on this connection.
        self.half_closed = False
        self.lost: str | None = None
        self.stray_frames = 0  # the gRPC client's counter; HTTP/1.1 has no such frames

    async def open(self) -> None:
        """Connect."""
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        self._reader_task = asyncio.create_task(self._read(self._reader), name=f"send-read-{self.name}")

    async def request(self, method: str, headers: list[tuple[str, str]], body: bytes) -> Stream:
        """Send ``VERB target`` with ``headers`` as recorded and ``body``, once the previous exchange is over;
        the returned stream ends with what the client observed (NOT_SENT when the connection is gone)."""
        verb, _, target = method.partition(" ")
        await self._turn.acquire()
        stream = Stream(0)
        if self._current is not None and self._current.done.is_set():
            self._next_cycle()
        if self.lost is not None or self.closed or self.half_closed or self._h11.our_state is not h11.IDLE:
            why = "the recorded client had half-closed this connection" if self.half_closed and not self.lost else None
            stream.finish(NOT_SENT, self.lost or why or "its connection was closed (the server did not keep it alive)")
            self._turn.release()
            return stream
        self._current = stream
        self._events = None
        try:
            data = self._h11.send(h11.Request(method=verb, target=target, headers=headers)) or b""
            if body:
                data += self._h11.send(h11.Data(data=body)) or b""
            data += self._h11.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as e:
            stream.finish(NOT_SENT, f"h11 refused the recorded request: {e}")
            self._lose(f"the recorded request could not be framed: {e}")
            return stream
        assert self._writer is not None
        self._writer.write(data)
        try:
            await self._writer.drain()
        except OSError as e:
            self._lose(f"writing failed: {e.strerror or e}")
        return stream

    def release(self, stream: Stream) -> None:
        """The caller is done with ``stream``: the next exchange may start."""
        if self._current is stream and self._turn.locked():
            self._turn.release()

    def _next_cycle(self) -> None:
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()

    def half_close(self) -> None:
        """Shut the writing side (TCP FIN) and read on, as the recorded client did: the server decides
        what follows (Triton answers a request it holds, cuts an event stream)."""
        if self._writer is not None and not self.closed and not self.half_closed:
            self.half_closed = True
            with contextlib.suppress(OSError):
                self._writer.write_eof()

    def disconnect(self) -> None:
        """Reset the TCP connection at once: how an HTTP client gives up on a request."""
        if self._writer is not None and not self.closed:
            self.closed = True
            sock = self._writer.get_extra_info("socket")
            if sock is not None:
                # Linger 0: the close sends RST, a loss on every side, not a FIN (a possible half-close).
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self._writer.close()
        if self._current is not None:
            self._current.finish(BY_SEND)

    async def close(self) -> None:
        """Close once the calls are over; idempotent."""
        if self._writer is not None and not self.closed:
            self.closed = True
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        if self._current is not None:
            self._current.finish(LOST, "send stopped before the call ended")
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task

    def _lose(self, why: str) -> None:
        if self.lost is None:
            self.lost = why
        if self._writer is not None and not self.closed:
            self.closed = True
            self._writer.close()
        if self._current is not None:
            self._current.finish(LOST, self.lost)

    def _count_events(self, data: bytes) -> None:
        stream = self._current
        assert stream is not None
        if self._events is None:
            self._events = SseSplitter(_EVENT_KEEP)
        if n := len(self._events.feed(data)):
            stream.responses += n
            stream.progress.set()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        why = "the server closed the connection"
        try:
            while not self.closed:
                data = await reader.read(65536)
                self._h11.receive_data(data)
                while True:
                    event = self._h11.next_event()
                    if not isinstance(event, h11.Event):  # NEED_DATA or PAUSED
                        break
                    self._event(event)
                    if isinstance(event, h11.ConnectionClosed):
                        break
                if not data:
                    break
        except OSError as e:
            why = f"connection error: {e.strerror or e}"
        except h11.RemoteProtocolError as e:
            why = f"HTTP/1.1 protocol error: {e}"
        finally:
            if self.closed and self.lost is None and self._current is not None:
                self._current.finish(LOST, "send closed the connection before the call ended")
            else:
                if self.half_closed and self._current is not None:
                    # The server's close answered send's FIN: the re-enacted disconnect, observed.
                    self._current.finish(BY_SEND)
                self._lose(self.lost or why)

    def _event(self, event: h11.Event) -> None:
        stream = self._current
        if stream is None:
            return
        if isinstance(event, h11.Response):
            stream.status = str(event.status_code)
            self._events = SseSplitter(_EVENT_KEEP) if is_event_stream(event.headers.raw_items()) else None
            self._error = bytearray() if event.status_code >= 400 else None
        elif isinstance(event, h11.Data):
            if self._events is not None:
                self._count_events(event.data)
            if self._error is not None and len(self._error) < _ERROR_KEEP:
                self._error += event.data[: _ERROR_KEEP - len(self._error)]
        elif isinstance(event, h11.EndOfMessage):
            if self._events is None:
                stream.responses += 1
            if self._error is not None:
                stream.message = _json_error(bytes(self._error))
            stream.finish(BODY_END)
            self._next_cycle()


def _json_error(body: bytes) -> str | None:
    """Triton's (and the proxy's own) error body, ``{"error": "..."}``: the error; None for any other body."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    error = doc.get("error") if isinstance(doc, dict) else None
    return error if isinstance(error, str) else None

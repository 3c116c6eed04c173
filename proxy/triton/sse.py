"""Server-sent events cut from the bytes of a ``text/event-stream`` body, in any pieces (the SSE rules).

Pure and synchronous: :class:`SseSplitter` is fed the de-chunked body as it passes and gives the
events it completes; what an event *says* in Triton terms is :mod:`proxy.triton.http_labels`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The most bytes of one server-sent event's data :class:`SseSplitter` keeps (an event is rarely over a
#: few KiB; a longer one keeps its head, marked ``truncated``).
EVENT_CAP = 1 << 20


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One server-sent event, as the SSE rules read it from the byte stream."""

    #: Its ``data:`` lines joined with ``\\n`` (UTF-8, undecodable bytes replaced).
    data: str
    #: Bytes of the stream it took: everything after the previous event up to and including the blank
    #: line that ended it (comments and data-less blocks before it included), so sizes add up to the body.
    size: int
    #: Its ``event:`` field, None without one.
    event: str | None = None
    #: The data is exactly ``[DONE]``: an OpenAI-compatible stream's final signal.
    done: bool = False
    #: The data was longer than the splitter's cap: ``data`` is its head.
    truncated: bool = False
    #: The body ended before the blank line that would end it (:meth:`SseSplitter.finish`): by the SSE
    #: rules no event (a client discards it); ``data`` holds its ``data:`` lines, an unfinished one included.
    unterminated: bool = False


_EOL = re.compile(rb"[\r\n]")
#: Bytes a line may hold beyond the data cap: its field name and colon (``data: ``).
_NAME_ROOM = 16
_BOM = b"\xef\xbb\xbf"


class SseSplitter:
    """Bytes of a de-chunked ``text/event-stream`` body, in any pieces -> complete events (the SSE rules:
    lines end with CRLF, LF or CR; ``data:`` lines are joined with ``\\n``; a blank line ends an event;
    one with no data line is no event; ``:`` lines are comments; one leading space of a value is dropped).

    Holds at most ``cap`` bytes of an unfinished event's data and of one unfinished line. A CR that
    ends a piece ends its line only once the next piece shows whether an LF follows, so an event's
    size never depends on where reads were cut.
    """

    __slots__ = ("_cap", "_cr", "_cut", "_data", "_data_len", "_line", "_line_cut", "_size", "_started",
                 "_type")  # fmt: skip

    def __init__(self, cap: int = EVENT_CAP) -> None:
        self._cap = cap
        self._line = bytearray()
        self._line_cut = False
        self._data: list[str] = []
        self._data_len = 0
        self._cut = False
        self._type: str | None = None
        self._size = 0
        #: A line ended with the CR that ended the last piece: done when the next piece's first byte is known.
        self._cr = False
        self._started = False

    @property
    def pending(self) -> int:
        """Bytes fed that belong to no complete event yet (at the body's end: an unfinished event, not an event)."""
        return self._size

    def feed(self, data: bytes) -> list[SseEvent]:
        """The events ``data`` completes, in order."""
        out: list[SseEvent] = []
        n = len(data)
        i = 0
        if self._cr and n:
            self._cr = False
            if data[0] == 0x0A:  # the LF of a CRLF split between two pieces: the line's
                self._size += 1
                i = 1
            event = self._line_done()
            if event is not None:
                out.append(event)
        while i < n:
            m = _EOL.search(data, i)
            if m is None:
                self._add(data[i:])
                self._size += n - i
                break
            j = m.start()
            self._add(data[i:j])
            end = j + 1
            if data[j] == 0x0D:
                if end < n:
                    if data[end] == 0x0A:
                        end += 1
                else:
                    self._size += end - i
                    self._cr = True
                    break
            self._size += end - i
            i = end
            event = self._line_done()
            if event is not None:
                out.append(event)
        return out

    def finish(self) -> list[SseEvent]:
        """The body ended: the events its last bytes complete (a final CR ends a line), then, when bytes
        after the last event remain, one ``unterminated`` event of them (its size counts them all)."""
        out: list[SseEvent] = []
        if self._cr:
            self._cr = False
            event = self._line_done()
            if event is not None:
                out.append(event)
        if self._size:
            if self._line or self._line_cut:
                self._line_done()  # the unfinished line, read as a line so its data shows
            data = "\n".join(self._data)
            out.append(SseEvent(data=data, size=self._size, event=self._type, done=data == "[DONE]",
                                truncated=self._cut, unterminated=True))  # fmt: skip
            self._data = []
            self._data_len = 0
            self._cut = False
            self._type = None
            self._size = 0
        return out

    def _add(self, piece: bytes) -> None:
        room = self._cap + _NAME_ROOM - len(self._line)
        if len(piece) > room:
            piece = piece[: max(room, 0)]
            self._line_cut = True
        self._line += piece

    def _line_done(self) -> SseEvent | None:
        line = bytes(self._line)
        cut = self._line_cut
        self._line.clear()
        self._line_cut = False
        if not self._started:
            self._started = True
            line = line.removeprefix(_BOM)
        if not line and not cut:
            return self._dispatch()
        if line.startswith(b":"):
            return None  # a comment
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            text = value.decode("utf-8", "replace")
            room = self._cap - self._data_len
            if cut or len(text) > room:
                text = text[: max(room, 0)]
                self._cut = True
            self._data.append(text)
            self._data_len += len(text) + 1
        elif name == b"event":
            self._type = value.decode("utf-8", "replace")
        return None

    def _dispatch(self) -> SseEvent | None:
        if not self._data:
            self._type = None  # a block without data: no event; its bytes count towards the next one
            return None
        data = "\n".join(self._data)
        event = SseEvent(data=data, size=self._size, event=self._type, done=data == "[DONE]", truncated=self._cut)
        self._data = []
        self._data_len = 0
        self._cut = False
        self._type = None
        self._size = 0
        return event

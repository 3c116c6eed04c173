"""HTTP/2 framing for a relay that forwards frames verbatim: cutting, checking, and building frames.

Pure and synchronous (bytes in, frames out). Why not a full HTTP/2 stack (``h2``): the relay does not
terminate HTTP/2, it passes each frame on unchanged — settings, windows, pings and header blocks
are negotiated end to end by client and Triton — so it needs to *read* frames, not to own their
state. That makes the proxy transparent byte for byte and costs a fraction of a full stack: no
re-encoding of header blocks, no flow-control bookkeeping, no frame objects (see docs/architecture.md,
"Why h2", and docs/benchmarks.md).

What the proxy still must know, and how it stays right:
- frame boundaries and the framing rules a relay could be fooled by (sizes, stream ids, padding,
  header blocks split into CONTINUATIONs), checked here; anything else a peer gets wrong is judged
  by the other peer, which receives it verbatim;
- header blocks, decoded with one HPACK decoder per direction that sees exactly the blocks the
  receiver sees, so its dynamic table mirrors the receiver's. The proxy's own header blocks
  (statuses it must give itself) use literals *without indexing*, which never touch a dynamic
  table, so they can be mixed into a verbatim stream without breaking the peers' HPACK state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import hpack

from proxy.wire.headers import Block

# Final: compiled, a Final constant is its value in the code; any other module global is looked up by
# name each time it is read.
PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA: Final = 0
HEADERS: Final = 1
PRIORITY: Final = 2
RST_STREAM: Final = 3
SETTINGS: Final = 4
PUSH_PROMISE: Final = 5
PING: Final = 6
GOAWAY: Final = 7
WINDOW_UPDATE: Final = 8
CONTINUATION: Final = 9
END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY_FLAG: Final = 0x20

# Error codes (RFC 9113 section 7).
NO_ERROR: Final = 0x0
PROTOCOL_ERROR: Final = 0x1
INTERNAL_ERROR: Final = 0x2
FLOW_CONTROL_ERROR: Final = 0x3
STREAM_CLOSED: Final = 0x5
FRAME_SIZE_ERROR: Final = 0x6
REFUSED_STREAM: Final = 0x7
CANCEL: Final = 0x8
COMPRESSION_ERROR: Final = 0x9

SETTINGS_HEADER_TABLE_SIZE: Final = 0x1
SETTINGS_MAX_FRAME_SIZE: Final = 0x5
DEFAULT_MAX_FRAME: Final = 16384
DEFAULT_TABLE_SIZE: Final = 4096
#: Largest header block, counted as all its frames' bytes (headers included, so a flood of empty
#: CONTINUATIONs counts too), that the proxy buffers before passing it on. gRPC implementations
#: refuse metadata beyond 8-16 KiB; 1 MiB is generous and bounds a connection's memory.
MAX_HEADER_BLOCK = 1024 * 1024
#: Largest decoded header list (HPACK can expand a small block a lot).
MAX_HEADER_LIST = 16 * 1024 * 1024
#: Header blocks up to this size that change no HPACK state are remembered (see FrameReader).
_SEEN_BLOCK: Final = 2048
#: DATA payloads up to this size come out of :meth:`FrameReader.feed` as bytes (a copy), longer ones as
#: views of the read: a view costs more than copying a few KiB, and copying a long one costs more.
_COPIED_DATA: Final = 4096

#: Frame types whose payload has a fixed size (0 = any), and whether they live on stream 0.
_FIXED_SIZE = {PRIORITY: 5, RST_STREAM: 4, PING: 8, WINDOW_UPDATE: 4}
_CONNECTION_ONLY = frozenset({SETTINGS, PING, GOAWAY})
_STREAM_ONLY = frozenset({DATA, HEADERS, PRIORITY, RST_STREAM, PUSH_PROMISE, CONTINUATION})


class FrameError(Exception):
    """The sender broke HTTP/2 framing; ``code`` is the RFC 9113 error code to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        #: The complete frames read before the bad one (set by :meth:`FrameReader.feed`).
        self.before: list[tuple[int, int, int, object, memoryview]] = []


def frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    """One frame's bytes."""
    return len(payload).to_bytes(3, "big") + bytes((ftype, flags)) + sid.to_bytes(4, "big") + payload


def rst_stream(sid: int, code: int) -> bytes:
    """RST_STREAM for ``sid``."""
    return frame(RST_STREAM, 0, sid, code.to_bytes(4, "big"))


def goaway(last_sid: int, code: int, debug: bytes = b"") -> bytes:
    """GOAWAY naming the last stream the sender will process."""
    return frame(GOAWAY, 0, 0, last_sid.to_bytes(4, "big") + code.to_bytes(4, "big") + debug)


def window_update(sid: int, increment: int) -> bytes:
    """WINDOW_UPDATE giving ``increment`` bytes back on ``sid`` (0: the connection)."""
    return frame(WINDOW_UPDATE, 0, sid, increment.to_bytes(4, "big"))


def _int(out: bytearray, value: int, prefix_bits: int, first: int) -> None:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        out.append(first | value)
        return
    out.append(first | limit)
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def encode_block(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """An HPACK block of literals without indexing: valid against any dynamic-table state, changes none."""
    out = bytearray()
    for name, value in headers:
        out.append(0x00)
        _int(out, len(name), 7, 0)
        out += name
        _int(out, len(value), 7, 0)
        out += value
    return bytes(out)


def headers_frames(sid: int, block: bytes, end_stream: bool, max_frame: int) -> bytes:
    """HEADERS (+ CONTINUATIONs when ``block`` exceeds the receiver's frame size) carrying ``block``."""
    first, rest = block[:max_frame], block[max_frame:]
    flags = (END_STREAM if end_stream else 0) | (0 if rest else END_HEADERS)
    out = [frame(HEADERS, flags, sid, first)]
    while rest:
        chunk, rest = rest[:max_frame], rest[max_frame:]
        out.append(frame(CONTINUATION, 0 if rest else END_HEADERS, sid, chunk))
    return b"".join(out)


def data_payload(flags: int, payload: memoryview) -> memoryview:
    """The data of a DATA frame from :class:`FrameReader` (which has checked its padding)."""
    if flags & PADDED:
        return payload[1 : len(payload) - payload[0]]
    return payload


def header_fragment(flags: int, payload: memoryview) -> memoryview:
    """The header block fragment of a HEADERS frame (padding and priority fields removed)."""
    start, end = 0, len(payload)
    if flags & PADDED:
        if not payload:
            raise FrameError(FRAME_SIZE_ERROR, "padded HEADERS frame without a pad length")
        start = 1
        end -= payload[0]
    if flags & PRIORITY_FLAG:
        start += 5
    if start > end:
        raise FrameError(PROTOCOL_ERROR, "HEADERS padding/priority longer than the frame")
    return payload[start:end]


def settings_values(payload: memoryview) -> list[tuple[int, int]]:
    """(identifier, value) pairs of a SETTINGS frame."""
    return [
        (int.from_bytes(payload[i : i + 2], "big"), int.from_bytes(payload[i + 2 : i + 6], "big"))
        for i in range(0, len(payload), 6)
    ]


class HeaderBlock:
    """A header block being collected: its HEADERS frame, then CONTINUATIONs until END_HEADERS.

    Copied (not views of the reads): a view would keep each whole read buffer alive."""

    __slots__ = ("end_stream", "fragments", "raw", "sid")

    def __init__(self, sid: int, end_stream: bool) -> None:
        self.sid = sid
        self.end_stream = end_stream
        self.raw = bytearray()
        self.fragments = bytearray()


class FrameReader:
    """One direction of a connection: cuts bytes into checked frames and decodes header blocks.

    ``feed(data)`` returns ``(type, flags, stream id, payload, raw frame)`` tuples (memoryviews of
    the bytes read; a short DATA payload is bytes) for every complete frame; a partial frame waits for the next read. Header blocks
    come out whole: one tuple of type HEADERS whose payload is the decoded header list and whose raw
    bytes are all frames of the block. ``max_frame`` is the receiver's SETTINGS_MAX_FRAME_SIZE.
    """

    def __init__(self, expect_preface: bool) -> None:
        # Bytes of an incomplete frame: kept as a list of reads and joined only once the frame is
        # complete (``_need`` bytes), so a large frame arriving in many reads is copied once.
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._need = 0
        self._preface = expect_preface
        self.max_frame = DEFAULT_MAX_FRAME
        self.decoder = hpack.Decoder(max_header_list_size=MAX_HEADER_LIST)
        # block bytes -> (front table entry, entry count, table size, headers: see _decoded) for
        # blocks that changed no table state: a client sends the same few blocks again and again
        # (indexed fields only), and decoding one costs ~15-20 us of Python.
        self._seen: dict[bytes, tuple[Any, int, int, Block]] = {}
        self.block: HeaderBlock | None = None
        self.failed = False
        #: After :meth:`feed`: the bytes of exactly the frames it returned, when they are one
        #: contiguous slice of what was read (else None).
        self.span: memoryview | None = None

    @property
    def expecting_preface(self) -> bool:
        """The client connection preface has not been read whole yet."""
        return self._preface

    def unread(self) -> bytes:
        """Bytes read but not yet returned as frames (an incomplete frame or preface)."""
        return b"".join(self._pending)

    def allow_table_size(self, size: int) -> None:
        """The receiver advertised SETTINGS_HEADER_TABLE_SIZE ``size``: the sender may use it."""
        # The largest value ever advertised: a sender may still use the old size until it has
        # seen the new one, and the receiver (not the proxy) is the judge of the exact bound.
        self.decoder.max_allowed_table_size = max(self.decoder.max_allowed_table_size, size)

    def receiver_settings(self, payload: memoryview) -> None:
        """The receiver of this direction sent SETTINGS (``payload``): they bound what it may be sent."""
        for ident, value in settings_values(payload):
            if ident == SETTINGS_HEADER_TABLE_SIZE:
                self.allow_table_size(value)
            elif ident == SETTINGS_MAX_FRAME_SIZE and DEFAULT_MAX_FRAME <= value < 2**24:
                # The largest value ever advertised: a lower one binds only once the sender has
                # acknowledged it (RFC 9113 6.5.3), and the receiver judges exact bounds itself.
                # Out-of-range values are the receiving peer's to reject.
                self.max_frame = max(self.max_frame, value)

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[int, int, int, object, memoryview]]:
        """Complete frames in what was read so far. Raises :class:`FrameError` on a framing violation."""
        # The measured hot loop (``python -m bench.icount``): it runs once per read of each direction
        # and its while loop once per frame, so it stays one function on local names, compiled
        # (replay/compiled.py): ``buf`` is bytes, so each header byte is a C array read and each field an
        # int; a DATA frame on a stream and a whole header block take the first branches, every other
        # frame the per-frame ``_check``. Longer than the house limit on purpose.
        self.span = None
        if self.failed:
            return []
        in_block = self.block is not None
        buf: bytes
        if self._pending:
            self._pending.append(data if type(data) is bytes else bytes(data))
            self._pending_len += len(data)
            if self._pending_len < self._need:
                return []
            buf = b"".join(self._pending)
            self._pending = []
            self._pending_len = 0
        else:
            buf = data if type(data) is bytes else bytes(data)
        view = memoryview(buf)
        n = len(buf)
        i = 0
        out: list[tuple[int, int, int, object, memoryview]] = []
        try:
            if self._preface:
                if n < len(PREFACE):
                    if not PREFACE.startswith(buf):
                        raise FrameError(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
                    # need 0: every read of a partial preface is checked at once
                    self._keep(buf, 0)
                    return out
                if buf[: len(PREFACE)] != PREFACE:
                    raise FrameError(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
                self._preface = False
                i = len(PREFACE)
                out.append((-1, 0, 0, None, view[:i]))
            max_frame = self.max_frame
            while n - i >= 9:
                length = buf[i] << 16 | buf[i + 1] << 8 | buf[i + 2]
                if length > max_frame:
                    raise FrameError(FRAME_SIZE_ERROR, f"frame of {length} bytes exceeds the receiver's limit {max_frame}")
                end = i + 9 + length
                if end > n:
                    break
                ftype = buf[i + 3]
                flags = buf[i + 4]
                sid = (buf[i + 5] & 0x7F) << 24 | buf[i + 6] << 16 | buf[i + 7] << 8 | buf[i + 8]
                if self.block is None and sid:
                    if ftype == DATA and not flags & PADDED:
                        # The common frame: one on a stream breaks no rule the proxy checks. A short
                        # payload is copied (cheaper than a view, and what the message cutter reads
                        # fastest); a long one is a view, never copied here.
                        data_ = buf[i + 9 : end] if length <= _COPIED_DATA else view[i + 9 : end]
                        out.append((DATA, flags, sid, data_, view[i:end]))
                        i = end
                        continue
                    if ftype == HEADERS and flags & (END_HEADERS | PADDED | PRIORITY_FLAG) == END_HEADERS:
                        # A whole block in one frame (three a unary call): the fragment is the payload.
                        out.append(self._decoded(sid, flags & END_STREAM, buf[i + 9 : end], view[i:end]))
                        i = end
                        continue
                raw = view[i:end]
                payload = view[i + 9 : end]
                i = end
                if self.block is not None or ftype == CONTINUATION:
                    got = self._continuation(ftype, flags, sid, payload, raw)
                    if got is not None:
                        out.append(got)
                    continue
                self._check(ftype, sid, length)
                if ftype == HEADERS:
                    frag = header_fragment(flags, payload)
                    if flags & END_HEADERS:
                        out.append(self._decoded(sid, flags & END_STREAM, bytes(frag), raw))
                    else:
                        block = self.block = HeaderBlock(sid, bool(flags & END_STREAM))
                        block.raw += raw
                        block.fragments += frag
                    continue
                if ftype == DATA and flags & PADDED and (not length or payload[0] >= length):
                    # Checked here, not when the data is read: a read's frames may be written
                    # before they are handled (proxy/relay/core.py), and a bad frame must not leave.
                    raise FrameError(PROTOCOL_ERROR, "DATA padding longer than the frame")
                out.append((ftype, flags, sid, payload, raw))
        except FrameError as e:
            self.failed = True
            self._pending = []
            # What came before the bad frame did happen: it rides on the error.
            e.before = out
            raise
        if out and not in_block and self.block is None:
            # Every returned frame, and nothing else, lies in buf[0:i] (no block started in an
            # earlier read or still open): the relay can write that one slice instead of joining.
            self.span = view[:i]
        if i < n:
            rest = buf[i:]
            self._keep(rest, 9 + (rest[0] << 16 | rest[1] << 8 | rest[2]) if len(rest) >= 9 else 9)
        return out

    def _keep(self, rest: bytes, need: int) -> None:
        self._pending = [rest]
        self._pending_len = len(rest)
        self._need = need

    def _check(self, ftype: int, sid: int, length: int) -> None:
        if ftype in _CONNECTION_ONLY and sid:
            raise FrameError(PROTOCOL_ERROR, f"frame type {ftype} on stream {sid} (connection frames use stream 0)")
        if ftype in _STREAM_ONLY and not sid:
            raise FrameError(PROTOCOL_ERROR, f"frame type {ftype} on stream 0")
        size = _FIXED_SIZE.get(ftype)
        if size is not None and length != size:
            raise FrameError(FRAME_SIZE_ERROR, f"frame type {ftype} of {length} bytes (must be {size})")
        if ftype == SETTINGS and length % 6:
            raise FrameError(FRAME_SIZE_ERROR, f"SETTINGS of {length} bytes (not a multiple of 6)")
        if ftype == GOAWAY and length < 8:
            raise FrameError(FRAME_SIZE_ERROR, f"GOAWAY of {length} bytes")

    def _continuation(
        self, ftype: int, flags: int, sid: int, payload: memoryview, raw: memoryview
    ) -> tuple[int, int, int, object, memoryview] | None:
        block = self.block
        if block is None:
            raise FrameError(PROTOCOL_ERROR, "CONTINUATION without a header block")
        if ftype != CONTINUATION or sid != block.sid:
            raise FrameError(PROTOCOL_ERROR, f"frame type {ftype} on stream {sid} inside a header block")
        if len(block.raw) + len(raw) > MAX_HEADER_BLOCK:
            raise FrameError(PROTOCOL_ERROR, f"header block beyond {MAX_HEADER_BLOCK} bytes")
        block.raw += raw
        block.fragments += payload
        if not flags & END_HEADERS:
            return None
        self.block = None
        return self._decoded(block.sid, END_STREAM if block.end_stream else 0, bytes(block.fragments), memoryview(bytes(block.raw)))

    def _decoded(
        self, sid: int, end_stream: int, data: bytes, raw: memoryview
    ) -> tuple[int, int, int, object, memoryview]:
        table = self.decoder.header_table
        # Any, not hpack's deque[tuple[bytes, bytes]]: compiled, a value typed as a tuple is unboxed
        # and boxed again as a new tuple on use, and the identity test below would never hold.
        dynamic: Any = table.dynamic_entries
        # The table's state in three values: entries are only ever inserted at the front (a new
        # tuple each time) and evicted from the back, so the same front entry object, count and
        # size limit mean the same entries (the front one is kept alive by the cache: its id is
        # never reused while an entry refers to it).
        front = dynamic[0] if dynamic else None
        count = len(dynamic)
        size = table.maxsize
        hit = self._seen.get(data)
        if hit is not None and hit[0] is front and hit[1] == count and hit[2] == size:
            headers = hit[3]
        else:
            try:
                headers = Block(self.decoder.decode(data, raw=True))
            except (hpack.HPACKError, ValueError, IndexError) as e:
                raise FrameError(COMPRESSION_ERROR, f"undecodable header block: {e}") from e
            if len(data) <= _SEEN_BLOCK and table.maxsize == size and len(dynamic) == count and (
                not count or dynamic[0] is front
            ):
                # Same table before and after (an insertion would be at the front): the same
                # bytes decode the same way for as long as the table stays as it is now.
                if len(self._seen) >= 256:
                    self._seen.clear()
                self._seen[data] = (front, count, size, headers)
        return (HEADERS, end_stream, sid, headers, raw)

"""Reading a compressed capture (``.jsonl.zst``, ``.jsonl.gz``): a sequence of complete frames, one per batch.

The writer appends one zstd frame (or gzip member) per batch, so a file is complete frames followed,
after a crash, by at most one frame cut short. Reading goes frame by frame so that the kinds of
damage can be told apart: a frame that ends early at the end of the file is what a crash leaves
(``EOFError``: the reader warns and keeps everything before it); a frame whose bytes do not decode
is damage in the middle: :class:`~replay.errors.CaptureError` naming the file and the frame's byte
offset, or, when the reader skips damage (``--skip-damaged``), a hole. Then the file is searched
from that frame on for the next frame's magic number at which a whole frame decodes, and reading
goes on there: one hole (byte offset, length, why) for everything skipped, and the records of the
frames after it read as if nothing happened. Lines of the damaged frame decoded before its damage
were already given to the reader (each is checked as any line is); the rest of the frame is lost,
and its records show as the seq gap they are.

A gzip file compressed whole (``--gzip-rotated``, or ``gzip FILE``) is one member: after damage in
it there is no later member to go on from, and the hole runs to the end of the file.
"""

from __future__ import annotations

import io
import itertools
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from replay.errors import CaptureError, DamagedFrame

#: Compressed bytes read per system call; decompressed output comes out per zstd block (<= 128 KiB).
#: Small on purpose: at each frame's end the decompressor copies the rest of the chunk into
#: ``unused_data``, so the bytes copied per frame grow with the chunk (at 1 MiB and the writer's
#: ~1 KiB frames, copying was ~5k instructions a record, more than decoding it; issue 15).
CHUNK = 1 << 16

#: The first bytes of every zstd frame (0xFD2FB528, little-endian).
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: The first bytes of every gzip member (ID1, ID2, CM = deflate).
GZIP_MAGIC = b"\x1f\x8b\x08"

#: ``on_hole(offset, length, why)``: a damaged frame and what followed it up to the next frame that
#: decodes (or the file's end) were skipped.
OnHole = Callable[[int, int, str], None]



class CutShort(EOFError):
    """The file's last frame is cut short: its bytes from ``start`` to ``end`` (the file's end) do not decode."""

    def __init__(self, message: str, start: int, end: int) -> None:
        super().__init__(message)
        self.start = start
        self.end = end

class FrameLines:
    """Iterate the lines (with their newlines) of a multi-frame compressed file; a context manager like a file.

    ``on_hole``: skip damaged frames, reporting each stretch skipped to it (None: a damaged frame is a
    :class:`~replay.errors.CaptureError`).
    """

    #: What a frame is called in messages ("zstd frame", "gzip member").
    frame = ""
    magic = b""

    def __init__(self, path: Path, on_hole: OnHole | None = None) -> None:
        self._path = path
        self._on_hole = on_hole
        self._f = open(path, "rb")

    def __enter__(self) -> FrameLines:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._f.close()

    def __iter__(self) -> Iterator[bytes]:
        # Each block's lines as a file's iteration cuts them (at "\n" only: bytes.splitlines also
        # cuts at "\r"), chained in C: no Python frame a line (~1.3k instructions a record fewer
        # than splitlines in a generator; issue 15).
        return itertools.chain.from_iterable(map(io.BytesIO, self._blocks()))

    def _decompressor(self) -> Any:
        """A fresh one-frame decompressor (``decompress``, ``eof``, ``unused_data``)."""
        raise NotImplementedError

    def _errors(self) -> tuple[type[Exception], ...]:
        raise NotImplementedError

    def _blocks(self) -> Iterator[bytes]:
        """Decompressed text in pieces that end at a line end (the last piece: wherever the data ends)."""
        errors = self._errors()
        new = self._decompressor
        obj = new()
        offset = 0  # file offset of the first byte of `data`
        frame_start = 0
        partial = b""
        emitted = False  # whether the current frame gave lines already
        while chunk := self._f.read(CHUNK):
            data = chunk
            while data:
                try:
                    out = obj.decompress(data)
                except errors as e:
                    resume = self._skip(frame_start, str(e), emitted)
                    if resume is None:
                        return
                    self._f.seek(resume)
                    offset = frame_start = resume
                    obj, partial, emitted = new(), b"", False
                    break
                if out:
                    cut = out.rfind(b"\n") + 1
                    if cut:
                        yield partial + out[:cut]
                        partial = out[cut:]
                        emitted = True
                    else:
                        partial += out
                if obj.eof:
                    rest = obj.unused_data
                    offset += len(data) - len(rest)
                    frame_start = offset
                    obj = new()
                    data = rest
                    emitted = False
                else:
                    offset += len(data)
                    data = b""
        if offset != frame_start:
            # The unterminated line (if any) is the cut frame's: not given, as a gzip reader would not.
            raise CutShort(f"the last {self.frame} (at byte offset {frame_start}) is cut short", frame_start, offset)
        if partial:
            yield partial

    def _skip(self, start: int, why: str, emitted: bool) -> int | None:
        """The frame at ``start`` does not decode: the offset to read on from (None: the file's end), once
        the hole is reported; or the error, when damage is not skipped."""
        what = f"corrupt {self.frame} at byte offset {start}: {why}"
        if self._on_hole is None:
            raise DamagedFrame(str(self._path), None, what + self._no_later())
        if not self._f.seekable():
            raise CaptureError(str(self._path), None, f"{what} (it cannot be skipped: the file is not seekable)")
        resume = self._next_frame(start + 1)
        end = resume if resume is not None else self._f.seek(0, io.SEEK_END)
        kept = "; the lines decoded from it before the damage were read" if emitted else ""
        after = (f"read on at the next {self.frame}, at byte offset {resume}" if resume is not None
                 else f"no later {self.frame} decodes{self._no_later()}")  # fmt: skip
        self._on_hole(start, end - start, f"corrupt {self.frame} ({why}); {after}{kept}")
        return resume

    def _no_later(self) -> str:
        """What to add when nothing after the damage can be read (gzip: a file compressed whole)."""
        return ""

    def _next_frame(self, pos: int) -> int | None:
        """The offset of the first frame at or after ``pos`` that decodes (to its end or the file's), or None."""
        f, magic = self._f, self.magic
        while True:
            f.seek(pos)
            buf = f.read(CHUNK)
            at = buf.find(magic)
            if at >= 0:
                if self._decodes_at(pos + at):
                    return pos + at
                pos += at + 1
            elif len(buf) < CHUNK:
                return None
            else:
                pos += len(buf) - len(magic) + 1  # a magic number across the chunks' border is found next

    def _decodes_at(self, pos: int) -> bool:
        """A frame starting at ``pos`` decodes whole, or without error up to the file's end (a frame cut short
        there: the reader warns of it as of any cut last frame)."""
        f, obj, errors = self._f, self._decompressor(), self._errors()
        f.seek(pos)
        while data := f.read(CHUNK):
            try:
                obj.decompress(data)
            except errors:
                return False
            if obj.eof:
                return True
        return True


class ZstdLines(FrameLines):
    """The lines of a ``.jsonl.zst`` file (zstd frames)."""

    frame = "zstd frame"
    magic = ZSTD_MAGIC

    def __init__(self, path: Path, on_hole: OnHole | None = None) -> None:
        import zstandard

        super().__init__(path, on_hole)
        self._dctx = zstandard.ZstdDecompressor()
        self._zstd_errors: tuple[type[Exception], ...] = (zstandard.ZstdError,)

    def _decompressor(self) -> Any:
        return self._dctx.decompressobj()

    def _errors(self) -> tuple[type[Exception], ...]:
        return self._zstd_errors


class GzipLines(FrameLines):
    """The lines of a ``.jsonl.gz`` file (gzip members: one per batch as the writer writes them, one for a
    file gzipped whole)."""

    frame = "gzip member"
    magic = GZIP_MAGIC

    def _decompressor(self) -> Any:
        return zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)  # a gzip header and trailer (CRC, size) checked

    def _errors(self) -> tuple[type[Exception], ...]:
        return (zlib.error,)

    def _no_later(self) -> str:
        return (" (a file gzipped whole, as --gzip-rotated writes it, is one member: nothing after damage in it "
                "can be read)")  # fmt: skip

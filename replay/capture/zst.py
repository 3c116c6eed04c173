"""Reading a zstd capture (``.jsonl.zst``): a sequence of complete frames, one per written batch.

The writer appends one zstd frame per batch, so a file is complete frames followed, after a crash,
by at most one frame cut short. Reading goes frame by frame so that the two kinds of damage can be
told apart: a frame that ends early at the end of the file is what a crash leaves (``EOFError``:
the reader warns and keeps everything before it), a frame whose bytes do not decode is damage in
the middle (:class:`~replay.errors.CaptureError` naming the file and the frame's byte offset).
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from replay.errors import CaptureError

#: Compressed bytes read per system call; decompressed output comes out per zstd block (<= 128 KiB).
#: Small on purpose: at each frame's end the decompressor copies the rest of the chunk into
#: ``unused_data``, so the bytes copied per frame grow with the chunk (at 1 MiB and the writer's
#: ~1 KiB frames, copying was ~5k instructions a record, more than decoding it; issue 15).
CHUNK = 1 << 16


class ZstdLines:
    """Iterate the lines (with their newlines) of a multi-frame zstd file; a context manager like a file."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._f = open(path, "rb")

    def __enter__(self) -> ZstdLines:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._f.close()

    def __iter__(self) -> Iterator[bytes]:
        # Each block's lines as a file's iteration cuts them (at "\n" only: bytes.splitlines also
        # cuts at "\r"), chained in C: no Python frame a line (~1.3k instructions a record fewer
        # than splitlines in a generator; issue 15).
        return itertools.chain.from_iterable(map(io.BytesIO, self._blocks()))

    def _blocks(self) -> Iterator[bytes]:
        """Decompressed text in pieces that end at a line end (the last piece: wherever the data ends)."""
        import zstandard

        dctx = zstandard.ZstdDecompressor()
        obj = dctx.decompressobj()
        offset = 0  # file offset of the first byte of `data`
        frame_start = 0
        partial = b""
        while chunk := self._f.read(CHUNK):
            data = chunk
            while data:
                try:
                    out = obj.decompress(data)
                except zstandard.ZstdError as e:
                    raise CaptureError(str(self._path), None, f"corrupt zstd frame at byte offset {frame_start}: "
                                       f"{e}") from None  # fmt: skip
                if obj.eof:
                    rest = obj.unused_data
                    offset += len(data) - len(rest)
                    frame_start = offset
                    obj = dctx.decompressobj()
                    data = rest
                else:
                    offset += len(data)
                    data = b""
                if out:
                    cut = out.rfind(b"\n") + 1
                    if cut:
                        yield partial + out[:cut]
                        partial = out[cut:]
                    else:
                        partial += out
        if partial:
            yield partial
        if offset != frame_start:
            raise EOFError(f"the last zstd frame (at byte offset {frame_start}) is cut short")

"""How a written batch lands in the capture file: plain JSONL, or one compressed frame per batch.

The writer encodes a batch of records to JSONL and hands it to :meth:`Sink.frame`, then appends the
result with one ``write``. With ``zstd`` each batch is one complete zstd frame and with ``gzip``
one complete gzip member, so the file is always a sequence of complete frames (``zstdcat``,
``zcat``, DuckDB and ``replay`` read it) except for the one being written when the proxy dies:
a crash loses at most the last batch, and the failure policy's truncate-to-the-last-batch keeps
working on compressed offsets.

Each frame is compressed on its own (no shared window), which costs ratio on small batches; at
volume batches hold hundreds of records and the ratio is close to compressing the whole file.
"""

from __future__ import annotations

import gzip
from typing import Final

from replay.errors import UserError

#: The values of ``record --compress``.
COMPRESS_CHOICES: Final = ("zstd", "gzip", "none")

#: zstd level: 3 (zstd's default) is within the CPU budget and ~10% smaller than 1 on capture lines.
ZSTD_LEVEL = 3
#: gzip level: 6 is zlib's default trade-off.
GZIP_LEVEL = 6


class Sink:
    """Plain JSONL: the batch as it is."""

    suffix = ".jsonl"
    #: Whether a line's length is what it adds to the file (only uncompressed), so a batch can be
    #: cut exactly where the file reaches its rotation size.
    exact_sizes = True

    def frame(self, data: bytes) -> bytes:
        """The bytes to append to the file for one encoded batch."""
        return data


class ZstdSink(Sink):
    """One zstd frame per batch (content size and checksum in the frame, so readers can verify it)."""

    suffix = ".jsonl.zst"
    exact_sizes = False

    def __init__(self) -> None:
        import zstandard

        # One compressor, reused: it keeps its work memory, so a batch costs no allocation.
        self._cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True)

    def frame(self, data: bytes) -> bytes:
        """One complete zstd frame holding ``data``."""
        return self._cctx.compress(data)


class GzipSink(Sink):
    """One gzip member per batch (a multi-member gzip file, which every gzip reader reads whole)."""

    suffix = ".jsonl.gz"
    exact_sizes = False

    def frame(self, data: bytes) -> bytes:
        """One complete gzip member holding ``data``."""
        return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)


def make_sink(compress: str) -> Sink:
    """The sink for a ``--compress`` value, or :class:`UserError`."""
    if compress == "none":
        return Sink()
    if compress == "gzip":
        return GzipSink()
    if compress == "zstd":
        try:
            return ZstdSink()
        except ImportError:  # pragma: no cover - zstandard is a dependency
            raise UserError("--compress zstd needs the zstandard package (pip install zstandard)") from None
    raise UserError(f"--compress must be one of {', '.join(COMPRESS_CHOICES)}, got {compress!r}")

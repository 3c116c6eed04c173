"""Captures compressed as written: one zstd frame (or gzip member) per batch, every reader reads them."""

from __future__ import annotations

import asyncio
import errno
import gzip
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import zstandard

from proxy.capture.writer import CaptureWriter, WriterOptions
from replay.capture import events as ev
from replay.capture.reader import read_capture
from tests.support.capture import records
from tests.support.writer import write_batches


def _start() -> ev.CaptureStarted:
    return ev.CaptureStarted(t_ns=1, proxy_version="t", listen="l:1", upstream="u:2", options={})


def _half(i: int) -> ev.HalfClosed:
    return ev.HalfClosed(t_ns=100 + i, call=f"c1.{i}")


async def _write(opts: WriterOptions, batches: list[list[Any]]) -> CaptureWriter:
    return await write_batches(opts, _start(), batches)


def _frames(data: bytes) -> int:
    n, obj = 0, zstandard.ZstdDecompressor().decompressobj()
    while data:
        obj.decompress(data)
        assert obj.eof, "a frame cut short"
        data, obj, n = obj.unused_data, zstandard.ZstdDecompressor().decompressobj(), n + 1
    return n


@pytest.mark.parametrize(("compress", "suffix"), [("zstd", ".jsonl.zst"), ("gzip", ".jsonl.gz"), ("none", ".jsonl")])
def test_compressed_capture_reads_back_whole(tmp_path: Path, compress: str, suffix: str) -> None:
    """Every --compress mode writes capture-*<suffix> that our reader reads record for record."""
    w = asyncio.run(_write(WriterOptions(directory=tmp_path, compress=compress), [[_half(i)] for i in range(5)]))
    (path,) = w.paths
    assert path.name.endswith(suffix)
    recs = records(path)
    assert [r["kind"] for r in recs] == ["capture_start", *["half_close"] * 5, "capture_end"]
    assert [r for _, r in read_capture(path)][1:-1] == [_half(i) for i in range(5)]


def test_zstd_writes_one_frame_per_batch(tmp_path: Path) -> None:
    """start + 5 batches + end = 7 complete frames: a crash can cut at most the one being written."""
    w = asyncio.run(_write(WriterOptions(directory=tmp_path, compress="zstd"), [[_half(i)] for i in range(5)]))
    assert _frames(w.paths[0].read_bytes()) == 7


def test_zstd_rotation_names_and_chains_files(tmp_path: Path) -> None:
    """Rotation with zstd: every file is .jsonl.zst, seq runs on, the reader reads the directory as one capture."""
    w = asyncio.run(_write(WriterOptions(directory=tmp_path, compress="zstd", rotate_bytes=150),
                           [[_half(i)] for i in range(6)]))  # fmt: skip
    assert len(w.paths) > 2 and all(p.name.endswith(".jsonl.zst") for p in w.paths)
    reader = read_capture(tmp_path)
    seqs = [seq for seq, _ in reader]
    assert seqs == list(range(len(seqs))) and not reader.gaps and reader.captures == 1


def test_write_error_with_zstd_rolls_back_to_the_last_frame(tmp_path: Path) -> None:
    """ENOSPC on a compressed batch: the file keeps whole frames only and a gap record says what was lost."""
    calls = {"n": 0}

    def before_write(data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] in (3, 4):
            raise OSError(errno.ENOSPC, "No space left on device")

    opts = WriterOptions(directory=tmp_path, compress="zstd", before_write=before_write)
    w = asyncio.run(_write(opts, [[_half(i)] for i in range(5)]))
    recs = records(w.paths[0])
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    (gap,) = [r for r in recs if r["kind"] == "gap"]
    assert gap["dropped"] == 2


@pytest.mark.skipif(shutil.which("zstdcat") is None, reason="zstd command-line tool not installed")
def test_zstdcat_reads_a_capture_cut_mid_frame(tmp_path: Path) -> None:
    """The command-line tool decodes every complete frame of a file whose last frame is cut short."""
    w = asyncio.run(_write(WriterOptions(directory=tmp_path, compress="zstd"), [[_half(i)] for i in range(3)]))
    data = w.paths[0].read_bytes()
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(data[:-5])
    out = subprocess.run(["zstdcat", str(cut)], capture_output=True).stdout
    assert out.count(b"\n") == 4  # capture_start and the three half_close records


def test_gzip_members_read_with_the_standard_library(tmp_path: Path) -> None:
    """--compress gzip: a multi-member gzip file that gzip.decompress (and so zcat) reads whole."""
    w = asyncio.run(_write(WriterOptions(directory=tmp_path, compress="gzip"), [[_half(i)] for i in range(3)]))
    assert gzip.decompress(w.paths[0].read_bytes()).count(b"\n") == 5


@pytest.mark.parametrize("compress", ["zstd", "gzip", "none"])
def test_rotation_inside_a_batch_keeps_sparse_fields_right(tmp_path: Path, compress: str) -> None:
    """Batches of one call's responses whose model changes every few messages, each batch past the
    rotation size: every record reads back as written (sparse sticky fields never lean on a line the
    file does not hold), with any compression."""
    def response(i: int) -> ev.MessageSeen:
        return ev.MessageSeen(t_ns=200 + i, call="c1.1", dir="s2c", index=i, size=69, model=f"m{i // 3}",
                              model_version="1", request_id="r", final=False, outputs=["TEXT"])  # fmt: skip

    batch = [response(i) for i in range(400)]
    chunks = [batch[i : i + 40] for i in range(0, 400, 40)]
    w = asyncio.run(_write(WriterOptions(directory=tmp_path, compress=compress, rotate_bytes=600), chunks))
    assert len(w.paths) > 1
    assert [r for _, r in read_capture(tmp_path) if type(r) is ev.MessageSeen] == batch

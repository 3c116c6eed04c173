"""`--skip-damaged` past a compressed frame that does not decode: a capture written by the real writer
(one zstd frame, or gzip member, per batch), one frame in the middle damaged (bytes of its compressed
body flipped, or bytes cut out of its middle). Without the flag: one error naming the file, the frame's
byte offset and the flag. With it: one `damaged_frame` hole (file, byte offset, length, why), the
records of that frame missing as the seq gap they are (not counted twice), every other record read."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import zstandard

from proxy.capture.writer import WriterOptions
from replay.capture import events as ev
from replay.capture.holes import Gap
from replay.capture.reader import read_capture
from replay.cli.main import main as replay_main
from replay.errors import CaptureError, DamagedFrame
from tests.support.paths import DATA
from tests.support.writer import write_batches

GOLDEN = DATA / "unary.jsonl"  # 3 calls


@dataclass(frozen=True)
class Frame:
    start: int
    end: int
    seqs: list[int]


def _calls() -> list[list[Any]]:
    """The golden capture's records, one batch per call (the writer writes its own start and end)."""
    batches: dict[str, list[Any]] = {}
    for _, rec in read_capture(GOLDEN):
        if not isinstance(rec, ev.CaptureStarted | ev.CaptureEnded):
            batches.setdefault(getattr(rec, "call"), []).append(rec)  # noqa: B009  (every other kind has a call)
    return list(batches.values())


def _write(directory: Path, compress: str) -> Path:
    start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="l:1", upstream="u:2", options={})
    directory.mkdir()
    w = asyncio.run(write_batches(WriterOptions(directory=directory, compress=compress), start, _calls()))
    (path,) = w.paths
    return path


def _new(compress: str) -> Any:
    return zstandard.ZstdDecompressor().decompressobj() if compress == "zstd" else zlib.decompressobj(wbits=31)


def _frames(data: bytes, compress: str) -> list[Frame]:
    """Where each frame of a whole file is, and the seq numbers of its records."""
    frames, at = [], 0
    while at < len(data):
        obj = _new(compress)
        text = obj.decompress(data[at:])
        assert obj.eof
        end = len(data) - len(obj.unused_data)
        seqs = [int(line.split(b'"seq":')[1].split(b",")[0]) for line in text.splitlines()]
        frames.append(Frame(at, end, seqs))
        at = end
    return frames


def _damage(path: Path, compress: str, how: str) -> tuple[Frame, int, list[Frame]]:
    """Damage the middle frame of ``path``; that frame, the length of the stretch the reader must skip, all frames."""
    data = path.read_bytes()
    frames = _frames(data, compress)
    assert len(frames) == 5, frames  # start, 3 calls, end
    bad = frames[2]
    body = bytearray(data[bad.start : bad.end])
    if how == "flip":  # the header (magic number included) stays: the body does not decode
        for i in range(12, len(body) - 8):
            body[i] ^= 0x5A
        skipped = bad.end - bad.start
    else:  # "cut": bytes taken out of its middle, so it runs into the next frame
        mid = len(body) // 2
        del body[mid : mid + 10]
        skipped = bad.end - bad.start - 10
    path.write_bytes(data[: bad.start] + bytes(body) + data[bad.end :])
    return bad, skipped, frames


def _readable(path: Path, **kw: bool) -> tuple[list[int], list[Gap], list[str]]:
    reader = read_capture(path, **kw)
    seqs = [seq for seq, _ in reader]
    return seqs, reader.gaps, reader.warnings


@pytest.mark.parametrize("how", ["flip", "cut"])
@pytest.mark.parametrize("compress", ["zstd", "gzip"])
def test_a_damaged_frame_is_one_hole_and_the_frames_after_it_read(tmp_path: Path, compress: str, how: str) -> None:
    path = _write(tmp_path / "cap", compress)
    bad, skipped, frames = _damage(path, compress, how)
    name = "zstd frame" if compress == "zstd" else "gzip member"

    with pytest.raises(DamagedFrame) as info:
        list(read_capture(path))
    assert str(info.value).startswith(f"{path}: corrupt {name} at byte offset {bad.start}: ")

    seqs, gaps, warnings = _readable(path, skip_damaged=True)
    every = [s for f in frames for s in f.seqs]
    assert seqs == [s for s in every if s not in bad.seqs]  # all the other frames' records, in order
    assert warnings == []
    hole, gap = gaps  # one hole for the frame, one seq gap for its records: nothing else, nothing twice
    assert (hole.kind, hole.file, hole.line, hole.count) == ("damaged_frame", str(path), None, None)
    assert hole.detail.startswith(f"{skipped} byte(s) skipped from byte offset {bad.start}: corrupt {name} (")
    assert hole.detail.endswith(f"; read on at the next {name}, at byte offset {bad.start + skipped}")
    assert (gap.kind, gap.first_seq, gap.last_seq, gap.count) == ("seq_gap", bad.seqs[0], bad.seqs[-1], len(bad.seqs))


@pytest.mark.parametrize("compress", ["zstd", "gzip"])
def test_replay_check_names_the_flag_and_with_it_shows_the_hole(
    tmp_path: Path, compress: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "cap", compress)
    bad, skipped, _ = _damage(path, compress, "flip")
    name = "zstd frame" if compress == "zstd" else "gzip member"
    capsys.readouterr()
    assert replay_main(["check", str(path)]) == 2
    out, err = capsys.readouterr()
    (line,) = err.splitlines()
    assert out == "" and line.startswith(f"triton-tap: error: {path}: corrupt {name} at byte offset {bad.start}: ")
    assert line.endswith("(--skip-damaged reads on from the next frame that decodes, reporting the bytes skipped as a hole)")

    assert replay_main(["check", "--skip-damaged", str(path)]) == 0
    out, err = capsys.readouterr()
    flat = " ".join(out.split())  # the table may wrap at the terminal's width
    assert f"hole damaged_frame at {path}: {skipped} byte(s) skipped from byte offset {bad.start}" in flat
    assert "hole seq_gap" in flat and f"{len(bad.seqs)} record(s) missing before seq {bad.seqs[-1] + 1}" in flat


def test_a_file_gzipped_whole_is_read_up_to_the_damage_and_says_why_no_further(tmp_path: Path) -> None:
    """`--gzip-rotated` gzips a closed file as one member: after damage in it no later member can be found;
    the hole runs to the end of the file and says why, and the error without the flag says so too."""
    n = 40_000  # enough that the reader decodes some of the file before it meets the damage
    lines = [GOLDEN.read_bytes().splitlines(keepends=True)[0]]
    lines += [b'{"v":4,"seq":%d,"kind":"half_close","t_ns":%d,"call":"c1.%d"}\n' % (i, 100 + i, i) for i in range(1, n)]
    data = bytearray(gzip.compress(b"".join(lines), mtime=0))
    damage = len(data) * 3 // 4
    for i in range(damage, damage + 8):
        data[i] ^= 0x5A
    path = tmp_path / "capture-20260101T000000-1-0001.jsonl.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(CaptureError, match="is one member: nothing after damage in it can be read"):
        list(read_capture(path))
    seqs, gaps, _ = _readable(path, skip_damaged=True)
    assert 0 < len(seqs) < n and seqs == list(range(len(seqs)))  # what decoded before the damage, nothing invented
    (hole,) = [g for g in gaps if g.kind == "damaged_frame"]
    assert hole.detail.startswith(f"{len(data)} byte(s) skipped from byte offset 0: corrupt gzip member (")
    assert "no later gzip member decodes (a file gzipped whole" in hole.detail

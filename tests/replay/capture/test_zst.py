"""Reading .jsonl.zst captures: a frame cut short at the end is a warning, a corrupt one an error."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import zstandard

from replay.capture.reader import read_capture
from replay.capture.zst import ZstdLines
from replay.cli.check import check
from replay.errors import CaptureError
from tests.support.paths import ROOT

DATA = ROOT / "tests" / "data"


def _frames(name: str, per_frame: int = 3) -> list[bytes]:
    lines = (DATA / name).read_bytes().splitlines(keepends=True)
    cctx = zstandard.ZstdCompressor(level=3, write_checksum=True)
    return [cctx.compress(b"".join(lines[i : i + per_frame])) for i in range(0, len(lines), per_frame)]


def test_a_multi_frame_capture_reads_like_the_plain_one(tmp_path: Path) -> None:
    """Frames of a few lines each: the same records, no warning."""
    path = tmp_path / "capture.jsonl.zst"
    path.write_bytes(b"".join(_frames("stream_cancel.jsonl")))
    reader = read_capture(path)
    assert list(reader) == list(read_capture(DATA / "stream_cancel.jsonl"))
    assert not reader.warnings


def test_lines_are_cut_at_newlines_only_as_in_a_plain_file(tmp_path: Path) -> None:
    """A carriage return is JSON whitespace, not a line end: both files read the same."""
    text = (DATA / "stream_cancel.jsonl").read_bytes().replace(b',"seq":', b',\r"seq":').replace(b"\n", b"\r\n")
    (tmp_path / "plain.jsonl").write_bytes(text)
    (tmp_path / "capture.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(text))
    records = list(read_capture(tmp_path / "plain.jsonl"))
    assert records == list(read_capture(DATA / "stream_cancel.jsonl"))
    assert list(read_capture(tmp_path / "capture.jsonl.zst")) == records


def test_a_large_capture_of_small_frames_reads_whole(tmp_path: Path) -> None:
    """Frames cross the reads' chunk boundaries (ZstdLines reads 64 KiB at a time)."""
    lines = (DATA / "stream_cancel.jsonl").read_bytes().splitlines(keepends=True)
    cctx = zstandard.ZstdCompressor(level=3)
    path = tmp_path / "capture.jsonl.zst"
    head, body, tail = lines[0], lines[1:-1], lines[-1]
    many = [head] + [body[i % len(body)] for i in range(5000)] + [tail]
    path.write_bytes(b"".join(cctx.compress(line) for line in many))
    assert sum(1 for _ in ZstdLines(path)) == len(many)
    assert b"".join(ZstdLines(path)) == b"".join(many)


def test_a_last_frame_cut_short_is_a_warning(tmp_path: Path) -> None:
    """A crash mid-write: everything in complete frames is read, the cut frame is reported, exit stays 0/1."""
    frames = _frames("stream_cancel.jsonl")
    path = tmp_path / "capture.jsonl.zst"
    path.write_bytes(b"".join(frames[:-1]) + frames[-1][: len(frames[-1]) // 2])
    reader = read_capture(path)
    got = list(reader)
    assert len(got) >= 3 * (len(frames) - 1)
    assert any("cut short" in w for w in reader.warnings)
    err = io.StringIO()
    assert check([str(path)], out=io.StringIO(), err=err) in (0, 1)
    assert "cut short" in err.getvalue()


def test_a_corrupt_frame_in_the_middle_names_file_and_offset(tmp_path: Path) -> None:
    """Flipped bytes in the second frame: one CaptureError with the file and that frame's byte offset."""
    frames = _frames("stream_cancel.jsonl")
    bad = bytearray(frames[1])
    for i in range(6, len(bad) - 4):
        bad[i] ^= 0x5A
    path = tmp_path / "capture.jsonl.zst"
    path.write_bytes(frames[0] + bytes(bad) + b"".join(frames[2:]))
    with pytest.raises(CaptureError, match=rf"^{path}: corrupt zstd frame at byte offset {len(frames[0])}:"):
        list(read_capture(path))


def test_a_directory_finds_zst_files(tmp_path: Path) -> None:
    """Directories are searched for .jsonl.zst files too."""
    (tmp_path / "a.jsonl.zst").write_bytes(b"".join(_frames("one_response.jsonl")))
    reader = read_capture(tmp_path)
    assert list(reader) and reader.files == [tmp_path / "a.jsonl.zst"]


def test_check_exits_2_on_a_corrupt_frame(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`replay check` prints one line naming file and offset and exits 2."""
    from replay.cli.main import main

    frames = _frames("one_response.jsonl", per_frame=2)
    path = tmp_path / "capture.jsonl.zst"
    path.write_bytes(frames[0] + b"\x28\xb5\x2f\xfd" + b"\xff" * 40 + b"".join(frames[1:]))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}: corrupt zstd frame at byte offset {len(frames[0])}" in err[0]

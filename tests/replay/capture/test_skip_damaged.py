"""`skip_damaged` (the commands' --skip-damaged): a damaged line in the middle of a file is a
`damaged_line` hole (file, line, why) and the reader reads on; without it the capture is unreadable.
Plain, zstd and gzip files, through the compiled line decoder and the Python path alike."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest
import zstandard

from replay.capture.holes import Gap
from replay.capture.reader import read_capture, skipping_damaged
from replay.capture.schema import Encoder
from replay.errors import CaptureError, DamagedLine
from tests.support.paths import DATA

GOLDEN = DATA / "stream_cancel.jsonl"  # 12 records, seq 0..11
LINES = GOLDEN.read_bytes().splitlines(keepends=True)

#: Ways a line can be damaged, and what the hole then says.
DAMAGE = {
    "garbage": (b'{"v":3,"seq":4,"kind":"message","t_ns":17\x00\x00 garbage\n', "not valid JSON"),
    "wrong_type": (LINES[4].replace(b'"t_ns":', b'"t_ns":"x","was":'), "field 't_ns' must be integer"),
    "not_an_object": (b"[4]\n", "a capture line must be a JSON object"),
    "binary": (b"\xff\xfe\x00\x01\n", "not valid JSON"),
}


def _write(path: Path, data: bytes) -> Path:
    if path.name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    elif path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def _read(path: Path | list[Path], **kw: bool) -> tuple[object, list[str], list[Gap], int]:
    reader = read_capture(path, **kw)
    try:
        got: object = [(seq, repr(rec)) for seq, rec in reader]
    except CaptureError as e:
        got = (type(e).__name__, str(e))
    return got, reader.warnings, reader.gaps, reader.records


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.zst", ".jsonl.gz"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_middle_line_is_a_hole_and_the_rest_is_read(
    suffix: str, damage: str, tmp_path: Path
) -> None:
    # Line 6 (seq 5) is request a's: no response's line is lost, so the sparse lines after it read whole
    # (tests/replay/capture/test_reader.py: a lost response line's fields are unknown after it).
    bad, why = DAMAGE[damage]
    bad = bad.replace(b'"seq":4,', b'"seq":5,') if damage == "garbage" else bad
    if damage == "wrong_type":
        bad = LINES[5].replace(b'"t_ns":', b'"t_ns":"x","was":')
    path = _write(tmp_path / f"capture{suffix}", b"".join([*LINES[:5], bad, *LINES[6:]]))
    got, warnings, gaps, records = _read(path, skip_damaged=True)
    want = [(seq, repr(rec)) for seq, rec in read_capture(GOLDEN) if seq != 5]
    assert got == want and records == 11 and warnings == []
    (hole,) = gaps
    assert (hole.kind, hole.file, hole.line, hole.count) == ("damaged_line", str(path), 6, 1)
    assert why in hole.detail and hole.detail.endswith(": skipped")
    # Without the flag: one error naming the file and the line, as before.
    got, *_ = _read(path)
    assert isinstance(got, tuple) and got[0] == "DamagedLine"
    assert got[1].startswith(f"{path}:6: ") and why in got[1]


def test_the_default_comes_from_skipping_damaged(tmp_path: Path) -> None:
    """A reader made inside `skipping_damaged()` (what --skip-damaged sets) skips; outside it raises."""
    path = _write(tmp_path / "capture.jsonl", b"".join([*LINES[:4], DAMAGE["garbage"][0], *LINES[5:]]))
    with skipping_damaged():
        reader = read_capture(path)
    assert len(list(reader)) == 11 and [g.kind for g in reader.gaps] == ["damaged_line"]
    with pytest.raises(DamagedLine, match=r"capture\.jsonl:5: not valid JSON"):
        list(read_capture(path))
    with skipping_damaged(), pytest.raises(DamagedLine):
        list(read_capture(path, skip_damaged=False))


def test_seq_numbers_lost_besides_the_damaged_lines_are_still_a_seq_gap(
    tmp_path: Path
) -> None:
    """Two damaged lines where seq 3 and 4 were: two holes, no seq_gap; one more line lost after
    them: a seq_gap counting only that one."""
    garbage = DAMAGE["garbage"][0]
    path = _write(tmp_path / "a.jsonl", b"".join([*LINES[:3], garbage, garbage, *LINES[5:]]))
    _, _, gaps, records = _read(path, skip_damaged=True)
    assert [(g.kind, g.line) for g in gaps] == [("damaged_line", 4), ("damaged_line", 5)]
    assert records == 10
    path = _write(tmp_path / "b.jsonl", b"".join([*LINES[:3], garbage, garbage, *LINES[6:]]))
    _, _, gaps, _ = _read(path, skip_damaged=True)
    assert [(g.kind, g.count) for g in gaps] == [("damaged_line", 1), ("damaged_line", 1), ("seq_gap", 1)]
    assert "besides the 2 damaged line(s)" in gaps[-1].detail


def test_a_line_cut_short_before_a_later_file_is_skipped_too(tmp_path: Path) -> None:
    """A rotated file whose last line is cut short, a later file following: a hole, then the next file."""
    first = tmp_path / "capture-20250101T000000-1.jsonl"
    second = tmp_path / "capture-20250101T000000-1-0001.jsonl"
    raw = [orjson.loads(line) for line in LINES]
    end = {"v": 3, "seq": 5, "kind": "capture_end", "t_ns": raw[5]["t_ns"], "reason": "rotate",
           "next_file": second.name}  # fmt: skip
    start = {**raw[0], "seq": 6, "file_index": 1}
    first.write_bytes(b"".join([*LINES[:5], orjson.dumps(end)[:20]]))
    # The next file's lines as a writer makes them: each call's first `s2c` line there states its fields.
    encoder = Encoder()
    second.write_bytes(orjson.dumps(start) + b"\n" + b"".join(
        encoder.encode(r, seq + 2) for seq, r in read_capture(GOLDEN) if seq >= 5))  # fmt: skip
    got, *_ = _read(tmp_path)
    assert got == ("DamagedLine", f"{first}:6: line cut short in the middle of a capture (a later file follows)")
    got, warnings, gaps, records = _read(tmp_path, skip_damaged=True)
    assert [(g.kind, g.file, g.line) for g in gaps] == [("damaged_line", str(first), 6)]
    assert records == 5 + 1 + 7 and warnings == []


def test_a_file_of_damaged_lines_only_is_still_unreadable(tmp_path: Path) -> None:
    """Skipping reads on past damage; it does not make a file without a record a capture."""
    path = _write(tmp_path / "capture.jsonl", DAMAGE["garbage"][0] * 3)
    with pytest.raises(CaptureError, match="no capture records in this file"):
        list(read_capture(path, skip_damaged=True))


def test_a_newer_schema_is_not_damage(tmp_path: Path) -> None:
    """A line of a newer schema version says the whole file is newer: never skipped as damage."""
    path = _write(tmp_path / "capture.jsonl", (DATA / "too_new.jsonl").read_bytes())
    with pytest.raises(CaptureError, match="newer than this triton-tap") as e:
        list(read_capture(path, skip_damaged=True))
    assert not isinstance(e.value, DamagedLine)

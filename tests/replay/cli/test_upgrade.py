"""`triton-tap replay upgrade`: older captures rewritten at the current schema, record for record."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replay.capture.reader import read_capture
from replay.capture.schema import SCHEMA_VERSION
from replay.cli.main import main
from replay.cli.upgrade import upgrade
from replay.errors import UserError
from tests.support.capture import records
from tests.support.paths import DATA


@pytest.mark.parametrize("name", ["stream_cancel_v1.jsonl", "stream_cancel_v2.jsonl"])
@pytest.mark.parametrize("compress", ["zstd", "gzip", "none"])
def test_an_older_capture_reads_the_same_after_upgrade(tmp_path: Path, name: str, compress: str) -> None:
    """Every record (and its seq) is what the old file reads as; the new file is the current version, smaller."""
    (out,) = upgrade([str(DATA / name)], tmp_path / "up", compress)
    assert list(read_capture(out)) == list(read_capture(DATA / name))
    assert {r["v"] for r in records(out)} == {SCHEMA_VERSION}
    assert out.stat().st_size < (DATA / name).stat().st_size
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def test_upgrade_never_overwrites(tmp_path: Path) -> None:
    """An output file that exists is refused before anything is written (one line, exit 2 from the CLI)."""
    up = tmp_path / "up"
    (first,) = upgrade([str(DATA / "stream_cancel_v1.jsonl")], up, "none")
    before = first.read_bytes()
    with pytest.raises(UserError, match="will not overwrite"):
        upgrade([str(DATA / "stream_cancel_v1.jsonl")], up, "none")
    assert first.read_bytes() == before
    assert main(["upgrade", str(DATA / "stream_cancel_v1.jsonl"), "-o", str(up), "--compress", "none"]) == 2
    assert not [p for p in up.iterdir() if p.name.startswith(".upgrade-")]


def test_upgrade_of_a_damaged_capture_is_one_error_and_no_output(tmp_path: Path) -> None:
    """A capture the reader cannot read: exit 2 and no (partial) output file."""
    assert main(["upgrade", str(DATA / "garbled_middle.jsonl"), "-o", str(tmp_path / "up")]) == 2
    assert list((tmp_path / "up").iterdir()) == []


def test_upgrade_of_a_cut_capture_exits_1_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A last line cut short: its copy holds every record before it and no longer shows the cut (the copy's last
    line is whole). Exit 0 said the copy was the capture; now exit 1, with the warning and the file named."""
    assert main(["upgrade", str(DATA / "truncated_last_line.jsonl"), "-o", str(tmp_path / "up")]) == 1
    err = capsys.readouterr().err
    assert "last line cut short" in err and "1 file(s) not carried over whole" in err
    assert str(DATA / "truncated_last_line.jsonl") in err.splitlines()[-1]
    (out,) = (tmp_path / "up").iterdir()
    assert list(read_capture(out)) == list(read_capture(DATA / "truncated_last_line.jsonl"))


def test_upgrade_of_records_of_a_kind_it_does_not_know_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A newer writer's record of a new kind: the reader skips it, so its copy lacks it: exit 1, not 0."""
    lines = (DATA / "stream_cancel_v2.jsonl").read_bytes().splitlines(keepends=True)
    first = orjson.loads(lines[1])
    extra = orjson.dumps({"v": first["v"], "seq": first["seq"], "kind": "from_the_future", "t_ns": 1}) + b"\n"
    shifted = [orjson.dumps({**orjson.loads(line), "seq": orjson.loads(line)["seq"] + 1}) + b"\n" for line in lines[1:]]
    (tmp_path / "newer.jsonl").write_bytes(lines[0] + extra + b"".join(shifted))
    assert main(["upgrade", str(tmp_path / "newer.jsonl"), "-o", str(tmp_path / "up")]) == 1
    assert "'from_the_future' is unknown" in capsys.readouterr().err
    assert main(["upgrade", str(DATA / "stream_cancel_v2.jsonl"), "-o", str(tmp_path / "up2")]) == 0


def test_the_v1_golden_is_really_version_1() -> None:
    """The test above proves an upgrade only if its input is old."""
    first = orjson.loads((DATA / "stream_cancel_v1.jsonl").read_bytes().splitlines()[0])
    assert first["v"] == 1

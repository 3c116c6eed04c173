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


def test_the_v1_golden_is_really_version_1() -> None:
    """The test above proves an upgrade only if its input is old."""
    first = orjson.loads((DATA / "stream_cancel_v1.jsonl").read_bytes().splitlines()[0])
    assert first["v"] == 1

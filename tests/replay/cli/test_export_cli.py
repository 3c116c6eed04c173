"""`triton-tap export --parquet OUT CAPTURE...`: registered on both command trees; bad input is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli import main as triton_tap
from replay.cli.main import main as python_m_replay
from tests.support.paths import DATA


def test_export_writes_the_tables_and_says_what_it_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`triton-tap export`: exit 0, one summary line per capture, reader warnings on stderr."""
    out = tmp_path / "out"
    assert triton_tap(["export", "--parquet", str(out), str(DATA / "stream_cancel.jsonl"),
                       str(DATA / "truncated_last_line.jsonl")]) == 0  # fmt: skip
    got = capsys.readouterr()
    assert got.out.splitlines()[0].startswith("stream_cancel: 12 records (capture_start 1, ")
    assert "last line cut short" in got.err and "no capture_end" in got.err
    assert (out / "message" / "capture=truncated_last_line" / "part-0.parquet").is_file()


def test_python_m_replay_has_it_too(tmp_path: Path) -> None:
    """The offline commands are also `python -m replay ...`."""
    assert python_m_replay(["export", "--parquet", str(tmp_path / "out"), str(DATA / "one_response.jsonl")]) == 0
    assert (tmp_path / "out" / "hole" / "capture=one_response" / "part-0.parquet").is_file()


@pytest.mark.parametrize("case", ["garbled", "missing", "not_empty", "out_is_file"])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    """A damaged or missing capture, a non-empty OUT, OUT a file: `triton-tap: error: ...`, exit 2, OUT as it was."""
    out, capture = tmp_path / "out", str(DATA / "one_response.jsonl")
    if case == "garbled":
        capture = str(DATA / "garbled_middle.jsonl")
    elif case == "missing":
        capture = str(tmp_path / "nope.jsonl")
    elif case == "not_empty":
        out.mkdir()
        (out / "x").write_text("x")
    else:
        out.write_text("x")
    assert triton_tap(["export", "--parquet", str(out), capture]) == 2
    err = capsys.readouterr().err
    assert err.startswith("triton-tap: error: ") and err.count("\n") == 1
    # OUT as it was: not there (the export made none, and left none behind), a file, or x alone
    assert not out.exists() if case in ("garbled", "missing") else out.is_file() or [p.name for p in out.iterdir()] == ["x"]


def test_a_failed_export_removes_the_directories_it_made_and_no_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A capture damaged in the middle is found while writing, after OUT was made: OUT and the parents the
    export made for it are removed again; a directory that was there before stays, empty or not."""
    garbled = str(DATA / "garbled_middle.jsonl")
    (tmp_path / "kept").mkdir()
    deep = tmp_path / "kept" / "new" / "deeper" / "out"
    assert triton_tap(["export", "--parquet", str(deep), garbled]) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and not any((tmp_path / "kept").iterdir())
    empty = tmp_path / "empty"
    empty.mkdir()
    assert triton_tap(["export", "--parquet", str(empty), garbled]) == 2
    assert empty.is_dir() and not any(empty.iterdir())
    full = tmp_path / "full"
    (full / "message").mkdir(parents=True)
    (full / "message" / "mine.txt").write_text("x")
    assert triton_tap(["export", "--parquet", str(full), "--overwrite", garbled]) == 2
    assert sorted(str(p.relative_to(full)) for p in full.rglob("*")) == ["message", "message/mine.txt"]
    assert capsys.readouterr().err.count("garbled_middle.jsonl:3") == 3


def test_parquet_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --parquet (the only format): a usage error, exit 2."""
    with pytest.raises(SystemExit) as e:
        triton_tap(["export", str(DATA / "one_response.jsonl")])
    assert e.value.code == 2 and "--parquet" in capsys.readouterr().err

"""Damaged captures: wrong field types, files without records, duplicated lines end as one clear error or hole."""

from __future__ import annotations

import gzip
import io
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.capture.reader import read_capture
from replay.capture.schema import KINDS, decode
from replay.cli.check import check
from replay.cli.diff import run_diff
from replay.cli.report import build_report
from replay.errors import CaptureError
from replay.machine.tracker import track
from replay.tools.serve import load
from tests.support.paths import DATA

GOLDEN = ("stream_cancel.jsonl", "unary.jsonl", "interleaved.jsonl", "gaps.jsonl", "error_midstream.jsonl")
_LINES = [(name, i, orjson.loads(line)) for name in GOLDEN
          for i, line in enumerate((DATA / name).read_bytes().splitlines())]  # fmt: skip
_ENVELOPE = {"v", "seq", "kind"}

# One JSON value of each type; a field gets one whose type its record kind does not allow.
_JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
    st.lists(st.integers(0, 9), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(0, 9), max_size=2),
)  # fmt: skip


def _allowed(kind: str, field: str) -> set[type]:
    """The JSON types a field may have, from the dataclass annotations (independently of schema's table)."""
    import typing

    hint = typing.get_type_hints(KINDS[kind])[field]
    out: set[type] = set()
    for arg in typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, type(int | None)) else (hint,):
        origin = typing.get_origin(arg) or arg
        if origin is typing.Literal:
            out |= {type(a) for a in typing.get_args(arg)}
        elif origin is float:
            out |= {float, int}
        else:
            out.add(origin)
    return out


def _entry_points(path: Path, out_dir: Path) -> dict[str, Any]:
    quiet = io.StringIO
    return {
        "check": lambda: check([str(path)], out=quiet(), err=quiet()),
        "track": lambda: track(path),
        "report": lambda: build_report([str(path)], out_dir / "r.html", err=quiet()),
        "diff": lambda: run_diff([str(DATA / "stream_cancel.jsonl")], [str(path)], out=quiet(), err=quiet()),
        "diff-reversed": lambda: run_diff([str(path)], [str(DATA / "stream_cancel.jsonl")], out=quiet(), err=quiet()),
        "serve": lambda: load(path).close(),
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_field_of_the_wrong_type_is_a_capture_error_in_every_command(data: st.DataObject) -> None:
    """Any field of any golden record set to a wrongly typed JSON value: every entry point raises CaptureError."""
    name, index, raw = data.draw(st.sampled_from(_LINES))
    field = data.draw(st.sampled_from(sorted(set(raw) - _ENVELOPE)))
    allowed = _allowed(raw["kind"], field)
    value = data.draw(_JSON_VALUES.filter(lambda v: type(v) not in allowed))
    lines = (DATA / name).read_bytes().splitlines(keepends=True)
    lines[index] = orjson.dumps({**raw, field: value}) + b"\n"
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "mutated.jsonl"
        path.write_bytes(b"".join(lines))
        for what, run in _entry_points(path, Path(d)).items():
            with pytest.raises(CaptureError) as e:
                run()
            assert f"mutated.jsonl:{index + 1}:" in str(e.value) and repr(field) in str(e.value), what


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"t_ns": "abc"}, "field 't_ns' must be integer, got string"),
        ({"dir": "sideways"}, "field 'dir': must be one of 'c2s', 's2c'"),
        ({"size": True}, "field 'size' must be integer, got boolean"),
        ({"inputs": [{"name": "X", "datatype": "INT32", "shape": ["1"]}]}, "field 'inputs': item 0: field 'shape'"),
        ({"outputs": ["a", 1]}, "field 'outputs': item 1 must be string"),
    ],
)
def test_decode_names_the_bad_field(raw: dict[str, Any], says: str) -> None:
    """decode's CaptureError names file, line and the offending field."""
    base = orjson.loads((DATA / "unary.jsonl").read_bytes().splitlines()[4])
    with pytest.raises(CaptureError, match="^cap.jsonl:7: message record: " + says.replace("(", r"\(")):
        decode({**base, **raw}, path="cap.jsonl", line=7)


def test_floats_accept_integral_numbers_and_ints_refuse_floats() -> None:
    """A float field may hold 5 (JSON has one number type); an int field may not hold 5.0."""
    end = orjson.loads((DATA / "unary.jsonl").read_bytes().splitlines()[2])
    assert decode({**end, "duration_ms": 5})[1].duration_ms == 5  # type: ignore[union-attr]
    with pytest.raises(CaptureError, match="'messages_c2s' must be integer, got number"):
        decode({**end, "messages_c2s": 5.0})


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("empty.jsonl", b""),
        ("blank.jsonl", b"\n\n"),
        ("junk.jsonl", b"this is not a capture"),
        ("notgz.jsonl.gz", b'{"v":1}\n'),
    ],
)
def test_a_file_without_records_is_unreadable(tmp_path: Path, name: str, content: bytes) -> None:
    """Empty, blank, one unterminated junk line, or not gzip: CaptureError naming the file, not an empty capture."""
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(CaptureError, match=f"^{path}"):
        list(read_capture(path))
    with pytest.raises(CaptureError):
        check([str(path)], out=io.StringIO(), err=io.StringIO())


def test_a_cut_gzip_after_records_stays_a_warning(tmp_path: Path) -> None:
    """A gzip capture cut after valid records still reads, with a warning (not the no-records error)."""
    data = gzip.compress((DATA / "one_response.jsonl").read_bytes())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) - 12])
    reader = read_capture(path)
    assert list(reader) and reader.warnings


def test_an_exactly_repeated_line_is_skipped_but_reported(tmp_path: Path) -> None:
    """A duplicated response line is counted once (no false extra response) and reported as duplicate_seq."""
    lines = (DATA / "one_response.jsonl").read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if b'"s2c"' in line)
    path = tmp_path / "dup.jsonl"
    path.write_bytes(b"".join([*lines[: at + 1], lines[at], *lines[at + 1 :]]))
    result, clean = track(path), track(DATA / "one_response.jsonl")
    assert [r.responses for r in result.requests] == [r.responses for r in clean.requests]
    assert [(g.kind, "skipped" in g.detail) for g in result.gaps] == [("duplicate_seq", True)]
    assert result.summary()["records"] == clean.summary()["records"]


def test_a_repeated_seq_with_other_content_is_kept_and_reported(tmp_path: Path) -> None:
    """Same seq, different content: both are evidence; the record is kept and the hole says out of order."""
    lines = (DATA / "one_response.jsonl").read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if b'"s2c"' in line)
    other = orjson.loads(lines[at])
    other["t_ns"] += 1
    path = tmp_path / "dup.jsonl"
    path.write_bytes(b"".join([*lines[: at + 1], orjson.dumps(other) + b"\n", *lines[at + 1 :]]))
    reader = read_capture(path)
    assert len(list(reader)) == len(lines) + 1
    assert [(g.kind, "skipped" in g.detail) for g in reader.gaps] == [("duplicate_seq", False)]


@pytest.mark.parametrize("value", [True, 7, 2.5, "yes"])
def test_request_parameters_of_any_triton_type_are_accepted(value: object) -> None:
    """Request parameters are recorded raw: a bool, int, double or string parameter value all decode."""
    base = orjson.loads((DATA / "unary.jsonl").read_bytes().splitlines()[4])
    fields = ("enable_empty_final", "sequence_id", "sequence_start", "sequence_end")
    _, rec = decode({**base, **dict.fromkeys(fields, value)})
    assert [getattr(rec, f) for f in fields] == [value] * 4

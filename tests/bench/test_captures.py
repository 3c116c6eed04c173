"""The capture generator (bench/captures.py): its fast steady lines are exactly what encoding its records gives,
and both shapes are written as one readable capture file."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.captures import runs_records, steady_lines, steady_records, write
from replay.capture.reader import read_capture
from replay.capture.schema import Encoder


@pytest.mark.parametrize("n", [10, 101, 102, 190, 279, 1000, 5000])
def test_restamped_lines_are_the_encoded_records(n: int) -> None:
    encoder = Encoder()
    assert list(steady_lines(n)) == [encoder.encode(rec, seq) for seq, rec in enumerate(steady_records(n))]


@pytest.mark.parametrize("shape", ["steady", "runs"])
@pytest.mark.parametrize("compress", ["none", "zstd"])
def test_each_shape_is_written_as_a_capture_the_reader_reads(tmp_path: Path, shape: str, compress: str) -> None:
    """What the report probe (runs) and the reader probes (steady) are fed: every record read back, in order."""
    path = write(tmp_path, 3000, compress, shape=shape)
    expected = list(steady_records(3000) if shape == "steady" else runs_records(3000))
    got = [rec for _, rec in read_capture([path])]
    assert len(got) == len(expected) and [r.kind for r in got] == [r.kind for r in expected]
    assert got[0].kind == "capture_start" and got[-1].kind == "capture_end"

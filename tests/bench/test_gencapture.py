"""The reader benchmark's fast capture generator writes exactly what encoding its records gives."""

from __future__ import annotations

import pytest

from bench.gencapture import lines, records
from replay.capture.schema import Encoder


@pytest.mark.parametrize("n", [10, 101, 102, 190, 279, 1000, 5000])
def test_restamped_lines_are_the_encoded_records(n: int) -> None:
    encoder = Encoder()
    assert list(lines(n)) == [encoder.encode(rec, seq) for seq, rec in enumerate(records(n))]

"""Instances built through a non-frozen twin are the frozen class's own (pure): check's request outcomes."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from replay.frozen import building
from replay.machine.outcomes import RequestOutcome
from replay.machine.tracker import track
from tests.support.paths import DATA


def test_outcomes_are_frozen_request_outcomes_equal_to_one_built_directly() -> None:
    """What check reports per request (built as the twin) has RequestOutcome's type, equality, hash, JSON
    and immutability."""
    got = track(DATA / "interleaved.jsonl").requests
    assert got
    for r in got:
        direct = RequestOutcome(**{f.name: getattr(r, f.name) for f in dataclasses.fields(RequestOutcome)})
        assert type(r) is RequestOutcome and r == direct and hash(r) == hash(direct)
        assert orjson.dumps(r.to_json()) == orjson.dumps(direct.to_json())
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.outcome = "completed"  # type: ignore[misc]
        assert type(r.outcome) is str  # the State's value, not the enum member


def test_a_twin_has_the_fields_defaults_and_slots_of_its_class() -> None:
    twin = building(RequestOutcome)
    assert twin.__slots__ == RequestOutcome.__slots__
    assert [f.name for f in dataclasses.fields(twin)] == [f.name for f in dataclasses.fields(RequestOutcome)]
    with pytest.raises(TypeError):
        twin(call="c")  # a missing field fails as it does for the class

"""Records built through the non-frozen twin are the frozen events themselves (pure)."""

from __future__ import annotations

import dataclasses

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.relay.records import BuildingMessageSeen
from replay.capture import events as ev


@given(st.integers(0, 2**63), st.text(max_size=5), st.sampled_from(["c2s", "s2c"]), st.integers(0, 9),
       st.one_of(st.none(), st.text(max_size=5)), st.one_of(st.none(), st.booleans()))  # fmt: skip
def test_twin_becomes_the_event(t_ns: int, call: str, d: str, index: int, model: str | None,
                                final: bool | None) -> None:  # fmt: skip
    """Same type, equality, JSON and immutability as the event built directly."""
    kw = dict(t_ns=t_ns, call=call, dir=d, index=index, size=3, compressed=False, model=model, final=final)
    rec = BuildingMessageSeen(**kw)
    rec.__class__ = ev.MessageSeen
    direct = ev.MessageSeen(**kw)  # type: ignore[arg-type]
    assert type(rec) is ev.MessageSeen and rec == direct
    assert orjson.dumps(rec) == orjson.dumps(direct)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.model = "other"


def test_twin_refuses_what_the_event_refuses() -> None:
    """An unknown or missing field fails as it does for the event."""
    with pytest.raises(TypeError):
        BuildingMessageSeen(t_ns=1, call="c", dir="c2s", index=0, size=0, compressed=False, nope=1)
    with pytest.raises(TypeError):
        BuildingMessageSeen(t_ns=1)

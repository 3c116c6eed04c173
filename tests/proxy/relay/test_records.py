"""The relay's ``message`` records, built without the frozen ``__init__``, are the frozen events themselves (pure)."""

from __future__ import annotations

import dataclasses

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.relay.records import make_message
from replay.capture import events as ev


@given(st.integers(0, 2**63), st.text(max_size=5), st.sampled_from(["c2s", "s2c"]), st.integers(0, 9),
       st.one_of(st.none(), st.text(max_size=5)), st.one_of(st.none(), st.booleans()))  # fmt: skip
def test_a_made_record_is_the_event(t_ns: int, call: str, d: str, index: int, model: str | None,
                                    final: bool | None) -> None:  # fmt: skip
    """Same type, equality, JSON and immutability as the event built directly."""
    labels = {"model": model, "final": final}
    rec = make_message(t_ns, call, d, index, 3, False, labels)
    direct = ev.MessageSeen(t_ns=t_ns, call=call, dir=d, index=index, size=3, compressed=False, **labels)  # type: ignore[arg-type]
    assert type(rec) is ev.MessageSeen and rec == direct and hash(rec) == hash(direct)
    assert orjson.dumps(rec) == orjson.dumps(direct)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.model = "other"


def test_making_refuses_what_the_event_refuses() -> None:
    """An unknown field, or one of the leading fields again among the labels, fails as it does for the event."""
    with pytest.raises(TypeError):
        make_message(1, "c", "c2s", 0, 0, False, {"nope": 1})
    with pytest.raises(TypeError):
        make_message(1, "c", "c2s", 0, 0, False, {"size": 1})

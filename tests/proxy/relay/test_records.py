"""The relay's ``message`` records, built without the frozen ``__init__``, are the frozen events themselves (pure)."""

from __future__ import annotations

import dataclasses

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.relay.records import make_call_end, make_call_start, make_half_close, make_message
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


_TEXT = st.one_of(st.none(), st.text(max_size=4))
_PAIRS = st.one_of(st.none(), st.lists(st.lists(st.text(max_size=3), min_size=2, max_size=2), max_size=3))


@given(st.integers(0, 2**63), st.text(max_size=5), st.lists(st.lists(st.text(max_size=3), min_size=2, max_size=2)),
       st.one_of(st.none(), st.floats(0, 1e6)), _TEXT)  # fmt: skip
def test_a_made_call_start_is_the_event(t_ns: int, call: str, meta: list[list[str]], timeout_ms: float | None,
                                        subject: str | None) -> None:  # fmt: skip
    """``make_call_start`` in its argument order gives the event built with keywords."""
    rec = make_call_start(t_ns, call, "c1", "/m", "peer", meta, timeout_ms, subject, {})
    direct = ev.CallStarted(t_ns=t_ns, call=call, conn="c1", method="/m", peer="peer", metadata=meta,
                            timeout_ms=timeout_ms, client_subject=subject)  # fmt: skip
    assert type(rec) is ev.CallStarted and rec == direct and orjson.dumps(rec) == orjson.dumps(direct)


@given(st.integers(0, 2**63), st.sampled_from(["OK", "CANCELLED"]), _TEXT, st.sampled_from(["ok", "client_cancel"]),
       _PAIRS, _PAIRS, st.floats(0, 1e6), st.integers(0, 9), st.integers(0, 9), st.one_of(st.none(), st.integers(0, 13)),
       st.one_of(st.none(), st.integers(0, 99)))  # fmt: skip
def test_a_made_call_end_is_the_event(t_ns: int, status: str, details: str | None, cause: str,
                                      trailers: list[list[str]] | None, initial: list[list[str]] | None,
                                      duration: float, c2s: int, s2c: int, rst: int | None,
                                      undelivered: int | None) -> None:  # fmt: skip
    """``make_call_end`` in its argument order gives the event built with keywords; so does ``make_half_close``."""
    rec = make_call_end(
        t_ns, "c1.1", status, details, cause, trailers, initial, duration, c2s, s2c, rst, undelivered, {}
    )
    direct = ev.CallEnded(t_ns=t_ns, call="c1.1", status=status, details=details, cause=cause,  # type: ignore[arg-type]
                          trailers=trailers, initial_metadata=initial, duration_ms=duration, messages_c2s=c2s,
                          messages_s2c=s2c, upstream_rst_code=rst, s2c_undelivered_bytes=undelivered)  # fmt: skip
    assert type(rec) is ev.CallEnded and rec == direct and orjson.dumps(rec) == orjson.dumps(direct)
    assert make_half_close(t_ns, "c1.1", {}) == ev.HalfClosed(t_ns=t_ns, call="c1.1")

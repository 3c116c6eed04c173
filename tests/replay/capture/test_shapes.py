"""The decoder's fast path (replay/capture/shapes.py) equals the generic decoder and the normal constructors.

Every record kind, dense and sparse, with the writer's sticky omissions; lines with any field
replaced by any JSON value must give the same record or the very same error either way.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import orjson
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from replay.capture import events as ev
from replay.capture import schema
from replay.errors import CaptureError
from replay.frozen import twin

_INT = st.integers(-(2**63), 2**63 - 1)
_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
_FLOAT = st.floats(allow_nan=False, allow_infinity=False)
_JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | _INT | _FLOAT | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)


def _strategy(tp: Any) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _strategy(typing.get_args(tp)[0])
    if origin is typing.Union or isinstance(tp, type(int | None)):
        return st.one_of(*(_strategy(a) for a in typing.get_args(tp)))
    if origin is typing.Literal:
        return st.sampled_from(typing.get_args(tp))
    if origin is list:
        return st.lists(_strategy(typing.get_args(tp)[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(_TEXT, _strategy(typing.get_args(tp)[1]), max_size=3)
    simple: dict[Any, st.SearchStrategy[Any]] = {
        int: _INT, float: _FLOAT, str: _TEXT, bool: st.booleans(), type(None): st.none(), Any: _JSON,
    }  # fmt: skip
    if tp in simple:
        return simple[tp]
    assert isinstance(tp, type) and dataclasses.is_dataclass(tp), tp
    hints = typing.get_type_hints(tp)
    return st.builds(tp, **{f.name: _strategy(hints[f.name]) for f in dataclasses.fields(tp)})


RECORDS = st.one_of(*(_strategy(cls) for cls in ev.RECORD_TYPES))
# Many messages of a few calls, so the sticky omissions of the writer's Encoder happen.
MESSAGES = st.builds(
    ev.MessageSeen, t_ns=_INT, call=st.sampled_from(["c1.1", "c1.3"]), dir=st.sampled_from(["c2s", "s2c"]),
    index=_INT, size=_INT, model=st.sampled_from([None, "m", "n"]), model_version=st.sampled_from([None, "", "1"]),
    request_id=st.sampled_from([None, "", "a"]), final=st.sampled_from([None, False, True]),
    outputs=st.sampled_from([None, [], ["TEXT"]]), output_tensors=st.none() | st.lists(_strategy(ev.TensorSpec), max_size=2),
)  # fmt: skip


def _both(lines: list[bytes]) -> None:
    fast_sticky: schema.Sticky = {}
    slow_sticky: schema.Sticky = {}
    for i, line in enumerate(lines):
        raw = orjson.loads(line)
        fast = schema.decode(raw, sticky=fast_sticky)
        slow = schema._decode(orjson.loads(line), "<capture>", None, slow_sticky)
        assert fast == slow, i
        assert type(fast[1]) is type(slow[1])
        assert fast_sticky == slow_sticky


@settings(max_examples=300, deadline=None)
@given(records=st.lists(st.one_of(RECORDS, MESSAGES), min_size=1, max_size=12))
def test_fast_path_decodes_as_the_generic_decoder(records: list[ev.Record]) -> None:
    encoder = schema.Encoder()
    lines = [encoder.encode(r, i) for i, r in enumerate(records)]
    _both(lines)
    sticky: schema.Sticky = {}
    assert [schema.decode(orjson.loads(line), sticky=sticky)[1] for line in lines] == records
    # Dense (every field spelled out), and as older versions wrote them.
    _both([schema.encode(r, i) for i, r in enumerate(records)])


@settings(max_examples=400, deadline=None)
@given(record=st.one_of(RECORDS, MESSAGES), data=st.data())
def test_a_changed_field_gives_the_same_record_or_the_same_error(record: ev.Record, data: st.DataObject) -> None:
    raw = orjson.loads(schema.encode(record, 3))
    key = data.draw(st.sampled_from(sorted(raw)))
    if data.draw(st.booleans()):
        raw[key] = data.draw(_JSON)
    else:
        del raw[key]
    results: list[object] = []
    for fast in (True, False):
        try:
            results.append(schema.decode(dict(raw), path="f.jsonl", line=4) if fast
                           else schema._decode(dict(raw), "f.jsonl", 4, None))  # fmt: skip
        except CaptureError as e:
            results.append(str(e))
    assert results[0] == results[1]


@given(record=RECORDS)
def test_twins_become_ordinary_frozen_records(record: ev.Record) -> None:
    cls = type(record)
    built = twin(cls)(*[getattr(record, f.name) for f in dataclasses.fields(cls)])
    built.__class__ = cls
    assert type(built) is cls and built == record and repr(built) == repr(record)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.t_ns = 0  # type: ignore[misc]


def test_odd_shapes_beyond_the_cap_still_decode() -> None:
    base = {"v": schema.SCHEMA_VERSION, "seq": 1, "kind": "half_close", "t_ns": 5, "call": "c"}
    for i in range(schema._MAX_SHAPES + 5):
        _, rec = schema.decode({**base, f"new{i}": i})
        assert rec == ev.HalfClosed(t_ns=5, call="c")
    assert len(schema._SHAPES) <= schema._MAX_SHAPES


def test_a_wrong_type_on_the_fast_path_is_the_generic_error() -> None:
    line = {"v": schema.SCHEMA_VERSION, "seq": 1, "kind": "message", "t_ns": 5, "call": "c", "dir": "s2c",
            "index": 0, "size": 3, "request_id": "", "final": False}  # fmt: skip
    schema.decode(dict(line))  # the shape is compiled now
    with pytest.raises(CaptureError, match=r"f.jsonl:9: .*field 'final' must be boolean or null, got integer 1"):
        schema.decode({**line, "final": 1}, path="f.jsonl", line=9)
    with pytest.raises(CaptureError, match=r"field 'dir': must be one of 'c2s', 's2c'"):
        schema.decode({**line, "dir": "up"}, path="f.jsonl", line=9)


@pytest.mark.parametrize("kind", sorted(schema.KINDS))
def test_null_in_a_field_that_cannot_be_null_is_the_generic_error(kind: str) -> None:
    """Every field whose JSON types exclude null, of every kind, given null in a line of a shape the fast path
    knows: the fast path declines it and the generic decoder says so (a fast path taking it built a record
    with None where the schema allows none)."""
    cls = schema.KINDS[kind]
    raw = orjson.loads(schema.encode(find(_strategy(cls), lambda _: True), 1))  # its minimal record, dense
    schema.decode(dict(raw))  # the shape is known now
    refused = 0
    for name, allowed, _ in schema._CHECKS[kind]:
        if name not in raw or type(None) in allowed:
            continue
        line = {**raw, name: None}
        assert schema._shape(line, tuple(line))(dict(line), None) is None, name
        with pytest.raises(CaptureError, match=f"field '{name}' must be"):
            schema.decode(line)
        refused += 1
    assert refused >= 2  # t_ns and at least one more


def _tensor_line(shape: object, **more: object) -> dict[str, Any]:
    return {"v": schema.SCHEMA_VERSION, "seq": 1, "kind": "message", "t_ns": 5, "call": "c", "dir": "c2s",
            "index": 0, "size": 3, "model": "m", "request_id": "",
            "inputs": [{"name": "IN", "datatype": "INT32", "shape": shape, **more}]}  # fmt: skip


def test_a_remembered_tensor_list_does_not_let_a_different_json_type_through() -> None:
    """``[1]`` and ``[true]`` are equal as Python tuples: the memo must still tell them apart."""
    _, rec = schema.decode(_tensor_line([1]))
    assert isinstance(rec, ev.MessageSeen) and rec.inputs == [ev.TensorSpec(name="IN", datatype="INT32", shape=[1])]
    with pytest.raises(CaptureError, match=r"f.jsonl:7: .*field 'inputs': item 0: .*'shape'.*must be integer, got boolean"):
        schema.decode(_tensor_line([True]), path="f.jsonl", line=7)
    with pytest.raises(CaptureError, match=r"f.jsonl:7: .*field 'inputs': item 0: field 'size'"):
        schema.decode(_tensor_line([1], size=1.5), path="f.jsonl", line=7)
    # A dict not parsed from JSON may hold what JSON cannot: decoded without the memo.
    _, big = schema.decode(_tensor_line([2**70]))
    assert isinstance(big, ev.MessageSeen) and big.inputs is not None and big.inputs[0].shape == [2**70]


def test_records_decoded_from_one_remembered_tensor_list_do_not_share_it() -> None:
    first, second = (schema.decode(_tensor_line([2, 3]))[1] for _ in range(2))
    assert isinstance(first, ev.MessageSeen) and isinstance(second, ev.MessageSeen)
    assert first == second and first.inputs is not second.inputs


def test_tensor_lists_beyond_the_memo_s_limit_still_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema._SPECS, "limit", 3)  # the memo is filled by earlier tests: none may be added
    before = len(schema._SPECS._seen)
    for n in range(10):
        _, rec = schema.decode(_tensor_line([n], hmac_sha256=f"h{n}", size=n))
        assert isinstance(rec, ev.MessageSeen) and rec.inputs is not None
        assert rec.inputs[0] == ev.TensorSpec(name="IN", datatype="INT32", shape=[n], size=n, hmac_sha256=f"h{n}")
    assert len(schema._SPECS._seen) <= max(before, 3)

"""The writer's sparse dicts, built in C (``replay/capture/_encode.c``) or Python, and the lines they make.

Pure: for random records of every kind and any fields to skip, the compiled builder gives the very
dict the generated Python gives (same keys in the same order, the same value objects) or the same
error; and the sparse :class:`~replay.capture.schema.Encoder` writes, byte for byte, what it wrote
before it compared sticky fields on the records instead of on their JSON form (the reference
below is that earlier algorithm).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.capture import events as ev
from replay.capture import schema
from tests.replay.capture.test_shapes import MESSAGES, RECORDS
from tests.support.child import run_python

needs_compiled = pytest.mark.skipif(
    schema._CE is None, reason="replay.capture._encode is not built here (or TRITON_TAP_PURE)"
)


def _outcome(build: Any, record: Any, seq: int, skip: int) -> tuple[str, Any]:
    try:
        d = build(record, seq, skip)
    except Exception as e:
        return "error", type(e)
    return "ok", [(k, v) for k, v in d.items()]


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(RECORDS, st.integers(0, 2**63), st.integers(0, 2**24 - 1))
def test_the_compiled_dict_is_the_python_dict(record: Any, seq: int, skip: int) -> None:
    fast = schema._BUILD[type(record)]
    slow = schema._PY_BUILD[type(record)]
    assert fast is not slow
    got, want = _outcome(fast, record, seq, skip), _outcome(slow, record, seq, skip)
    assert got[0] == want[0] and (got[0] == "error" or len(got[1]) == len(want[1]))
    if got[0] == "ok":
        for (k1, v1), (k2, v2) in zip(got[1], want[1], strict=True):
            assert k1 == k2
            # The record's own objects; tensor lists are built anew by both, and compiled code boxes an int anew.
            assert v1 is v2 or (type(v1) in (list, int) and type(v1) is type(v2) and v1 == v2)


@needs_compiled
def test_the_compiled_builder_reads_only_its_own_class() -> None:
    rec = ev.MessageSeen(t_ns=1, call="c", dir="s2c", index=0, size=0)
    with pytest.raises(TypeError):
        schema._BUILD[ev.CallEnded](rec, 1, 0)  # slots are read by offset: never another class's


def _reference(records: list[Any]) -> list[bytes]:
    """The Encoder as it was: sticky fields compared in their JSON form, the dict built then popped."""
    last: dict[str, tuple[Any, ...]] = {}
    out = []
    for seq, record in enumerate(records):
        d = schema._PY_BUILD[type(record)](record, seq, 0)
        if d["kind"] == "message" and d["dir"] == "s2c":
            get = d.get
            now = (get("model"), get("model_version"), get("outputs"), get("output_tensors"))
            before = last.get(d["call"])
            last[d["call"]] = now
            if now == before:
                for name in schema._STICKY:
                    d.pop(name, None)
            elif before is not None:
                for name, value, old in zip(schema._STICKY, now, before, strict=True):
                    if value == old:
                        d.pop(name, None)
                    elif value is None:
                        d[name] = None
            else:
                for name in schema._STICKY:
                    if name not in d:
                        d[name] = None
        elif d["kind"] == "call_end":
            last.pop(d["call"], None)
        out.append(orjson.dumps(d, option=orjson.OPT_APPEND_NEWLINE))
    return out


def _end(call: str) -> ev.CallEnded:
    return ev.CallEnded(t_ns=1, call=call, cause="ok", status="OK", details=None, trailers=None,
                        initial_metadata=None, duration_ms=1.0, messages_c2s=1, messages_s2c=1)  # fmt: skip


_END = st.builds(_end, st.sampled_from(["c1.1", "c1.3"]))


def _shared(records: list[Any]) -> list[Any]:
    """Some records made to share their sticky lists with the one before (as the labels cache makes them)."""
    out: list[Any] = []
    for r in records:
        if out and type(r) is ev.MessageSeen and type(out[-1]) is ev.MessageSeen and r.index % 2:
            r = dataclasses.replace(r, outputs=out[-1].outputs, output_tensors=out[-1].output_tensors)
        out.append(r)
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(MESSAGES, MESSAGES, _END), max_size=30).map(_shared))
def test_the_encoder_writes_what_it_wrote_before(records: list[Any]) -> None:
    want = _reference(records)
    enc = schema.Encoder()
    assert [enc.encode(r, seq) for seq, r in enumerate(records)] == want
    with pytest.MonkeyPatch.context() as mp:  # and the Python builders alone
        mp.setattr(schema, "_BUILD", schema._PY_BUILD)
        enc = schema.Encoder()
        assert [enc.encode(r, seq) for seq, r in enumerate(records)] == want


# -- the line without the dict (_encode.c Plan.line) --------------------------------------------------

_ANY_TEXT = st.text(max_size=6)  # every code point, surrogates and control characters included
_ITEM = st.one_of(_ANY_TEXT, st.integers(-(2**65), 2**65))
_ODD = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), _ANY_TEXT, st.floats(allow_nan=False),
                 st.floats(-1e17, 1e17), st.lists(_ITEM, max_size=3),
                 st.lists(st.one_of(_ITEM, st.lists(st.one_of(_ITEM, st.lists(_ITEM, max_size=1)), max_size=2)),
                          max_size=3))  # fmt: skip


def _dumps(record: Any, seq: int, skip: int, payload_at: Any) -> tuple[str, Any]:
    try:
        d = schema._PY_BUILD[type(record)](record, seq, skip)
        if payload_at is not None:
            d["payload_at"] = payload_at
        return "ok", orjson.dumps(d, option=orjson.OPT_APPEND_NEWLINE)
    except Exception as e:
        return "error", type(e)


@needs_compiled
@settings(max_examples=500, deadline=None)
@given(st.one_of(RECORDS, MESSAGES), st.integers(0, 2**64 - 1), st.integers(0, 2**24 - 1),
       st.one_of(st.none(), st.lists(st.integers(0, 2**40), min_size=2, max_size=2)), st.data())  # fmt: skip
def test_the_line_is_the_bytes_orjson_writes(
    record: Any, seq: int, skip: int, payload_at: Any, data: st.DataObject
) -> None:
    """The line is orjson's bytes for the dict, or None (then the dict goes to orjson as before), never
    other bytes; values of every kind, odd ones put into message fields (floats, big ints, surrogates)."""
    if type(record) is ev.MessageSeen and data.draw(st.booleans()):
        odd = {
            name: data.draw(_ODD)
            for name in data.draw(
                st.lists(st.sampled_from(["model", "request_id", "error", "final", "size"]), max_size=2)
            )
        }
        record = dataclasses.replace(record, **odd)
    line = schema._LINE[type(record)](record, seq, skip, payload_at)
    want = _dumps(record, seq, skip, payload_at)
    if line is not None:
        assert want == ("ok", line)


#: Every control character, the two JSON escapes, DEL and non-ASCII text: orjson's escaping, all of it.
_EVERY_ESCAPE = "".join(map(chr, range(0x20))) + '"\\\x7f/é😀'


@needs_compiled
def test_the_line_handles_what_messages_carry() -> None:
    """The stream's common line is written by the C code (not handed to orjson), escapes and all."""
    rec = ev.MessageSeen(t_ns=2**63 - 1, call="c1.1", dir="s2c", index=3, size=40, request_id=_EVERY_ESCAPE,
                         final=False, outputs=["TEXT"], model="m")  # fmt: skip
    line = schema._LINE[ev.MessageSeen](rec, 7, schema._STICKY_SKIP, None)
    assert line is not None and line == _dumps(rec, 7, schema._STICKY_SKIP, None)[1]
    line = schema._LINE[ev.MessageSeen](rec, 7, 0, [5, 6])
    assert line is not None and line == _dumps(rec, 7, 0, [5, 6])[1]


@needs_compiled
def test_the_line_handles_what_calls_carry() -> None:
    """A call's start and end (header pairs, a timeout, a duration) are written by the C code too, escapes and
    all; a float with an exponent goes to orjson."""
    start = ev.CallStarted(t_ns=1, call="c1.1", conn="c1", method="/m", peer="p", timeout_ms=250.5,
                           metadata=[[":path", "/m"], ["x-k", _EVERY_ESCAPE], ["authorization", "<redacted>"]])  # fmt: skip
    end = ev.CallEnded(t_ns=2, call="c1.1", status="OK", details="", cause="ok", trailers=[["grpc-status", "0"]],
                       initial_metadata=[[":status", "200"]], duration_ms=0.078297, messages_c2s=1, messages_s2c=1)  # fmt: skip
    for rec in (start, end, dataclasses.replace(end, duration_ms=1.0), dataclasses.replace(start, timeout_ms=None)):
        line = schema._LINE[type(rec)](rec, 7, 0, None)
        assert line is not None and line == _dumps(rec, 7, 0, None)[1]
    for slow in (dataclasses.replace(end, duration_ms=1e-7), dataclasses.replace(end, duration_ms=float("inf"))):
        assert schema._LINE[ev.CallEnded](slow, 7, 0, None) is None


# -- Python code the builder runs, and ill-typed records: what crashed the interpreter or told the two apart --
# The crashing ones run in a child interpreter (tests/support/child.py): a crash fails the test, not the run.

_SHRINKING_LIST = '''
from replay.capture import events as ev, schema
from replay.capture._encode import Plan

names = tuple(schema._OMITTED["message"])
def plan(tensor):
    return Plan(ev.MessageSeen, schema.SCHEMA_VERSION, names, tuple(schema._OMITTED["message"].values()),
                schema._ALWAYS, frozenset(schema._TENSOR_LISTS), tensor)

def shrinking(items):
    def tensor(t):
        del items[1:]  # the writer's tensor function, misbehaving: it empties the list being read
        return t.name
    return tensor

specs = [ev.TensorSpec(name=f"T{i}", datatype="FP32", shape=[1]) for i in range(64)]
items = list(specs)
rec = ev.MessageSeen(t_ns=1, call="c", dir="s2c", index=0, size=1, output_tensors=items)
got = plan(shrinking(items)).build(rec, 1, 0)["output_tensors"]
again = list(specs)
want = [t for t in map(shrinking(again), again)]  # [tensor(t) for t in v], as the Python builds it
print(got, want)
'''


@needs_compiled
def test_a_tensor_function_that_shrinks_the_list_is_read_as_python_reads_it() -> None:
    """The builder read a tensor list's size once, then its items by index around a Python call per item:
    a call that shrank the list made it read past the end (SIGSEGV). Now it reads through the list's
    iterator, as ``[tensor(t) for t in v]`` does, and builds what that builds."""
    got, want = run_python(_SHRINKING_LIST).strip().split("] [")
    assert got + "]" == "[" + want == "['T0']"


_NE_REBINDS = '''
from replay.capture import events as ev, schema

rec = ev.MessageSeen(t_ns=1, call="c", dir="s2c", index=0, size=1)

class Model:  # a value nothing else holds once the slot is rebound
    def __ne__(self, other):
        object.__setattr__(rec, "model", "other")  # rebinds the field being compared: frees this value
        return True

for way in ("python", "compiled", "line"):
    object.__setattr__(rec, "model", Model())
    if way == "python":
        got = schema._PY_BUILD[ev.MessageSeen](rec, 1, 0)["model"]
    elif way == "compiled":
        got = schema._BUILD[ev.MessageSeen](rec, 1, 0)["model"]
    else:
        got = schema._LINE[ev.MessageSeen](rec, 1, 0, None)  # a value it cannot write: None, orjson's
    print(way, type(got).__name__)
'''


@needs_compiled
def test_a_value_whose_ne_rebinds_its_field_is_written_as_python_writes_it() -> None:
    """The builder held a field's value borrowed from the record across ``value != default``: an
    ``__ne__`` rebinding that field freed it before it went into the dict (use after free: SIGSEGV with
    freed memory overwritten). Now it holds the value, and writes the one it read, as the Python does."""
    assert run_python(_NE_REBINDS).splitlines() == ["python Model", "compiled Model", "line NoneType"]


def _raised(build: Any, *args: Any) -> str:
    try:
        build(*args)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


@needs_compiled
@pytest.mark.parametrize("tensors", [5, [5], None, []])
def test_a_skipped_field_is_left_out_unevaluated_by_both(tensors: Any) -> None:
    """A field whose bit is set in ``skip`` (a stream's repeated sticky fields) is read and left out
    without being evaluated, by the Python and the C alike: the same dict and line with any ``skip``;
    not skipped, an ill-typed ``output_tensors`` raises the same error in both (TypeError, or the
    AttributeError of reading a tensor's name). (The C used to skip first and the Python to build
    first: the twins disagreed on ill-typed records.)"""
    rec = ev.MessageSeen(t_ns=1, call="c", dir="s2c", index=0, size=1, model="m", output_tensors=tensors)
    skip = schema._STICKY_SKIP
    want = schema._PY_BUILD[ev.MessageSeen](rec, 1, skip)
    assert schema._BUILD[ev.MessageSeen](rec, 1, skip) == want and "output_tensors" not in want
    assert orjson.loads(schema._LINE[ev.MessageSeen](rec, 1, skip, None)) == want
    raised = _raised(schema._PY_BUILD[ev.MessageSeen], rec, 1, 0)
    assert _raised(schema._BUILD[ev.MessageSeen], rec, 1, 0) == raised
    if tensors in (None, []):
        assert raised == "no error"
    else:
        assert raised.startswith("TypeError" if tensors == 5 else "AttributeError")


@needs_compiled
def test_the_encoder_refuses_an_ill_typed_repeat_as_it_refused_the_first() -> None:
    """The writer's Encoder compares a stream's sticky fields before it encodes: a record repeating an
    ill-typed ``output_tensors`` was skipped by the C, and written, where the first one raised."""
    rec = ev.MessageSeen(t_ns=1, call="c", dir="s2c", index=0, size=1, output_tensors=5)  # type: ignore[arg-type]
    encoder = schema.Encoder()
    for seq in (1, 2):
        with pytest.raises(TypeError):
            encoder.encode(rec, seq)

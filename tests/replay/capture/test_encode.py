"""The writer's sparse dicts (replay/capture/sparse.py, from schema.py's tables) and the lines they make.

Pure: for random records of every kind and any fields to skip, the compiled builder gives the very dict
its own source run uncompiled gives (same keys in the same order, the same value objects) or the same
error; each way a field is written is held to its rule; every line reads back as the record it was
made from; and the sparse :class:`~replay.capture.schema.Encoder` writes, byte for byte, what it
wrote before it compared sticky fields on the records instead of on their JSON form (the reference
below is that earlier algorithm). Its work (sparse.py's ``Encoder``) compiled writes the bytes its source
uncompiled writes, and raises where it raises, with the same state after.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import compiled
from replay.capture import events as ev
from replay.capture import schema, sparse
from tests.replay.capture.test_shapes import MESSAGES, RECORDS
from tests.support.child import run_python

needs_compiled = pytest.mark.skipif(
    not compiled.is_compiled(sparse), reason="replay.capture.sparse is not compiled here (or TRITON_TAP_PURE)"
)

#: replay/capture/sparse.py run from its source, uncompiled: the reference of the compiled builder.
_SOURCE = compiled.load_source("replay.capture.sparse", "sparse_source")


def _source_build(cls: type[Any]) -> Any:
    """``cls``'s builder made by the uncompiled source from the compiled one's own tables."""
    b = schema._BUILD[cls]
    return _SOURCE.Sparse(schema.SCHEMA_VERSION, cls.kind, b._names, b._modes, b._defaults, schema._tensor)


def _outcome(build: Any, record: Any, seq: int, skip: int) -> tuple[str, Any]:
    try:
        d = build(record, seq, skip)
    except Exception as e:
        return "error", type(e)
    return "ok", [(k, v) for k, v in d.items()]


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(RECORDS, st.integers(0, 2**63), st.integers(0, 2**24 - 1))
def test_the_compiled_dict_is_the_source_dict(record: Any, seq: int, skip: int) -> None:
    fast = schema._BUILD[type(record)]
    slow = _source_build(type(record))
    got, want = _outcome(fast, record, seq, skip), _outcome(slow, record, seq, skip)
    assert got[0] == want[0] and (got[0] == "error" or len(got[1]) == len(want[1]))
    if got[0] == "ok":
        for (k1, v1), (k2, v2) in zip(got[1], want[1], strict=True):
            assert k1 == k2
            # The record's own objects; tensor lists are built anew by both, and compiled code boxes an int anew.
            assert v1 is v2 or (type(v1) in (list, int) and type(v1) is type(v2) and v1 == v2)


def test_the_tables_are_the_schemas() -> None:
    """The builder's tables say, per field in order, what the reader fills in for it (schema._OMITTED)."""
    for cls in ev.RECORD_TYPES:
        b = schema._BUILD[cls]
        assert b._names == [f.name for f in dataclasses.fields(cls)] and b._kind == cls.kind
        for name, mode, default in zip(b._names, b._modes, b._defaults, strict=True):
            omitted = schema._OMITTED[cls.kind][name]
            if omitted is schema._ALWAYS:
                assert mode == sparse.ALWAYS
            elif name in schema._TENSOR_LISTS:
                assert mode == sparse.TENSORS and omitted is None
            else:
                assert mode == (sparse.NULLABLE if omitted is None else sparse.DEFAULT) and default is omitted


@pytest.mark.parametrize("build", ["compiled", "source"])
def test_each_way_a_field_is_written(build: str) -> None:
    """Required: always, null too; nullable: unless null; with a default: unless it equals it (``0`` for
    ``False`` too, as a reader cannot tell them apart once read back); a tensor list: unless null, each
    tensor through the function."""
    tensor = lambda t: {"t": t}  # noqa: E731
    make = sparse.Sparse if build == "compiled" else _SOURCE.Sparse
    modes = (sparse.ALWAYS, sparse.NULLABLE, sparse.DEFAULT, sparse.TENSORS)
    b = make(4, "k", ["a", "n", "d", "t"], modes, [None, None, False, None], tensor)

    @dataclasses.dataclass
    class R:
        a: Any = None
        n: Any = None
        d: Any = False
        t: Any = None

    assert b(R(), 9, 0) == {"v": 4, "seq": 9, "kind": "k", "a": None}
    assert b(R(a=1, n=0, d=0, t=[]), 9, 0) == {"v": 4, "seq": 9, "kind": "k", "a": 1, "n": 0, "t": []}
    assert b(R(n="", d=True, t=[1, 2]), 9, 0) == {"v": 4, "seq": 9, "kind": "k", "a": None, "n": "", "d": True,
                                                  "t": [{"t": 1}, {"t": 2}]}  # fmt: skip
    assert b(R(a=1, n=2, d=True, t=[3]), 9, 0b1111) == {"v": 4, "seq": 9, "kind": "k"}
    with pytest.raises(ValueError):
        make(4, "k", ["a"], [sparse.ALWAYS, sparse.ALWAYS], [None], tensor)
    with pytest.raises(ValueError):
        make(4, "k", ["a"], [7], [None], tensor)


@settings(max_examples=300, deadline=None)
@given(RECORDS, st.integers(0, 2**63))
def test_every_line_reads_back_as_its_record(record: Any, seq: int) -> None:
    """What the writer leaves out is what the reader fills in: a line alone decodes to its record."""
    assert schema.decode(orjson.loads(schema.encode(record, seq))) == (seq, record)


def _reference(records: list[Any]) -> list[bytes]:
    """The Encoder as it was: sticky fields compared in their JSON form, the dict built then popped."""
    last: dict[str, tuple[Any, ...]] = {}
    out = []
    for seq, record in enumerate(records):
        d = schema._BUILD[type(record)](record, seq, 0)
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


def _source_encoder() -> Any:
    """The Encoder's work run by the uncompiled source, with builders the source made from the schema's tables."""
    build = {cls: _source_build(cls) for cls in ev.RECORD_TYPES}
    return _SOURCE.Encoder(build, ev.MessageSeen, ev.CallEnded, ev.MessageSeen.sticky)


def _line(encode: Any, record: Any, seq: int, payload_at: list[int] | None) -> object:
    try:
        return encode(record, seq, payload_at)
    except Exception as e:  # the type: a compiled function's own messages may be worded otherwise
        return type(e)


#: A message of an ill-typed sticky field: it raises unless left out as a repeat, and must not be.
_ILL = st.builds(ev.MessageSeen, t_ns=st.just(1), call=st.sampled_from(["c1.1", "c1.3"]), dir=st.just("s2c"),
                 index=st.just(0), size=st.just(1), model=st.just("m"), output_tensors=st.sampled_from([5, [5]]))  # fmt: skip


def _streams(records: list[Any]) -> list[Any]:
    """Some messages made the next of the one before's stream, its sticky fields the same objects (repeats)."""
    out: list[Any] = []
    for r in records:
        if out and type(r) is ev.MessageSeen and type(out[-1]) is ev.MessageSeen and r.index % 3:
            last = out[-1]
            r = dataclasses.replace(r, call=last.call, dir=last.dir, model=last.model, model_version=last.model_version,
                                    outputs=last.outputs, output_tensors=last.output_tensors)  # fmt: skip
        out.append(r)
    return out


#: Mostly messages (a stream's), then any record, a call's end, an ill-typed message.
_ANY = st.integers(0, 9).flatmap(lambda k: MESSAGES if k < 6 else RECORDS if k < 8 else _END if k < 9 else _ILL)
_PLACE = st.none() | st.lists(st.integers(0, 2**40), min_size=2, max_size=2)  # payload_at, as the writer gives it


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(st.lists(_ANY, max_size=30).map(_streams), st.data())
def test_the_compiled_encoder_writes_the_source_s_bytes(records: list[Any], data: st.DataObject) -> None:
    """Every record kind, a stream's repeated and changed sticky fields, ``payload_at``, a reset (a batch
    never written), a record that raises: the same line or the same error, and the same state after it
    (what the next lines say)."""
    fast, slow = schema.Encoder(), _source_encoder()
    assert compiled.is_compiled(sparse) and type(fast.encode.__self__) is sparse.Encoder
    for seq, record in enumerate(records):
        if data.draw(st.integers(0, 9)) == 0:
            fast.reset()
            slow.reset()
        place = data.draw(_PLACE)
        got = _line(fast.encode, record, seq, place)
        assert got == _line(slow.encode, record, seq, place), (seq, record)
        if isinstance(got, bytes):
            assert got == schema.encode(record, seq, place) or b'"dir":"s2c"' in got  # sticky fields left out


def test_the_encoder_skips_the_schema_s_sticky_fields() -> None:
    """Its sticky fields are ``MessageSeen.sticky``, their bits those schema's builders read."""
    work = schema.Encoder().encode.__self__
    assert work._sticky == list(ev.MessageSeen.sticky) and work._sticky_skip == schema._STICKY_SKIP


def _raised(build: Any, *args: Any) -> str:
    try:
        build(*args)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


@pytest.mark.parametrize("tensors", [5, [5], None, []])
def test_a_skipped_field_is_left_out_unread(tensors: Any) -> None:
    """A field whose bit is set in ``skip`` (a stream's repeated sticky fields, which the Encoder read to
    know they repeat) is left out unread; not skipped, an ill-typed ``output_tensors`` raises (TypeError,
    or the AttributeError of reading a tensor's name), compiled or not."""
    rec = ev.MessageSeen(t_ns=1, call="c", dir="s2c", index=0, size=1, model="m", output_tensors=tensors)
    skip = schema._STICKY_SKIP
    for build in (schema._BUILD[ev.MessageSeen], _source_build(ev.MessageSeen)):
        got = build(rec, 1, skip)
        assert "output_tensors" not in got and "model" not in got and got["call"] == "c"
        raised = _raised(build, rec, 1, 0)
        if tensors in (None, []):
            assert raised == "no error"
        else:
            assert raised.startswith("TypeError" if tensors == 5 else "AttributeError")


def test_the_encoder_refuses_an_ill_typed_repeat_as_it_refused_the_first() -> None:
    """The writer's Encoder compares a stream's sticky fields before it encodes: a record repeating an
    ill-typed ``output_tensors`` must raise as the first one did, not be left out as a repeat."""
    rec = ev.MessageSeen(t_ns=1, call="c", dir="s2c", index=0, size=1, output_tensors=5)  # type: ignore[arg-type]
    encoder = schema.Encoder()
    for seq in (1, 2):
        with pytest.raises(TypeError):
            encoder.encode(rec, seq)


# -- Python code the builder runs: what crashed the hand-written C it replaced ------------------------
# In a child interpreter (tests/support/child.py): a crash fails the test, not the run.

_SHRINKING_LIST = """
from replay.capture import events as ev, schema

def shrinking(items):
    def tensor(t):
        del items[1:]  # the writer's tensor function, misbehaving: it empties the list being read
        return {"name": t.name}
    return tensor

specs = [ev.TensorSpec(name=f"T{i}", datatype="FP32", shape=[1]) for i in range(64)]
items = list(specs)
rec = ev.MessageSeen(t_ns=1, call="c", dir="s2c", index=0, size=1, output_tensors=items)
build = schema._BUILD[ev.MessageSeen]
build._tensor = shrinking(items)
print(build(rec, 1, 0)["output_tensors"])
"""


def test_a_tensor_function_that_shrinks_the_list_is_read_as_python_reads_it() -> None:
    """The C builder read a tensor list's size once, then its items by index around a Python call per
    item: a call that shrank the list made it read past the end (SIGSEGV). ``[tensor(t) for t in v]``
    reads through the list's iterator, compiled or not."""
    assert run_python(_SHRINKING_LIST).strip() == "[{'name': 'T0'}]"


_NE_REBINDS = """
from replay.capture import events as ev, schema

rec = ev.MessageSeen(t_ns=1, call="c", dir="c2s", index=0, size=1)

class Compressed:  # a value nothing else holds once the slot is rebound
    def __ne__(self, other):
        object.__setattr__(rec, "compressed", False)  # rebinds the field being compared: frees this value
        return True

object.__setattr__(rec, "compressed", Compressed())
print(type(schema._BUILD[ev.MessageSeen](rec, 1, 0)["compressed"]).__name__)
"""


def test_a_value_whose_ne_rebinds_its_field_is_written_as_it_was_read() -> None:
    """The C builder held a field's value borrowed from the record across ``value != default``: an
    ``__ne__`` rebinding that field freed it before it went into the dict (use after free: SIGSEGV).
    The value read is the value written."""
    assert run_python(_NE_REBINDS).strip() == "Compressed"

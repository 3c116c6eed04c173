"""The capture decoder's fast path compiled (mypyc, replay/compiled.py) decodes what its source decodes.

The reference is ``schema.py`` with its fast path ``shapes.py`` run from its ``.py`` file, uncompiled
(:func:`replay.compiled.load_source`). For any line, both give the same seq and record (compared by
``repr``, so ``1``, ``1.0`` and ``true`` differ) or the same error, and the same sticky state after
it. Lines are the writer's own (dense and sparse) and then broken
at the byte level: values swapped for any JSON text, whitespace, escapes, cut lines, stray bytes. The
reader's hot loop (its inline copy of ``SeqWatch.record``'s common case) is held to ``SeqWatch.record``
over sequence damage.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import compiled
from replay.capture import events as ev
from replay.capture import reader as reader_module
from replay.capture import schema, shapes
from replay.capture.reader import read_capture
from replay.capture.schema import encode
from replay.errors import CaptureError
from tests.data.make_golden import Builder
from tests.replay.capture.test_shapes import _JSON, MESSAGES, RECORDS

DATA = Path(__file__).resolve().parents[2] / "data"
needs_compiled = pytest.mark.skipif(
    not compiled.is_compiled(shapes), reason="the decoder's fast path is not compiled here (or TRITON_TAP_PURE)"
)


def _source() -> ModuleType:
    """schema.py (never compiled) as a fresh module whose fast path is shapes.py run uncompiled."""
    source_shapes = compiled.load_source("replay.capture.shapes", "_source_shapes")
    source = compiled.load_source("replay.capture.schema", "_source_schema")
    source.compile_shape = source_shapes.compile_shape
    source._SPECS = source_shapes.SpecMemo(source._SPECS._build)  # the source's own check and build of a tensor list
    source._SHAPES.clear()
    return source


SOURCE = _source()


def test_the_reference_is_the_source_uncompiled() -> None:
    assert not compiled.is_compiled(SOURCE)
    SOURCE.decode(orjson.loads(encode(ev.HalfClosed(t_ns=1, call="c"), 1)))
    assert {type(fast).__module__ for fast in SOURCE._SHAPES.values()} == {"_source_shapes"}


def _answer(module: Any, line: bytes, sticky: schema.Sticky) -> object:
    """One decoder's answer for one line: (seq, record) as comparable text, or its error."""
    try:
        seq, rec = module.decode(orjson.loads(line), path="f.jsonl", line=1, sticky=sticky)
    except (CaptureError, orjson.JSONDecodeError) as e:
        return f"{type(e).__name__}: {e}"
    return type(seq), seq, type(rec).__name__, repr(rec)


def _same(encoded: list[bytes]) -> int:
    """Both decoders over the same lines, each with its own sticky state; how many lines were records."""
    c_sticky: schema.Sticky = {}
    py_sticky: schema.Sticky = {}
    records = 0
    for i, line in enumerate(encoded):
        got = _answer(schema, line, c_sticky)
        assert got == _answer(SOURCE, line, py_sticky), (i, line)
        assert repr(c_sticky) == repr(py_sticky), (i, line)
        records += type(got) is tuple
    return records


def _mutate(line: bytes, data: st.DataObject) -> bytes:
    """The line broken in one of the ways a damaged or foreign file could be."""
    how = data.draw(st.sampled_from(["value", "byte", "space", "escape", "cut", "tail"]))
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError:  # broken already
        raw = None
    if not line:
        return b"\n"
    if how == "value" and type(raw) is dict and raw:  # a value replaced by any JSON text, as orjson or a person would
        key = data.draw(st.sampled_from(sorted(raw)))
        odd = data.draw(st.sampled_from([b"-0", b"01", b"1e2", b"1.0", b"18446744073709551616", b"-9223372036854775808",
                                         b"9223372036854775808", b'"s\\u0032c"', b'"\\u00e9"', b'"\xc3\xa9"', b"[1,]",
                                         b" true ", b"[true]", b"{}", b"[]", b'"a\\"b"', b"nul", b"--1"]))  # fmt: skip
        text = data.draw(st.one_of(st.just(odd), _JSON.map(orjson.dumps)))
        body = orjson.dumps({k: (None if k == key else v) for k, v in raw.items()})
        marker = orjson.dumps(key) + b":null"
        return body.replace(marker, orjson.dumps(key) + b":" + text, 1) + b"\n"
    at = data.draw(st.integers(0, len(line) - 1))
    if how == "byte":
        b = data.draw(st.sampled_from([*b'",:{}[] \t\\0-e.t\x00\x7f\n', 0xC3, 0xFF]))
        if data.draw(st.booleans()):
            return line[:at] + bytes([b]) + line[at + 1 :]
        return line[:at] + bytes([b]) + line[at:]
    if how == "space":
        return line[:at] + data.draw(st.sampled_from([b" ", b"\t", b"\r", b"  \n "])) + line[at:]
    if how == "escape":  # a key or string spelled with an escape: orjson reads it, ours must decline or agree
        return (
            line.replace(b'"v"', b'"\\u0076"', 1) if data.draw(st.booleans()) else line.replace(b"c2s", b"c\\u0032s", 1)
        )
    if how == "cut":
        return line[:at]
    return line[:-1] + data.draw(st.sampled_from([b" \n", b"x\n", b"}\n", b",\n", b"\n\n"]))


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(records=st.lists(st.one_of(RECORDS, MESSAGES), min_size=1, max_size=12))
def test_the_writer_s_lines_decode_as_the_source_decodes_them(records: list[ev.Record]) -> None:
    encoder = schema.Encoder()
    sparse = [encoder.encode(r, i) for i, r in enumerate(records)]
    # Twice: the first time makes the shapes, the second is decoded by them.
    assert _same(sparse + sparse) == 2 * len(records)
    assert _same([schema.encode(r, i) for i, r in enumerate(records)] * 2) == 2 * len(records)  # dense


@needs_compiled
@settings(max_examples=600, deadline=None)
@given(records=st.lists(st.one_of(RECORDS, MESSAGES), min_size=1, max_size=6), data=st.data())
def test_a_broken_line_gives_the_source_s_record_or_error(records: list[ev.Record], data: st.DataObject) -> None:
    encoder = schema.Encoder()
    good = [encoder.encode(r, i) for i, r in enumerate(records)]
    broken = list(good)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(broken) - 1))
        broken[i] = _mutate(broken[i], data)
    _same(good + broken)


@pytest.mark.parametrize("name", ["interleaved.jsonl", "http/mixed.jsonl"])
def test_the_common_lines_are_taken_by_the_fast_path(name: str) -> None:
    """Not a fast path that declines everything: a capture's usual lines (gRPC and schema 4's HTTP ones)
    are its own, with the generic decoder's values."""
    sticky: schema.Sticky = {}
    generic: schema.Sticky = {}
    taken = 0
    for line in (DATA / name).read_bytes().splitlines(keepends=True):
        raw = orjson.loads(line)
        fast = schema._SHAPES.get(tuple(raw)) or schema._shape(raw, tuple(raw))
        done = fast(dict(raw), sticky)
        want = schema._decode(raw, "f", 1, generic)
        if done is not None:
            taken += 1
            assert repr(done) == repr(want) and type(done[1]) is type(want[1])
    assert taken == len((DATA / name).read_bytes().splitlines())


def test_the_fast_path_declines_what_the_generic_decoder_must_judge() -> None:
    line = (b'{"v":%d,"seq":12,"kind":"message","t_ns":1780000000000396004,"call":"c1.1","dir":"s2c",'
            b'"index":0,"size":110,"request_id":"","final":false}\n' % schema.SCHEMA_VERSION)  # fmt: skip
    raw = orjson.loads(line)
    fast = schema._shape(raw, tuple(raw))
    seq, rec = fast(raw, {})
    assert seq == 12 and rec == ev.MessageSeen(t_ns=1780000000000396004, call="c1.1", dir="s2c", index=0, size=110,
                                               request_id="", final=False)  # fmt: skip
    assert fast({**raw, "final": 0}, {}) is None  # a wrong type: the generic decoder says what
    assert fast({**raw, "dir": "sideways"}, {}) is None  # not one of the Literal's values
    assert fast({**raw, "v": schema.SCHEMA_VERSION - 1}, {}) is None  # an older version: upgraded the generic way
    assert fast({**raw, "kind": "half_close"}, {}) is None  # another kind with these keys


def _damaged(data: st.DataObject) -> list[bytes]:
    """A capture's lines with the sequence damage a reader must see: lost, repeated, reordered lines."""
    b = Builder().start()
    b.call("c1.1")
    for rid in ("a", "", "b"):
        b.request("c1.1", rid)
        for i in range(data.draw(st.integers(0, 3))):
            b.response("c1.1", rid, f"{rid}-{i}")
        b.response("c1.1", rid, None, final=True)
        if data.draw(st.booleans()):
            b.gap(2)  # (a hole the record says, between two messages)
    b.end("c1.1")
    out = [encode(r, seq) for seq, r in enumerate(b.finish().records)]
    if data.draw(st.booleans()):  # a message written after the capture's end, with the next seq
        out.append(encode(b.records[-3], len(out)))
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(1, len(out) - 1))
        how = data.draw(st.sampled_from(["drop", "repeat", "repeat_other", "swap", "unknown", "far_repeat", "garbage"]))
        if how == "drop":
            del out[at]
        elif how == "repeat":
            out.insert(at, out[at - 1])
        elif how == "far_repeat":
            out.append(out[at])
        elif how == "repeat_other":  # the same seq, other content
            try:
                raw = orjson.loads(out[at - 1])
            except orjson.JSONDecodeError:
                continue  # a line damaged by an earlier draw has no content to vary
            raw["t_ns"] = raw.get("t_ns", 0) + 1
            out.insert(at, orjson.dumps(raw) + b"\n")
        elif how == "swap":
            out[at - 1], out[at] = out[at], out[at - 1]
        elif how == "garbage":  # a damaged line (--skip-damaged reads on past it)
            out[at] = out[at][: len(out[at]) // 2] + b"\x00" + out[at][len(out[at]) // 2 :]
        else:
            out.insert(at, orjson.dumps({"v": 3, "seq": at, "kind": "from_the_future"}) + b"\n")
    if data.draw(st.booleans()):  # the proxy was killed: the capture ends anywhere, maybe mid-line
        out = out[: data.draw(st.integers(1, len(out)))]
        out[-1] = out[-1][: data.draw(st.integers(len(out[-1]) // 2, len(out[-1])))]
    return out


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_sequence_damage_reads_the_same_through_the_inline_copy(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The reader's hot loop copies SeqWatch.record's common case (the next seq, a message) inline; with the
    copy off (its condition never true), SeqWatch.record alone finds the same holes, skips the same
    repeats (and damaged lines, with skip_damaged), yields the same records and counts them the same."""
    path = tmp_path_factory.mktemp("seq") / "capture.jsonl"
    path.write_bytes(b"".join(_damaged(data)))

    def read(skip: bool) -> object:
        reader = read_capture(path, skip_damaged=skip)
        try:
            got: object = [(seq, repr(rec)) for seq, rec in reader]
        except CaptureError as e:
            got = str(e)
        return got, reader.warnings, reader.gaps, reader.records

    inline = [read(False), read(True)]

    class NeverAMessage:  # the hot loop's `type(rec) is message`: never true, every record via SeqWatch.record
        pass

    with pytest.MonkeyPatch.context() as m:
        m.setattr(reader_module.ev, "MessageSeen", NeverAMessage)
        assert [read(False), read(True)] == inline


@needs_compiled
@pytest.mark.parametrize("name", sorted(str(p.relative_to(DATA)) for p in [*DATA.glob("*.jsonl"), *DATA.glob("http/*.jsonl")]))
def test_every_golden_capture_decodes_as_the_source_decodes_it(name: str) -> None:
    lines = (DATA / name).read_bytes().splitlines(keepends=True)
    _same([line for line in lines if line.strip()] * 2)

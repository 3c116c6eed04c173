"""The compiled decoder (replay/capture/_lines.c via lines.py) equals the Python path, line by line.

The Python path is the reference: ``schema.decode`` of the line orjson parsed (it is what every
reader uses without the compiled module, and what decodes every line the compiled one declines).
For any line, the compiled decoder either declines (None) or gives exactly what the Python path
gives: the same seq and record (compared by ``repr``, so ``1``, ``1.0`` and ``true`` differ) and the
same sticky state after it. Lines are the writer's own (dense and sparse) and then broken at the
byte level: values swapped for any JSON text, whitespace, escapes, cut lines, stray bytes.
"""

from __future__ import annotations

import importlib.util
import shutil
import sysconfig
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import compiled
from replay.capture import events as ev
from replay.capture import lines, schema
from replay.capture.reader import read_capture
from replay.capture.schema import encode
from replay.errors import CaptureError
from tests.data.make_golden import Builder
from tests.replay.capture.test_shapes import _JSON, MESSAGES, RECORDS
from tests.support.child import run_python

needs_compiled = pytest.mark.skipif(not lines.compiled(), reason="the compiled decoder is not built here")
DATA = Path(__file__).resolve().parents[2] / "data"


def _python(line: bytes, sticky: schema.Sticky) -> object:
    """The Python path's answer for one line: (seq, record) as comparable text, or its error."""
    try:
        seq, rec = schema.decode(orjson.loads(line), path="f.jsonl", line=1, sticky=sticky)
    except (CaptureError, orjson.JSONDecodeError) as e:
        return f"{type(e).__name__}: {e}"
    return type(seq), seq, repr(rec)


def _compiled(table: Any, line: bytes, sticky: schema.Sticky) -> tuple[object, bool]:
    """The reader's way with the compiled decoder: it, else the Python path (which teaches it the shape)."""
    done = table.decode(line, sticky)
    if done is not None:
        return (type(done[0]), done[0], repr(done[1])), True
    answer = _python(line, sticky)
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError:
        return answer, False
    kind = raw.get("kind") if type(raw) is dict else None
    if type(kind) is str and kind in schema.KINDS:
        lines.register(table, schema.KINDS[kind], tuple(raw), **schema.shape_tables(kind))
    return answer, False


def _same(encoded: list[bytes]) -> int:
    """Both ways over the same lines, each with its own sticky state; how many the compiled one took."""
    table = lines.new_table()
    c_sticky: schema.Sticky = {}
    py_sticky: schema.Sticky = {}
    taken = 0
    for i, line in enumerate(encoded):
        answer, took = _compiled(table, line, c_sticky)
        assert answer == _python(line, py_sticky), (i, line)
        assert repr(c_sticky) == repr(py_sticky), (i, line)
        taken += took
    return taken


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
def test_the_writer_s_lines_decode_as_the_python_path(records: list[ev.Record]) -> None:
    encoder = schema.Encoder()
    sparse = [encoder.encode(r, i) for i, r in enumerate(records)]
    # Twice: the first time teaches the table the shapes, the second is decoded by it.
    assert _same(sparse + sparse) >= 0
    _same([schema.encode(r, i) for i, r in enumerate(records)] * 2)  # dense


@needs_compiled
@settings(max_examples=600, deadline=None)
@given(records=st.lists(st.one_of(RECORDS, MESSAGES), min_size=1, max_size=6), data=st.data())
def test_a_broken_line_gives_the_python_path_s_record_or_error(records: list[ev.Record], data: st.DataObject) -> None:
    encoder = schema.Encoder()
    good = [encoder.encode(r, i) for i, r in enumerate(records)]
    broken = list(good)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(broken) - 1))
        broken[i] = _mutate(broken[i], data)
    _same(good + broken)


@needs_compiled
def test_the_common_lines_are_taken_by_the_compiled_decoder() -> None:
    """Not a decoder that declines everything: the capture's usual lines are its own, with their values."""
    lines_ = (DATA / "interleaved.jsonl").read_bytes().splitlines(keepends=True)
    assert _same(lines_ * 2) >= len(lines_) - 1  # the second pass: all taken (the first: those of known shapes)
    table = lines.new_table()
    line = (b'{"v":%d,"seq":12,"kind":"message","t_ns":1780000000000396004,"call":"c1.1","dir":"s2c",'
            b'"index":0,"size":110,"request_id":"","final":false}\n' % schema.SCHEMA_VERSION)  # fmt: skip
    _compiled(table, line, {})
    seq, rec = table.decode(line, {})
    assert seq == 12 and rec == ev.MessageSeen(t_ns=1780000000000396004, call="c1.1", dir="s2c", index=0, size=110,
                                               request_id="", final=False)  # fmt: skip
    assert table.decode(line.replace(b"1780000000000396004", b"-9223372036854775807"), {})[1].t_ns == -(2**63) + 1
    assert table.decode(line.replace(b'"c1.1"', b'"c\\u00e9"'), {})[1].call == "c\u00e9"  # via orjson
    assert table.decode(line.replace(b'"final":false', b'"final":0'), {}) is None  # a wrong type: declined
    assert table.decode(line[:-1], {}) is None  # no newline: the reader's cut-line rules apply


@needs_compiled
def test_lines_with_a_side_file_place_always_take_the_python_path() -> None:
    """The reader attaches the side file from the raw line (reader._file): the compiled path has none."""
    keys = ("v", "seq", "kind", "t_ns", "call", "dir", "index", "size", "payload_at")
    assert lines.plan(ev.MessageSeen, keys, **schema.shape_tables("message")) is None
    assert lines.plan(ev.MessageSeen, keys[:-1], **schema.shape_tables("message")) is not None


@needs_compiled
@pytest.mark.parametrize("name", sorted(str(p.relative_to(DATA)) for p in [*DATA.glob("*.jsonl"), *DATA.glob("http/*.jsonl")]))
def test_every_golden_capture_reads_the_same_either_way(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def read() -> tuple[list[tuple[int, str]], list[str], list[Any]]:
        reader = read_capture(DATA / name)
        try:
            got = [(seq, repr(rec)) for seq, rec in reader]
        except CaptureError as e:
            got = [(-1, str(e))]
        return got, reader.warnings, reader.gaps

    compiled = read()
    monkeypatch.setattr(lines, "TABLE", None)
    assert read() == compiled


@needs_compiled
def test_http_lines_are_taken_by_the_compiled_decoder() -> None:
    """Schema 4's HTTP lines (call_start with protocol, events with final, call_end with http_status) are the
    compiled decoder's own too, with the Python path's values."""
    lines_ = (DATA / "http" / "mixed.jsonl").read_bytes().splitlines(keepends=True)
    assert _same(lines_ * 2) >= len(lines_) - 1


def test_the_compiled_decoder_is_built_where_a_c_compiler_is() -> None:
    """The install builds it when it can (pyproject: optional); a silent build failure must show here."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if compiled.pure():
        pytest.skip(f"{compiled.PURE_ENV} is set: the Python path alone, on purpose")
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}): the Python path alone")
    assert lines.compiled(), "a C compiler is here but replay.capture._lines was not built: see pip's output"


def test_the_pure_setting_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compiled.PURE_ENV, "1")
    assert lines._load() is None
    monkeypatch.setenv(compiled.PURE_ENV, "0")
    # (Not `compiled()`: the whole run may have the setting on, and then the module-level table is off.)
    assert (lines._load() is not None) == (importlib.util.find_spec("replay.capture._lines") is not None)


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


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_sequence_damage_reads_the_same_either_way(data: st.DataObject, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The hot loop's inline copy of SeqWatch's common case (compiled lines) and SeqWatch.record (Python path)
    find the same holes, skip the same repeats (and damaged lines, with skip_damaged), yield the same
    records and count them the same."""
    path = tmp_path_factory.mktemp("seq") / "capture.jsonl"
    path.write_bytes(b"".join(_damaged(data)))

    def read(skip: bool) -> object:
        reader = read_capture(path, skip_damaged=skip)
        try:
            got: object = [(seq, repr(rec)) for seq, rec in reader]
        except CaptureError as e:
            got = str(e)
        return got, reader.warnings, reader.gaps, reader.records

    compiled = [read(False), read(True)]
    table = lines.TABLE
    try:
        lines.TABLE = None
        assert [read(False), read(True)] == compiled
    finally:
        lines.TABLE = table


# -- plans that do not fit the record, and errors that are not the line's -----------------------------
# lines.plan builds consistent plans; the C trusted them. A wrong one wrote past a record or read past
# the line's values: now it is refused when added. Run in a child interpreter (tests/support/child.py),
# where a crash fails the test instead of ending the run.

_BAD_PLANS = '''
import orjson
from replay.capture._lines import Table, R_V, R_SEQ, R_KIND, R_FIELD, B_INT, B_STR

class Small:
    __slots__ = ("a",)

class Big:
    __slots__ = ("a", "b")

def roles(n):
    envelope = [(R_V, -1, 0, None, None, False), (R_SEQ, -1, 0, None, None, False), (R_KIND, -1, 0, None, None, False)]
    return tuple(envelope + [(R_FIELD, 0, B_INT | B_STR, None, None, False)] * n)

def plan(fields, sticky=(), call=-1, direction=-1, forget=False, cls=Small):
    return (cls, "x", 4, None, roles(2), fields, sticky, call, direction, forget)

keys = ("v", "seq", "kind", "call", "dir")
line = b'{"v":4,"seq":1,"kind":"x","call":"c1","dir":"s2c"}\\n'
cases = {
    "a slot of another, larger class": plan(((Big.b, None, 3),)),
    "a field read from a key the line lacks": plan(((Small.a, None, 100000),)),
    "sticky fields without the dir key": plan(((Small.a, None, 3),), ((0, True),), 3, -1),
    "sticky fields with keys past the line's": plan(((Small.a, None, 3),), ((0, True),), 100000, 100000),
    "a sticky field past the record's": plan(((Small.a, None, 3),), ((100000, True),), 3, 4),
    "forgetting without the call key": plan(((Small.a, None, 3),), (), 100000, -1, True),
    "a fitting plan": plan(((Small.a, None, 3),), ((0, True),), 3, 4),
}
for what, made in cases.items():
    table = Table(orjson.loads)
    try:
        added = table.add(keys, made)
        got = [table.decode(line, {}) for _ in range(20)][-1]
    except (TypeError, ValueError) as e:
        print(f"{what}: {type(e).__name__}")
    else:
        print(f"{what}: added {added}, decoded {type(got[1]).__name__}, a={got[1].a!r}")
'''


@needs_compiled
def test_a_plan_that_does_not_fit_the_record_or_the_line_is_refused() -> None:
    """A field's slot of another class was filled by its offset in a smaller record (heap overflow: the
    allocator's check aborted), and the indexes of a field's key, of the call and dir keys and of a
    sticky field were used unchecked (SIGSEGV): each is now a TypeError or ValueError from ``add``."""
    assert run_python(_BAD_PLANS).splitlines() == [
        "a slot of another, larger class: TypeError",
        "a field read from a key the line lacks: ValueError",
        "sticky fields without the dir key: ValueError",
        "sticky fields with keys past the line's: ValueError",
        "a sticky field past the record's: ValueError",
        "forgetting without the call key: ValueError",
        "a fitting plan: added True, decoded Small, a='c1'",
    ]


class _Unexpected(Exception):
    """An error of the parser that is not about the text (not a ValueError)."""


@needs_compiled
@pytest.mark.parametrize("raised", [MemoryError, KeyboardInterrupt, _Unexpected])
def test_an_error_that_is_not_the_line_s_reaches_the_caller(raised: type[BaseException]) -> None:
    """The C hands orjson the values it does not read itself (a float, an object) and, when orjson refused
    one, cleared the error and let the Python path judge the line: it cleared a MemoryError or a
    KeyboardInterrupt too, and the Python path then parsed the line again. Now only the JSONDecodeError
    (a ValueError) of invalid text is cleared; anything else reaches the reader, as on the Python path."""

    def loads(text: bytes) -> Any:
        raise raised("not about the text")

    def invalid(text: bytes) -> Any:
        raise orjson.JSONDecodeError("invalid", "", 0)

    shape = ("v", "seq", "kind", "t_ns", "note", "labels")
    float_value = b'{"v":4,"seq":1,"kind":"mark","t_ns":1.5,"note":"n","labels":{}}\n'
    object_value = b'{"v":4,"seq":1,"kind":"mark","t_ns":1,"note":"n","labels":{"a":"b"}}\n'
    assert lines._C is not None
    for line in (float_value, object_value):
        for parse, want in ((loads, raised), (invalid, None)):
            table = lines._C.Table(parse)
            assert lines.register(table, ev.MarkRecorded, shape, **schema.shape_tables("mark"))
            if want is None:
                assert table.decode(line, {}) is None  # invalid text: the Python path judges the line
            else:
                with pytest.raises(want):
                    table.decode(line, {})

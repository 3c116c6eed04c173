"""The labels module compiled (mypyc, replay/compiled.py) gives exactly what its source gives uncompiled.

Pure: ``label_key`` of both, on field runs built to hit every branch (our tags and others, tags and
lengths of several bytes, over-long encodings of our tags, zero-length and cut fields, every wire
type, nested messages, with and without ``ids``), on the same runs with bytes edited or cut, on
random bytes, and on real Triton messages. Equal means: the same key or None, the same object when
nothing is left out, the same ids in the same order. And the labels functions the relay calls: the same
dict for the same message, through the cache or not.
"""

from __future__ import annotations

import shutil
import sysconfig
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.triton import labels
from replay import compiled
from tests.proxy.triton.test_label_key import _pair

#: The same file run uncompiled: the reference (its own caches, its own module).
SOURCE = compiled.load_source("proxy.triton.labels", "_source_labels")
needs_compiled = pytest.mark.skipif(not compiled.is_compiled(labels), reason="labels is not compiled here (or TRITON_TAP_PURE)")

STRIP, NESTED, IDENT = labels.RAW_OUTPUT_TAG, labels.INFER_RESPONSE_TAG, labels.ID_TAG
#: The arguments the labels call it with (requests, unary responses, streamed responses).
CALLS = [
    (labels.RAW_INPUT_TAG, 0, IDENT, 0),
    (STRIP, 0, IDENT, 0),
    (STRIP, NESTED, 0, IDENT),
]


def _varint(v: int, extra: int = 0) -> bytes:
    """``v`` as a varint, made ``extra`` bytes longer than it need be (over-long, as protobuf allows)."""
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v or extra:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)
        if not v and extra:
            while extra > 1:
                out.append(0x80)
                extra -= 1
            out.append(0)
            return bytes(out)


_field_no = st.sampled_from([1, 2, 3, 6, 7, 15, 16, 2047, 2**28, 2**40])
_tag = st.one_of(
    st.sampled_from([STRIP, NESTED, IDENT, labels.RAW_INPUT_TAG, 0, 0x80 >> 1]),
    st.builds(lambda f, w: f << 3 | w, _field_no, st.integers(0, 7)),
)


@st.composite
def _field(draw: st.DrawFn, depth: int) -> bytes:
    tag = draw(_tag)
    head = _varint(tag, draw(st.sampled_from([0, 0, 0, 1, 2, 9])))
    wire = tag & 7
    if wire == 0:
        return head + _varint(draw(st.integers(0, 2**64 - 1)), draw(st.sampled_from([0, 0, 1, 4])))
    if wire == 1:
        return head + draw(st.binary(min_size=8, max_size=8))
    if wire == 5:
        return head + draw(st.binary(min_size=4, max_size=4))
    if wire == 2:
        if depth < 2 and draw(st.booleans()):
            body = b"".join(draw(st.lists(_field(depth + 1), max_size=4)))
        else:
            body = draw(st.binary(max_size=20))
        return head + _varint(len(body), draw(st.sampled_from([0, 0, 0, 1, 4, 5]))) + body
    return head + draw(st.binary(max_size=3))  # groups and invalid wire types


_run = st.lists(_field(0), max_size=6).map(b"".join)


def _both(buf: bytes, args: tuple[int, int, int, int], with_ids: bool) -> None:
    py_ids: list[bytes] | None = [] if with_ids else None
    c_ids: list[bytes] | None = [] if with_ids else None
    want = SOURCE.label_key(buf, *args, py_ids)
    got = labels.label_key(buf, *args, c_ids)
    assert got == want, (buf, args)
    assert (got is buf) == (want is buf)
    assert c_ids == py_ids


def _edits(buf: bytes, data: st.DataObject) -> list[bytes]:
    at = data.draw(st.integers(0, max(len(buf) - 1, 0)))
    mask = data.draw(st.integers(1, 255))
    edited = buf[:at] + bytes([buf[at] ^ mask]) + buf[at + 1 :] if buf else buf
    return [buf, edited, buf[:at], buf[at:]]


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(st.data(), _run, st.sampled_from(CALLS), st.booleans())
def test_field_runs_give_the_same_key(data: st.DataObject, buf: bytes, args: Any, with_ids: bool) -> None:
    for one in _edits(buf, data):
        _both(one, args, with_ids)


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(st.data(), _run, st.tuples(*[st.sampled_from([0, 1, STRIP, NESTED, IDENT, 0x7F])] * 4))
def test_any_tags_below_128_give_the_same_key(data: st.DataObject, buf: bytes, args: Any) -> None:
    for one in _edits(buf, data):
        _both(one, args, True)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60), st.sampled_from(CALLS))
def test_random_bytes_give_the_same_key(buf: bytes, args: Any) -> None:
    _both(buf, args, True)


@needs_compiled
@settings(max_examples=100, deadline=None)
@given(st.data(), st.sampled_from(["request", "response", "stream"]))
def test_triton_messages_give_the_same_key(data: st.DataObject, kind: str) -> None:
    first, second = data.draw(_pair(kind))
    args = CALLS[["request", "response", "stream"].index(kind)]
    for buf in (first, second, first + second):
        for one in _edits(buf, data):
            _both(one, args, True)


_FUNCTIONS = ("request_labels", "response_labels", "stream_response_labels")


@needs_compiled
@settings(max_examples=100, deadline=None)
@given(st.data(), st.sampled_from(["request", "response", "stream"]), st.booleans())
def test_the_labels_functions_give_the_same_fields(data: st.DataObject, kind: str, truncated: bool) -> None:
    """Each message twice (a miss, then a hit of each module's own cache), edited and cut: the same fields,
    or the same error."""
    name = _FUNCTIONS[["request", "response", "stream"].index(kind)]
    first, second = data.draw(_pair(kind))
    for buf in (first, second, first, *_edits(first + second, data)):
        got: Any
        want: Any
        try:
            got = getattr(labels, name)(buf, truncated)
        except Exception as e:
            got = (type(e).__name__, str(e))
        try:
            want = getattr(SOURCE, name)(buf, truncated)
        except Exception as e:
            want = (type(e).__name__, str(e))
        assert repr(got) == repr(want), (name, buf)  # repr: an edited double may decode to NaN


def test_the_labels_are_compiled_where_they_are_built() -> None:
    """The install compiles them when it can (setup.py: optional); a silent build failure must show here."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if compiled.pure():
        assert not compiled.is_compiled(labels)
        pytest.skip(f"{compiled.PURE_ENV} is set: the Python alone, on purpose")
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}): the Python alone")
    assert compiled.is_compiled(labels), f"proxy.triton.labels is not compiled: {compiled.active()['proxy.triton.labels']}"

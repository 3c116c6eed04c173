"""The frame reader with its compiled common case (``proxy/wire/_cut.c``) reads what the Python loop reads.

Pure: the same bytes, cut into the same reads, through a reader using ``_cut.cut`` and one without it
give the same frames (type, flags, stream, payload, raw bytes; header lists), the same error (code,
text, the frames before it), the same one-slice ``span`` and the same unread rest. The frames are
random, valid more often than not (each type at its size and on its kind of stream), with the
breaks of every rule mixed in: wrong sizes and streams, padding, oversize frames, header blocks cut
into CONTINUATIONs, frames inside a block.
"""

from __future__ import annotations

import re
from typing import Any

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wire import frames as wire
from proxy.wire import messages as wire_messages
from proxy.wire.frames import FrameError, FrameReader
from tests.proxy.wire.test_frames import _RANDOM_FRAMES, _frame, _norm

needs_compiled = pytest.mark.skipif(wire._cut is None, reason="proxy.wire._cut is not built here (or TRITON_TAP_PURE)")

_SIZE = {wire.PRIORITY: 5, wire.RST_STREAM: 4, wire.PING: 8, wire.WINDOW_UPDATE: 4, wire.GOAWAY: 8, wire.SETTINGS: 6}
_CONN = {wire.SETTINGS, wire.PING, wire.GOAWAY}
_BLOCK = hpack.Encoder().encode([(b"x-a", b"b"), (b":status", b"200")])
_ADDRESS = re.compile(r"0x[0-9a-f]+")


@st.composite
def _one(draw: st.DrawFn) -> bytes:
    ftype = draw(st.sampled_from([*range(10), 0xFA]))
    flags = draw(st.sampled_from([0, wire.END_STREAM, wire.END_HEADERS, wire.PADDED, 0xFF]))
    if ftype == wire.HEADERS and draw(st.booleans()):
        # a whole block, or its first part with CONTINUATIONs after it (maybe with other frames between)
        at = draw(st.integers(0, len(_BLOCK)))
        first = _frame(wire.HEADERS, wire.END_HEADERS if at == len(_BLOCK) else 0, 1, _BLOCK[:at])
        rest = _frame(wire.CONTINUATION, wire.END_HEADERS, draw(st.sampled_from([1, 1, 3])), _BLOCK[at:])
        return first + (rest if at < len(_BLOCK) else b"")
    how = draw(st.sampled_from(["kept", "kept", "kept", "stream", "size", "random"]))
    if how != "random":  # mostly frames that keep the rules, or break exactly one of them
        sid = 0 if ftype in _CONN else draw(st.sampled_from([1, 3, 0x80000001]))
        if how == "stream":
            sid = 1 if ftype in _CONN else 0
        payload = draw(st.binary(min_size=_SIZE.get(ftype, 0), max_size=_SIZE.get(ftype, 30)))
        if how == "size":
            payload = payload[:-1] if payload and draw(st.booleans()) else payload + b"x"
        if ftype == wire.DATA and flags & wire.PADDED:
            payload = bytes([draw(st.integers(0, len(payload) + 1))]) + payload
        return _frame(ftype, flags, sid, payload)
    sid = draw(st.sampled_from([0, 1, 3, 0x80000001]))
    return _frame(ftype, flags, sid, draw(st.binary(max_size=40)), draw(st.sampled_from([None, None, 3, 50])))


_FRAMES = st.one_of(
    st.lists(_one(), max_size=12).map(b"".join),
    _RANDOM_FRAMES,
    st.binary(max_size=200),
)


def _read(use_cut: bool, stream: bytes, cuts: list[int], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    monkeypatch.setattr(wire, "_cut", wire._C.cut if use_cut and wire._C is not None else None)
    reader = FrameReader(expect_preface=False)
    reader.max_frame = 40
    seen: list[Any] = []
    prev = 0
    for c in [*sorted(c for c in cuts if c <= len(stream)), len(stream)]:
        try:
            got = reader.feed(stream[prev:c])
        except FrameError as e:  # (hpack's errors name the buffer they read by its address: not compared)
            seen.append(("error", e.code, _ADDRESS.sub("0x...", str(e)), _norm(e.before)))
            break
        seen.append((_norm(got), None if reader.span is None else bytes(reader.span)))
        prev = c
    seen.append(reader.unread())
    return seen


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(_FRAMES, st.lists(st.integers(0, 250), max_size=5))
def test_the_compiled_cut_reads_what_the_python_loop_reads(stream: bytes, cuts: list[int]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        fast = _read(True, stream, cuts, mp)
        slow = _read(False, stream, cuts, mp)
    assert fast == slow


@needs_compiled
def test_it_stops_at_what_python_must_judge() -> None:
    """HEADERS, a bad frame, an oversize or incomplete one: the index of that frame, nothing appended for it."""
    assert wire._C is not None
    data = _frame(wire.DATA, 0, 1, b"ab")
    for tail in (_frame(wire.HEADERS, wire.END_HEADERS, 1, _BLOCK), _frame(wire.PING, 0, 1, bytes(8)),
                 _frame(wire.DATA, wire.PADDED, 1, b"\x00ab"), _frame(wire.DATA, 0, 1, bytes(41)), data[:-1]):  # fmt: skip
        buf = data + tail
        out: list[Any] = []
        assert wire._C.cut(buf, memoryview(buf), 0, 40, out) == len(data)
        assert _norm(out) == [(wire.DATA, 0, 1, b"ab", data)]
    with pytest.raises(TypeError):
        wire._C.cut(bytearray(data), memoryview(data), 0, 40, [])


@needs_compiled
def test_given_the_decoder_it_takes_whole_header_blocks_only() -> None:
    """With ``decoded``, a HEADERS frame holding a whole block on a stream is appended as ``decoded``
    returns it; a block in parts, padding or priority fields, stream 0: it stops there as before. An
    error of ``decoded`` leaves the frames before it in ``out``."""
    assert wire._C is not None
    calls: list[Any] = []

    def decoded(sid: int, end: int, block: bytes, raw: memoryview) -> tuple[Any, ...]:
        calls.append((sid, end, block, bytes(raw)))
        return ("decoded", sid)

    whole = _frame(wire.HEADERS, wire.END_HEADERS | wire.END_STREAM, 3, _BLOCK)
    data = _frame(wire.DATA, 0, 1, b"ab")
    out: list[Any] = []
    buf = data + whole + data
    assert wire._C.cut(buf, memoryview(buf), 0, 40, out, decoded) == len(buf)
    assert [o[0] for o in out] == [wire.DATA, "decoded", wire.DATA] and calls == [(3, 1, _BLOCK, whole)]
    for flags, sid in (
        (0, 1),
        (wire.END_HEADERS | wire.PADDED, 1),
        (wire.END_HEADERS | 0x20, 1),
        (wire.END_HEADERS, 0),
    ):
        buf = data + _frame(wire.HEADERS, flags, sid, _BLOCK)
        assert wire._C.cut(buf, memoryview(buf), 0, 40, [], decoded) == len(data)

    def refuses(sid: int, end: int, block: bytes, raw: memoryview) -> Any:
        raise FrameError(wire.COMPRESSION_ERROR, "no")

    out = []
    buf = data + whole
    with pytest.raises(FrameError):
        wire._C.cut(buf, memoryview(buf), 0, 40, out, refuses)
    assert _norm(out) == [(wire.DATA, 0, 1, b"ab", data)]


# -- the assembler's whole messages (_cut.messages) -------------------------------------------------

_MESSAGES = st.lists(st.tuples(st.sampled_from([0, 1]), st.binary(max_size=40)), max_size=8).map(
    lambda ms: b"".join(bytes([flag]) + len(body).to_bytes(4, "big") + body for flag, body in ms)
)


def _assemble(use_c: bool, data: bytes, cuts: list[int], keep: int, split_at: int | None,
              monkeypatch: pytest.MonkeyPatch) -> list[Any]:  # fmt: skip
    monkeypatch.setattr(wire_messages, "_messages", wire_messages._C.messages if use_c and wire_messages._C else None)
    asm = wire_messages.Assembler(keep, False, split_at)
    seen: list[Any] = []
    prev = 0
    for c in [*sorted(c for c in cuts if c <= len(data)), len(data)]:
        chunk = memoryview(data)[prev:c]  # the relay feeds views of the frames' payloads
        seen.append(asm.feed(chunk))
        seen.append(asm.partial)
        prev = c
    return seen


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(_MESSAGES, st.lists(st.integers(0, 400), max_size=5), st.sampled_from([0, 3, 16, 10_000]),
       st.sampled_from([None, 8]))  # fmt: skip
def test_the_compiled_messages_are_the_python_messages(data: bytes, cuts: list[int], keep: int,
                                                       split_at: int | None) -> None:  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        fast = _assemble(True, data, cuts, keep, split_at, mp)
        slow = _assemble(False, data, cuts, keep, split_at, mp)
    assert fast == slow

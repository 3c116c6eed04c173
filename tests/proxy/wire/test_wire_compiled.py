"""The frame reader and the message assembler compiled (mypyc, replay/compiled.py) read what their source reads.

Pure: the same bytes, cut into the same reads, through the compiled modules and the same files run
uncompiled give the same frames (type, flags, stream, payload, raw bytes; header lists), the same error
(code, text, the frames before it), the same one-slice ``span`` and the same unread rest; and the same
messages. The frames are random, valid more often than not (each type at its size and on its kind of
stream), with the breaks of every rule mixed in: wrong sizes and streams, padding, oversize frames,
header blocks cut into CONTINUATIONs, frames inside a block.
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
from replay import compiled
from tests.proxy.wire.test_frames import _RANDOM_FRAMES, _frame, _norm

#: The same files run uncompiled: the reference.
SOURCE_FRAMES = compiled.load_source("proxy.wire.frames", "_source_frames")
SOURCE_MESSAGES = compiled.load_source("proxy.wire.messages", "_source_messages")
needs_compiled = pytest.mark.skipif(
    not compiled.is_compiled(wire), reason="proxy.wire is not compiled here (or TRITON_TAP_PURE)"
)

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


def _read(module: Any, stream: bytes, cuts: list[int]) -> list[Any]:
    reader = module.FrameReader(expect_preface=False)
    reader.max_frame = 40
    seen: list[Any] = []
    prev = 0
    for c in [*sorted(c for c in cuts if c <= len(stream)), len(stream)]:
        try:
            got = reader.feed(stream[prev:c])
        except module.FrameError as e:  # (hpack's errors name the buffer they read by its address: not compared)
            seen.append(("error", e.code, _ADDRESS.sub("0x...", str(e)), _norm(e.before)))
            break
        seen.append((_norm(got), None if reader.span is None else bytes(reader.span)))
        prev = c
    seen.append(reader.unread())
    return seen


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(_FRAMES, st.lists(st.integers(0, 250), max_size=5))
def test_the_compiled_reader_reads_what_its_source_reads(stream: bytes, cuts: list[int]) -> None:
    assert _read(wire, stream, cuts) == _read(SOURCE_FRAMES, stream, cuts)


def test_a_block_met_again_is_not_decoded_again() -> None:
    """A header block that changes no table is decoded once (the reader knows the table by the identity
    of its front entry): compiled, a value typed as a tuple is boxed anew on each use and an identity
    test never holds, so this would decode every block again, with the same frames out."""
    reader = wire.FrameReader(expect_preface=False)
    reader.feed(_frame(wire.HEADERS, wire.END_HEADERS, 1, hpack.Encoder().encode([(b"x-a", b"b")])))  # one entry
    decodes: list[bytes] = []
    real = reader.decoder.decode

    def counted(data: bytes, raw: bool = False) -> Any:
        decodes.append(data)
        return real(data, raw=raw)

    reader.decoder.decode = counted  # type: ignore[method-assign]
    static = hpack.Encoder().encode([(b":status", b"200")])
    for sid in (3, 5, 7):
        (got,) = reader.feed(_frame(wire.HEADERS, wire.END_HEADERS, sid, static))
        assert list(got[3]) == [(b":status", b"200")]
    assert decodes == [static]


# -- the assembler's messages ----------------------------------------------------------------------

_MESSAGES = st.lists(st.tuples(st.sampled_from([0, 1]), st.binary(max_size=40)), max_size=8).map(
    lambda ms: b"".join(bytes([flag]) + len(body).to_bytes(4, "big") + body for flag, body in ms)
)


def _assemble(module: Any, data: bytes, cuts: list[int], keep: int, split_at: int | None, hashing: bool,
              as_bytes: bool) -> list[Any]:  # fmt: skip
    asm = module.Assembler(keep, hashing, split_at)
    seen: list[Any] = []
    prev = 0
    for c in [*sorted(c for c in cuts if c <= len(data)), len(data)]:
        # the relay feeds views of the frames' payloads; bytes are taken too
        chunk = data[prev:c] if as_bytes else memoryview(data)[prev:c]
        seen.append(asm.feed(chunk))
        seen.append(asm.partial)
        prev = c
    return seen


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(_MESSAGES, st.lists(st.integers(0, 400), max_size=5), st.sampled_from([0, 3, 16, 10_000]),
       st.sampled_from([None, 8]), st.booleans(), st.booleans())  # fmt: skip
def test_the_compiled_assembler_cuts_what_its_source_cuts(data: bytes, cuts: list[int], keep: int,
                                                          split_at: int | None, hashing: bool, as_bytes: bool) -> None:  # fmt: skip
    want = _assemble(SOURCE_MESSAGES, data, cuts, keep, split_at, hashing, as_bytes)
    assert _assemble(wire_messages, data, cuts, keep, split_at, hashing, as_bytes) == want


@needs_compiled
@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 9000), min_size=1, max_size=4), st.sampled_from(["bytes", "bytearray", "memoryview"]),
       st.lists(st.integers(0, 40000), max_size=3))  # fmt: skip
def test_long_frames_and_any_buffer_read_alike(sizes: list[int], kind: str, cuts: list[int]) -> None:
    """DATA frames on both sides of the length from which a payload stays a view of the read, in reads of
    bytes, bytearray or memoryview (the transports give bytes; compiled, a narrower type would raise)."""
    stream = b"".join(_frame(wire.DATA, 0, 1, bytes([n % 251]) * n) for n in sizes)
    seen = []
    for module in (wire, SOURCE_FRAMES):
        reader = module.FrameReader(expect_preface=False)
        got = []
        prev = 0
        for c in [*sorted(c for c in cuts if c <= len(stream)), len(stream)]:
            piece = stream[prev:c]
            got += _norm(
                reader.feed(
                    bytearray(piece) if kind == "bytearray" else memoryview(piece) if kind == "memoryview" else piece
                )
            )
            prev = c
        seen.append(got)
    assert seen[0] == seen[1] and len(seen[0]) == len(sizes)

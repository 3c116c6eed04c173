"""proxy.wire.frames: cutting HTTP/2 bytes into frames for a verbatim relay (pure: no sockets, no asyncio)."""

from __future__ import annotations

from typing import Any

import hpack
import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from proxy.wire import frames as wire
from proxy.wire.frames import FrameError, FrameReader
from proxy.wire.headers import Block

Frame = tuple[int, int, int, Any, Any]


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _frame(ftype: int, flags: int, sid: int, payload: bytes = b"", length: int | None = None) -> bytes:
    """One frame built by hand (independent of wire.frame); ``length`` may lie about the payload."""
    n = len(payload) if length is None else length
    return n.to_bytes(3, "big") + bytes((ftype, flags)) + sid.to_bytes(4, "big") + payload


PING_FRAME = _frame(wire.PING, 0, 0, b"12345678")
SETTINGS_FRAME = _frame(wire.SETTINGS, 0, 0, (4).to_bytes(2, "big") + (65535).to_bytes(4, "big"))


def _norm(frames: list[Frame]) -> list[tuple[int, int, int, Any, bytes]]:
    """Frames as plain comparable values (memoryviews to bytes, header tuples to plain tuples)."""
    out = []
    for ftype, flags, sid, payload, raw in frames:
        if ftype == wire.HEADERS:
            body: Any = [tuple(h) for h in payload]
        elif payload is None:
            body = None
        else:
            body = bytes(payload)
        out.append((ftype, flags, sid, body, bytes(raw)))
    return out


def _hdrs(payload: object) -> list[tuple[bytes, bytes]]:
    """The header list a HEADERS tuple carries, as plain tuples."""
    assert isinstance(payload, list)
    return [(bytes(n), bytes(v)) for n, v in payload]


def _mv(payload: object) -> memoryview:
    """The payload of a non-HEADERS tuple (a view of the read; a short DATA payload is bytes)."""
    assert isinstance(payload, memoryview | bytes)
    return memoryview(payload)


def _feed_chunks(reader: FrameReader, data: bytes, cuts: list[int]) -> list[Frame]:
    out: list[Frame] = []
    prev = 0
    for c in [*sorted(cuts), len(data)]:
        got = reader.feed(data[prev:c])
        if reader.span is not None:
            # The one-slice shortcut the relay writes must be exactly the frames returned.
            assert bytes(reader.span) == b"".join(bytes(f[4]) for f in got)
        out += got
        prev = c
    return out


def _size_update(size: int) -> bytes:
    """An HPACK dynamic table size update (RFC 7541 6.3)."""
    out = bytearray()
    if size < 31:
        return bytes([0x20 | size])
    out.append(0x20 | 31)
    size -= 31
    while size >= 128:
        out.append((size & 0x7F) | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# 1. any frame sequence from a real h2 client, any chunking
# ---------------------------------------------------------------------------------------------

_NAMES = [b"x-a", b"x-b", b"x-trace", b"grpc-timeout", b"content-type", b"user-agent"]
_SMALL_VALUES = st.one_of(
    st.sampled_from([b"1", b"application/grpc", b"abc", b"100m"]),
    st.text(alphabet="abcxyz0123-_/.", min_size=1, max_size=40).map(str.encode),
)
_HEADER = st.tuples(st.sampled_from(_NAMES), _SMALL_VALUES)
# Big enough that h2 must split the block into HEADERS + CONTINUATION (max frame 16384); Huffman
# coding it is slow in pure Python, so at most one per example.
_BIG_HEADER = (b"x-big", b"y" * 19000)
_PATHS = [b"/inference.GRPCInferenceService/ModelInfer", b"/inference.GRPCInferenceService/ServerLive"]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_h2_client_traffic_any_chunking_is_verbatim(data: st.DataObject) -> None:
    """Any h2 client frame sequence, in any chunking, gives the same frames, raw bytes verbatim, header lists as sent."""
    conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    expected: list[tuple[Any, ...]] = [("preface",), ("settings",)]
    big = data.draw(st.integers(0, 3), label="big") == 0  # one block split into CONTINUATIONs
    open_: list[int] = []  # streams we may still send on
    half_closed: list[int] = []  # END_STREAM sent: only RST_STREAM / WINDOW_UPDATE left
    for _ in range(data.draw(st.integers(1, 14), label="steps")):
        ops = ["open", "ping", "wu_conn"]
        if open_:
            ops += ["data", "data", "data", "data", "trailers"]
        if open_ or half_closed:
            ops += ["rst", "wu_stream"]
        op = data.draw(st.sampled_from(ops), label="op")
        if op == "open":
            if len(open_) + len(half_closed) >= 8:
                continue
            sid = conn.get_next_available_stream_id()
            headers = [
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", data.draw(st.sampled_from(_PATHS))),
                (b":authority", b"localhost:8001"),
                *data.draw(st.lists(_HEADER, max_size=5), label="headers"),
            ]
            if big:
                headers.append(_BIG_HEADER)
                big = False
            end = data.draw(st.integers(0, 3), label="end_stream") == 0
            conn.send_headers(sid, headers, end_stream=end)
            expected.append(("headers", sid, headers, end))
            (half_closed if end else open_).append(sid)
        elif op == "data":
            sid = data.draw(st.sampled_from(open_))
            room = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
            pad = data.draw(st.one_of(st.none(), st.integers(0, 255)), label="pad")
            if pad is not None and pad + 1 > room:
                pad = None
            limit = room - (pad + 1 if pad is not None else 0)
            size = data.draw(st.integers(0, min(limit, 5000)), label="size")
            body = data.draw(st.binary(min_size=size, max_size=size))
            end = data.draw(st.integers(0, 3), label="end_stream") == 0
            conn.send_data(sid, body, end_stream=end, pad_length=pad)
            expected.append(("data", sid, body, end, pad))
            if end:
                open_.remove(sid)
                half_closed.append(sid)
        elif op == "trailers":
            sid = data.draw(st.sampled_from(open_))
            trailers = data.draw(st.lists(_HEADER, min_size=1, max_size=3), label="trailers")
            conn.send_headers(sid, trailers, end_stream=True)
            expected.append(("headers", sid, trailers, True))
            open_.remove(sid)
            half_closed.append(sid)
        elif op == "ping":
            opaque = data.draw(st.binary(min_size=8, max_size=8))
            conn.ping(opaque)
            expected.append(("ping", opaque))
        elif op == "wu_conn":
            inc = data.draw(st.integers(1, 100_000))
            conn.increment_flow_control_window(inc)
            expected.append(("wu", 0, inc))
        elif op == "wu_stream":
            sid = data.draw(st.sampled_from(open_ + half_closed))
            inc = data.draw(st.integers(1, 100_000))
            conn.increment_flow_control_window(inc, stream_id=sid)
            expected.append(("wu", sid, inc))
        else:  # rst
            sid = data.draw(st.sampled_from(open_ + half_closed))
            conn.reset_stream(sid, error_code=8)
            expected.append(("rst", sid))
            (open_ if sid in open_ else half_closed).remove(sid)
    stream = conn.data_to_send()

    whole = FrameReader(expect_preface=True).feed(stream)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=30), label="cuts")
    chunked = _feed_chunks(FrameReader(expect_preface=True), stream, cuts)

    assert _norm(chunked) == _norm(whole)
    assert b"".join(bytes(f[4]) for f in whole) == stream
    assert b"".join(bytes(f[4]) for f in chunked) == stream

    got: list[tuple[Any, ...]] = []
    for ftype, flags, sid, payload, raw in whole:
        if ftype == -1:
            got.append(("preface",))
        elif ftype == wire.SETTINGS:
            got.append(("settings",))
        elif ftype == wire.HEADERS:
            got.append(("headers", sid, _hdrs(payload), bool(flags & wire.END_STREAM)))
            if raw[3] == wire.HEADERS and len(raw) > 9 + int.from_bytes(raw[:3], "big"):
                event("header block in CONTINUATIONs")
        elif ftype == wire.DATA:
            body = bytes(wire.data_payload(flags, _mv(payload)))
            pad = len(_mv(payload)) - len(body) - 1 if flags & wire.PADDED else None
            event("padded DATA" if pad is not None else "DATA")
            got.append(("data", sid, body, bool(flags & wire.END_STREAM), pad))
        elif ftype == wire.PING:
            got.append(("ping", bytes(_mv(payload))))
        elif ftype == wire.WINDOW_UPDATE:
            got.append(("wu", sid, int.from_bytes(_mv(payload), "big")))
        elif ftype == wire.RST_STREAM:
            got.append(("rst", sid))
        else:  # pragma: no cover - h2 sent something this test does not model
            got.append(("other", ftype))
    assert got == expected
    if any(e[0] == "headers" for e in expected[3:]):
        event("several header blocks (dynamic table reused)")


def test_h2_block_split_into_continuations_is_one_headers_tuple() -> None:
    """A header block h2 splits into HEADERS + CONTINUATIONs (and that references the dynamic table) comes out whole."""
    conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    big = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/p"),
        (b":authority", b"h"),
        (b"x-big", b"z" * 50000),
    ]
    conn.send_headers(1, big, end_stream=True)
    small = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/p"), (b":authority", b"h"), (b"x-r", b"v")]
    conn.send_headers(3, small)
    conn.send_headers(5, small)  # the second time it is (mostly) indexed: the decoder must mirror h2's table
    stream = conn.data_to_send()
    frames = FrameReader(expect_preface=True).feed(stream)
    assert [(f[0], f[2]) for f in frames] == [
        (-1, 0),
        (wire.SETTINGS, 0),
        (wire.HEADERS, 1),
        (wire.HEADERS, 3),
        (wire.HEADERS, 5),
    ]
    assert frames[2][1] == wire.END_STREAM
    assert _hdrs(frames[2][3]) == big
    assert len(bytes(frames[2][4])) > wire.DEFAULT_MAX_FRAME + 9  # several frames' worth of raw bytes
    assert _hdrs(frames[3][3]) == small == _hdrs(frames[4][3])
    assert len(frames[4][4]) < len(frames[3][4])  # really did use the dynamic table
    assert b"".join(bytes(f[4]) for f in frames) == stream


# ---------------------------------------------------------------------------------------------
# 2. HPACK mirroring: the proxy's own blocks never desync the peer
# ---------------------------------------------------------------------------------------------

_MIRROR_HEADER = st.tuples(
    st.sampled_from([b"grpc-status", b"grpc-message", b"x-a", b"content-type", b":status"]),
    st.one_of(st.sampled_from([b"0", b"14", b"200", b"unavailable"]), st.binary(max_size=300)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(_MIRROR_HEADER, max_size=6)), min_size=1, max_size=20))
def test_encode_block_mixed_into_a_stateful_hpack_stream_never_desyncs(blocks: list[tuple[bool, list[Any]]]) -> None:
    """Stateful-encoder blocks interleaved with encode_block blocks decode right with one receiver decoder; ours touch no table."""
    encoder = hpack.Encoder()
    receiver = hpack.Decoder()
    shadow = hpack.Decoder()  # sees only the peer's own blocks: the table the peer believes in
    reader = FrameReader(expect_preface=False)  # the proxy's mirror of the receiver
    for ours, headers in blocks:
        if ours:
            block = wire.encode_block(headers)
        else:
            block = encoder.encode(headers)
            assert [tuple(h) for h in shadow.decode(block, raw=True)] == headers
            if shadow.header_table.dynamic_entries and block[:1] and block[0] & 0x80:
                event("peer block indexes the table")
        assert [tuple(h) for h in receiver.decode(block, raw=True)] == headers
        (got,) = reader.feed(wire.headers_frames(1, block, False, wire.DEFAULT_MAX_FRAME))
        assert _hdrs(got[3]) == headers
        assert list(receiver.header_table.dynamic_entries) == list(shadow.header_table.dynamic_entries)
        assert list(reader.decoder.header_table.dynamic_entries) == list(shadow.header_table.dynamic_entries)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=20000), st.binary(max_size=20000)), max_size=4))
def test_encode_block_round_trips_any_bytes(headers: list[tuple[bytes, bytes]]) -> None:
    """encode_block carries any names/values (multi-byte lengths included) and leaves the decoder's table empty."""
    decoder = hpack.Decoder(max_header_list_size=10**7)
    assert [tuple(h) for h in decoder.decode(wire.encode_block(headers), raw=True)] == headers
    assert not decoder.header_table.dynamic_entries


# ---------------------------------------------------------------------------------------------
# 3. headers_frames: HEADERS + CONTINUATIONs reassembled
# ---------------------------------------------------------------------------------------------


def _split_frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i : i + 3], "big")
        out.append((data[i + 3], data[i + 4], int.from_bytes(data[i + 5 : i + 9], "big"), data[i + 9 : i + 9 + n]))
        i += 9 + n
    assert i == len(data)
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.binary(max_size=60), st.binary(max_size=200)), max_size=6),
    st.integers(1, 64),
    st.booleans(),
    st.integers(1, 2**31 - 1),
)
def test_headers_frames_split_and_reassemble(
    headers: list[tuple[bytes, bytes]], max_frame: int, end_stream: bool, sid: int
) -> None:
    """headers_frames cuts at max_frame, END_HEADERS only on the last, and the reader rebuilds one HEADERS with END_STREAM."""
    block = wire.encode_block(headers)
    out = wire.headers_frames(sid, block, end_stream, max_frame)
    frames = _split_frames(out)
    assert len(frames) == max(1, -(-len(block) // max_frame))
    assert frames[0][0] == wire.HEADERS
    assert all(f[0] == wire.CONTINUATION for f in frames[1:])
    assert all(f[2] == sid for f in frames)
    assert all(len(f[3]) <= max_frame for f in frames)
    assert b"".join(f[3] for f in frames) == block
    assert [bool(f[1] & wire.END_HEADERS) for f in frames] == [False] * (len(frames) - 1) + [True]
    assert bool(frames[0][1] & wire.END_STREAM) == end_stream
    assert all(f[1] & ~wire.END_HEADERS == 0 for f in frames[1:])

    reader = FrameReader(expect_preface=False)
    reader.max_frame = max_frame
    (got,) = reader.feed(out)
    assert got[:3] == (wire.HEADERS, wire.END_STREAM if end_stream else 0, sid)
    assert _hdrs(got[3]) == headers
    assert bytes(got[4]) == out


def test_headers_frames_large_block_at_default_frame_size() -> None:
    """A 40 KB block at the default max frame is HEADERS + 2 CONTINUATIONs and comes back as one HEADERS."""
    headers = [(b"grpc-message", b"m" * 40000), (b"grpc-status", b"14")]
    out = wire.headers_frames(7, wire.encode_block(headers), True, wire.DEFAULT_MAX_FRAME)
    assert [f[0] for f in _split_frames(out)] == [wire.HEADERS, wire.CONTINUATION, wire.CONTINUATION]
    frames = FrameReader(expect_preface=False).feed(out + PING_FRAME)
    assert _norm(frames) == [
        (wire.HEADERS, wire.END_STREAM, 7, headers, out),
        (wire.PING, 0, 0, b"12345678", PING_FRAME),
    ]


def test_header_block_across_feeds() -> None:
    """A header block split over several reads waits, then comes out once with all its raw bytes."""
    headers = [(b"x-a", b"v" * 100)]
    out = wire.headers_frames(3, wire.encode_block(headers), False, 16)
    reader = FrameReader(expect_preface=False)
    reader.max_frame = 16
    got: list[Frame] = []
    for i in range(0, len(out), 25):
        got += reader.feed(out[i : i + 25])
    assert _norm(got) == [(wire.HEADERS, 0, 3, headers, out)]
    assert reader.block is None


# ---------------------------------------------------------------------------------------------
# 4. framing violations
# ---------------------------------------------------------------------------------------------

_GOOD = wire.encode_block([(b"x-a", b"b")])

_VIOLATIONS = {
    "frame longer than max_frame": (_frame(wire.DATA, 0, 1, length=wire.DEFAULT_MAX_FRAME + 1), wire.FRAME_SIZE_ERROR),
    "DATA on stream 0": (_frame(wire.DATA, 0, 0, b"abc"), wire.PROTOCOL_ERROR),
    "HEADERS on stream 0": (_frame(wire.HEADERS, wire.END_HEADERS, 0, _GOOD), wire.PROTOCOL_ERROR),
    "RST_STREAM on stream 0": (_frame(wire.RST_STREAM, 0, 0, b"\0\0\0\x08"), wire.PROTOCOL_ERROR),
    "SETTINGS on stream 1": (_frame(wire.SETTINGS, 0, 1, b""), wire.PROTOCOL_ERROR),
    "PING on stream 1": (_frame(wire.PING, 0, 1, b"12345678"), wire.PROTOCOL_ERROR),
    "GOAWAY on stream 1": (_frame(wire.GOAWAY, 0, 1, bytes(8)), wire.PROTOCOL_ERROR),
    "SETTINGS length 5": (_frame(wire.SETTINGS, 0, 0, bytes(5)), wire.FRAME_SIZE_ERROR),
    "PING length 7": (_frame(wire.PING, 0, 0, bytes(7)), wire.FRAME_SIZE_ERROR),
    "RST_STREAM length 3": (_frame(wire.RST_STREAM, 0, 1, bytes(3)), wire.FRAME_SIZE_ERROR),
    "WINDOW_UPDATE length 5": (_frame(wire.WINDOW_UPDATE, 0, 0, bytes(5)), wire.FRAME_SIZE_ERROR),
    "PRIORITY length 4": (_frame(wire.PRIORITY, 0, 1, bytes(4)), wire.FRAME_SIZE_ERROR),
    "GOAWAY length 7": (_frame(wire.GOAWAY, 0, 0, bytes(7)), wire.FRAME_SIZE_ERROR),
    "GOAWAY length 0": (_frame(wire.GOAWAY, 0, 0), wire.FRAME_SIZE_ERROR),
    "CONTINUATION without a block": (_frame(wire.CONTINUATION, wire.END_HEADERS, 1, _GOOD), wire.PROTOCOL_ERROR),
    "DATA inside a header block": (
        _frame(wire.HEADERS, 0, 1, _GOOD) + _frame(wire.DATA, 0, 1, b"x"),
        wire.PROTOCOL_ERROR,
    ),
    "PING inside a header block": (_frame(wire.HEADERS, 0, 1, _GOOD) + PING_FRAME, wire.PROTOCOL_ERROR),
    "unknown type inside a header block": (
        _frame(wire.HEADERS, 0, 1, _GOOD) + _frame(0xFA, 0, 1, b"x"),
        wire.PROTOCOL_ERROR,
    ),
    "CONTINUATION on another stream": (
        _frame(wire.HEADERS, 0, 1, _GOOD) + _frame(wire.CONTINUATION, wire.END_HEADERS, 3, b""),
        wire.PROTOCOL_ERROR,
    ),
    "HEADERS padding longer than the frame": (
        _frame(wire.HEADERS, wire.END_HEADERS | wire.PADDED, 1, b"\x20" + _GOOD),
        wire.PROTOCOL_ERROR,
    ),
    "HEADERS padding equal to the frame": (
        _frame(wire.HEADERS, wire.END_HEADERS | wire.PADDED, 1, b"\x04abc"),
        wire.PROTOCOL_ERROR,
    ),
    "HEADERS padding + priority longer than the frame": (
        _frame(wire.HEADERS, wire.END_HEADERS | wire.PADDED | wire.PRIORITY_FLAG, 1, b"\x02" + bytes(5) + b"x"),
        wire.PROTOCOL_ERROR,
    ),
    "HEADERS priority longer than the frame": (
        _frame(wire.HEADERS, wire.END_HEADERS | wire.PRIORITY_FLAG, 1, bytes(4)),
        wire.PROTOCOL_ERROR,
    ),
    "padded HEADERS without a pad length": (
        _frame(wire.HEADERS, wire.END_HEADERS | wire.PADDED, 1, b""),
        wire.FRAME_SIZE_ERROR,
    ),
    "HPACK index beyond the table": (_frame(wire.HEADERS, wire.END_HEADERS, 1, b"\xc6"), wire.COMPRESSION_ERROR),
    "HPACK index 0": (_frame(wire.HEADERS, wire.END_HEADERS, 1, b"\x80"), wire.COMPRESSION_ERROR),
    "HPACK truncated integer": (_frame(wire.HEADERS, wire.END_HEADERS, 1, b"\x7f"), wire.COMPRESSION_ERROR),
    "HPACK truncated literal": (_frame(wire.HEADERS, wire.END_HEADERS, 1, b"\x00\x85ab"), wire.COMPRESSION_ERROR),
    "HPACK bad huffman": (_frame(wire.HEADERS, wire.END_HEADERS, 1, b"\x00\x81\xff\x00"), wire.COMPRESSION_ERROR),
    "HPACK table size beyond the allowed": (
        _frame(wire.HEADERS, wire.END_HEADERS, 1, _size_update(8192) + _GOOD),
        wire.COMPRESSION_ERROR,
    ),
    "HPACK table size update after a header": (
        _frame(wire.HEADERS, wire.END_HEADERS, 1, _GOOD + _size_update(0)),
        wire.COMPRESSION_ERROR,
    ),
    "HPACK error in a CONTINUATION": (
        _frame(wire.HEADERS, 0, 1, _GOOD) + _frame(wire.CONTINUATION, wire.END_HEADERS, 1, b"\xc6"),
        wire.COMPRESSION_ERROR,
    ),
}


@pytest.mark.parametrize("bad,code", list(_VIOLATIONS.values()), ids=list(_VIOLATIONS))
def test_framing_violation_raises_with_code_and_before(bad: bytes, code: int) -> None:
    """A framing violation raises FrameError(code), carries the frames completed before it, and the reader then goes quiet."""
    good_block = _frame(wire.HEADERS, wire.END_HEADERS | wire.END_STREAM, 1, _GOOD)
    prefix = wire.PREFACE + SETTINGS_FRAME + PING_FRAME + good_block
    reader = FrameReader(expect_preface=True)
    with pytest.raises(FrameError) as info:
        reader.feed(prefix + bad + PING_FRAME)
    assert info.value.code == code
    assert _norm(info.value.before) == [
        (-1, 0, 0, None, wire.PREFACE),
        (wire.SETTINGS, 0, 0, SETTINGS_FRAME[9:], SETTINGS_FRAME),
        (wire.PING, 0, 0, b"12345678", PING_FRAME),
        (wire.HEADERS, wire.END_STREAM, 1, [(b"x-a", b"b")], good_block),
    ]
    assert reader.failed
    assert reader.feed(PING_FRAME) == []
    assert reader.feed(b"") == []
    assert reader.feed(wire.PREFACE + PING_FRAME) == []


def test_violation_in_a_later_read_carries_only_that_reads_frames() -> None:
    """`.before` holds the frames completed in the failing feed only; earlier reads were already returned."""
    reader = FrameReader(expect_preface=False)
    assert len(reader.feed(PING_FRAME + PING_FRAME[:5])) == 1
    with pytest.raises(FrameError) as info:
        reader.feed(PING_FRAME[5:] + _frame(wire.DATA, 0, 0, b"x"))
    assert info.value.code == wire.PROTOCOL_ERROR
    assert _norm(info.value.before) == [(wire.PING, 0, 0, b"12345678", PING_FRAME)]


def test_oversized_frame_fails_on_its_header_alone() -> None:
    """A frame header announcing more than max_frame fails at once, without waiting for the payload."""
    reader = FrameReader(expect_preface=False)
    with pytest.raises(FrameError) as info:
        reader.feed(_frame(wire.DATA, 0, 1, length=2**24 - 1))
    assert info.value.code == wire.FRAME_SIZE_ERROR


def test_max_frame_is_the_receivers_setting() -> None:
    """Raising max_frame admits a frame of that size; a frame of exactly max_frame always passes."""
    reader = FrameReader(expect_preface=False)
    exact = _frame(wire.DATA, 0, 1, bytes(wire.DEFAULT_MAX_FRAME))
    assert len(reader.feed(exact)) == 1
    reader.max_frame = 20000
    bigger = _frame(wire.DATA, 0, 1, bytes(20000))
    assert _norm(reader.feed(bigger)) == [(wire.DATA, 0, 1, bytes(20000), bigger)]


def test_header_block_beyond_max_header_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """A header block whose frames (headers included) exceed MAX_HEADER_BLOCK is refused (PROTOCOL_ERROR); exactly the limit passes."""
    block = wire.encode_block([(b"aaaaa", b"bbbbbbbb")])
    assert len(block) == 16
    at_limit = _frame(wire.HEADERS, 0, 1, block[:10]) + _frame(wire.CONTINUATION, wire.END_HEADERS, 1, block[10:])
    monkeypatch.setattr(wire, "MAX_HEADER_BLOCK", len(at_limit))
    reader = FrameReader(expect_preface=False)
    assert _norm(reader.feed(at_limit)) == [(wire.HEADERS, 0, 1, [(b"aaaaa", b"bbbbbbbb")], at_limit)]

    reader = FrameReader(expect_preface=False)
    over = _frame(wire.HEADERS, 0, 3, block[:10]) + _frame(wire.CONTINUATION, 0, 3, block[10:] + b"x")
    with pytest.raises(FrameError) as info:
        reader.feed(PING_FRAME + over + _frame(wire.CONTINUATION, wire.END_HEADERS, 3, b""))
    assert info.value.code == wire.PROTOCOL_ERROR
    assert _norm(info.value.before) == [(wire.PING, 0, 0, b"12345678", PING_FRAME)]
    assert reader.feed(PING_FRAME) == []


def test_empty_continuation_flood_is_bounded() -> None:
    """Endless empty CONTINUATIONs count their 9-byte headers: refused before MAX_HEADER_BLOCK bytes are held."""
    reader = FrameReader(expect_preface=False)
    reader.feed(_frame(wire.HEADERS, 0, 1, wire.encode_block([(b"a", b"b")])))
    empty = _frame(wire.CONTINUATION, 0, 1, b"") * 4096
    with pytest.raises(FrameError) as info:
        for _ in range(wire.MAX_HEADER_BLOCK // len(empty) + 2):
            reader.feed(empty)
    assert info.value.code == wire.PROTOCOL_ERROR


def test_bad_data_padding_fails_in_the_reader() -> None:
    """Padded DATA passes as is when valid; padding as long as the frame (or no pad length) fails in the reader itself."""
    ok = _frame(wire.DATA, wire.PADDED | wire.END_STREAM, 1, b"\x03abcPPP")
    frames = FrameReader(expect_preface=False).feed(ok)
    assert [f[0] for f in frames] == [wire.DATA]
    assert bytes(wire.data_payload(frames[0][1], _mv(frames[0][3]))) == b"abc"
    for bad in (b"\x04abc", b""):
        with pytest.raises(FrameError) as info:
            FrameReader(expect_preface=False).feed(ok + _frame(wire.DATA, wire.PADDED, 1, bad))
        assert info.value.code == wire.PROTOCOL_ERROR
        assert [f[0] for f in info.value.before] == [wire.DATA]
    # pad length == payload length - 1: all padding, no data
    assert bytes(wire.data_payload(wire.PADDED, memoryview(b"\x03abc"))) == b""
    # not PADDED: the payload is the data, whatever its first byte
    assert bytes(wire.data_payload(0, memoryview(b"\xffab"))) == b"\xffab"


def test_header_fragment_strips_padding_and_priority() -> None:
    """header_fragment removes the pad length, the padding and the 5 priority bytes, nothing else."""
    frag = b"\x82\x86"
    assert bytes(wire.header_fragment(0, memoryview(frag))) == frag
    assert bytes(wire.header_fragment(wire.PADDED, memoryview(b"\x02" + frag + b"PP"))) == frag
    assert bytes(wire.header_fragment(wire.PRIORITY_FLAG, memoryview(bytes(5) + frag))) == frag
    both = b"\x03" + b"\x80\0\0\x01\x10" + frag + b"PPP"
    assert bytes(wire.header_fragment(wire.PADDED | wire.PRIORITY_FLAG, memoryview(both))) == frag
    # all padding: an empty fragment, which is legal
    assert bytes(wire.header_fragment(wire.PADDED, memoryview(b"\x03abc"))) == b""


def test_padded_priority_headers_decode_through_the_reader() -> None:
    """A HEADERS frame with padding and priority decodes its fragment only; raw keeps the frame as sent."""
    f = _frame(wire.HEADERS, wire.END_HEADERS | wire.PADDED | wire.PRIORITY_FLAG, 5, b"\x02" + bytes(5) + _GOOD + b"PP")
    assert _norm(FrameReader(expect_preface=False).feed(f)) == [(wire.HEADERS, 0, 5, [(b"x-a", b"b")], f)]


_RANDOM_FRAMES = st.lists(
    st.tuples(
        st.one_of(st.integers(0, 10), st.just(0xFA)),
        st.integers(0, 255),
        st.sampled_from([0, 1, 3, 0x80000001]),
        st.binary(max_size=40),
    ),
    max_size=8,
).map(lambda fs: b"".join(_frame(*f) for f in fs))


def _outcome(reader: FrameReader, stream: bytes, cuts: list[int]) -> tuple[list[Any], int | None]:
    """Frames read (the completed ones before an error included) and the error code, if any."""
    got: list[Frame] = []
    prev = 0
    for c in [*sorted(c for c in cuts if c <= len(stream)), len(stream)]:
        try:
            got += reader.feed(stream[prev:c])
        except FrameError as e:
            return _norm(got + e.before), e.code
        prev = c
    return _norm(got), None


@settings(max_examples=200, deadline=None)
@given(st.one_of(_RANDOM_FRAMES, st.binary(max_size=400)), st.lists(st.integers(0, 450), max_size=6))
def test_random_frames_any_chunking_same_frames_same_error(junk: bytes, cuts: list[int]) -> None:
    """For any bytes after the preface, chunking changes neither the frames nor the error; only FrameError is raised."""
    stream = wire.PREFACE + junk
    whole, reader = FrameReader(expect_preface=True), FrameReader(expect_preface=True)
    whole.max_frame = reader.max_frame = 30
    expected = _outcome(whole, stream, [])
    assert _outcome(reader, stream, cuts) == expected
    assert expected[1] in {None, wire.PROTOCOL_ERROR, wire.FRAME_SIZE_ERROR, wire.COMPRESSION_ERROR}
    # Verbatim: what came out is the input's beginning (the rest is a partial frame or header block).
    assert stream.startswith(b"".join(f[4] for f in expected[0]))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_hpack_block_decodes_or_is_a_compression_error(block: bytes) -> None:
    """Any bytes as a header block either decode or raise COMPRESSION_ERROR, never another exception."""
    reader = FrameReader(expect_preface=False)
    try:
        (got,) = reader.feed(_frame(wire.HEADERS, wire.END_HEADERS, 1, block))
    except FrameError as e:
        assert e.code == wire.COMPRESSION_ERROR
    else:
        assert got[0] == wire.HEADERS


# ---------------------------------------------------------------------------------------------
# 5. the connection preface
# ---------------------------------------------------------------------------------------------


def test_partial_preface_waits() -> None:
    """The preface fed a byte at a time yields nothing until complete, then the preface tuple and what follows."""
    reader = FrameReader(expect_preface=True)
    for b in wire.PREFACE[:-1]:
        assert reader.feed(bytes([b])) == []
    frames = reader.feed(wire.PREFACE[-1:] + PING_FRAME[:4])
    assert _norm(frames) == [(-1, 0, 0, None, wire.PREFACE)]
    assert _norm(reader.feed(PING_FRAME[4:])) == [(wire.PING, 0, 0, b"12345678", PING_FRAME)]


def test_empty_read_before_preface_waits() -> None:
    """An empty read before the preface neither fails nor yields."""
    reader = FrameReader(expect_preface=True)
    assert reader.feed(b"") == []
    assert len(reader.feed(wire.PREFACE)) == 1


@pytest.mark.parametrize(
    "reads",
    [
        [b"GET / HTTP/1.1\r\n"],
        [b"PRI * HTTP/1.1"],
        [b"\x16\x03\x01\x02\x00"],  # a TLS ClientHello to a plaintext port
        [b"PRI * ", b"HTTP/1.1"],
        [wire.PREFACE[:-1] + b"X"],
        [PING_FRAME * 3],
    ],
    ids=["http1", "wrong-version", "tls", "second-read", "last-byte", "no-preface"],
)
def test_wrong_preface_fails_at_once(reads: list[bytes]) -> None:
    """A read that cannot begin the preface fails at once (PROTOCOL_ERROR), even when shorter than the preface."""
    reader = FrameReader(expect_preface=True)
    for r in reads[:-1]:
        assert reader.feed(r) == []
    with pytest.raises(FrameError) as info:
        reader.feed(reads[-1])
    assert info.value.code == wire.PROTOCOL_ERROR
    assert info.value.before == []
    assert reader.feed(wire.PREFACE) == []


def test_server_side_reader_expects_no_preface() -> None:
    """A reader with expect_preface=False reads frames from the first byte."""
    assert _norm(FrameReader(expect_preface=False).feed(PING_FRAME)) == [(wire.PING, 0, 0, b"12345678", PING_FRAME)]


# ---------------------------------------------------------------------------------------------
# 6. allow_table_size and table-size updates
# ---------------------------------------------------------------------------------------------


def test_allow_table_size_only_grows() -> None:
    """allow_table_size raises the decoder's allowed size and never lowers it."""
    reader = FrameReader(expect_preface=False)
    assert reader.decoder.max_allowed_table_size == wire.DEFAULT_TABLE_SIZE
    reader.allow_table_size(1000)
    assert reader.decoder.max_allowed_table_size == wire.DEFAULT_TABLE_SIZE
    reader.allow_table_size(8192)
    assert reader.decoder.max_allowed_table_size == 8192
    reader.allow_table_size(0)
    assert reader.decoder.max_allowed_table_size == 8192


def test_table_size_update_in_a_block_decodes() -> None:
    """A block opening with table-size updates within the allowed size decodes, and the table follows them."""
    reader = FrameReader(expect_preface=False)
    block = _size_update(0) + _size_update(4096) + wire.encode_block([(b"x-a", b"b")])
    (got,) = reader.feed(_frame(wire.HEADERS, wire.END_HEADERS, 1, block))
    assert _hdrs(got[3]) == [(b"x-a", b"b")]
    assert reader.decoder.header_table_size == 4096


def test_bigger_table_needs_allow_table_size() -> None:
    """An encoder growing its table past 4096 is refused until allow_table_size, then decodes; shrinking the advert later does not break it."""
    encoder = hpack.Encoder()
    encoder.header_table_size = 8192
    headers = [(b"x-a", b"b" * 5000)]  # only fits a table larger than 4096
    block = encoder.encode(headers)
    assert block.startswith(_size_update(8192))
    frames = _frame(wire.HEADERS, wire.END_HEADERS, 1, block)

    with pytest.raises(FrameError) as info:
        FrameReader(expect_preface=False).feed(frames)
    assert info.value.code == wire.COMPRESSION_ERROR

    reader = FrameReader(expect_preface=False)
    reader.allow_table_size(8192)
    (got,) = reader.feed(frames)
    assert _hdrs(got[3]) == headers
    reader.allow_table_size(1024)  # the receiver lowers its advert: the sender may not have seen it yet
    again = encoder.encode(headers)
    assert len(again) < 10  # indexed from the 8192-byte table
    (got,) = reader.feed(_frame(wire.HEADERS, wire.END_HEADERS, 3, again))
    assert _hdrs(got[3]) == headers


# ---------------------------------------------------------------------------------------------
# 7. other frames pass through
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sid", [0, 5])
def test_unknown_frame_type_passes_through(sid: int) -> None:
    """An unknown frame type (0xFA) is an ordinary tuple, on any stream, with any flags and payload."""
    f = _frame(0xFA, 0xFF, sid, b"whatever")
    empty = _frame(0xFB, 0, sid)
    frames = FrameReader(expect_preface=False).feed(f + empty + PING_FRAME)
    assert _norm(frames) == [
        (0xFA, 0xFF, sid, b"whatever", f),
        (0xFB, 0, sid, b"", empty),
        (wire.PING, 0, 0, b"12345678", PING_FRAME),
    ]


def test_reserved_stream_bit_is_ignored_but_forwarded() -> None:
    """The reserved high bit of the stream id is masked off the id but kept in the raw bytes."""
    f = _frame(wire.DATA, 0, 0x80000001, b"x")
    assert _norm(FrameReader(expect_preface=False).feed(f)) == [(wire.DATA, 0, 1, b"x", f)]


def test_builders_read_back() -> None:
    """frame, rst_stream, goaway, window_update and a PRIORITY frame read back as what they say."""
    data = (
        wire.rst_stream(3, wire.CANCEL)
        + wire.goaway(7, wire.NO_ERROR, b"bye")
        + wire.window_update(0, 1000)
        + wire.window_update(5, 2**31 - 1)
        + wire.frame(wire.PRIORITY, 0, 9, bytes(5))
        + wire.frame(wire.SETTINGS, wire.ACK, 0)
    )
    frames = FrameReader(expect_preface=False).feed(data)
    assert [(f[0], f[1], f[2], bytes(_mv(f[3]))) for f in frames] == [
        (wire.RST_STREAM, 0, 3, wire.CANCEL.to_bytes(4, "big")),
        (wire.GOAWAY, 0, 0, (7).to_bytes(4, "big") + bytes(4) + b"bye"),
        (wire.WINDOW_UPDATE, 0, 0, (1000).to_bytes(4, "big")),
        (wire.WINDOW_UPDATE, 0, 5, (2**31 - 1).to_bytes(4, "big")),
        (wire.PRIORITY, 0, 9, bytes(5)),
        (wire.SETTINGS, wire.ACK, 0, b""),
    ]
    assert b"".join(bytes(f[4]) for f in frames) == data


def test_settings_values() -> None:
    """settings_values reads the (identifier, value) pairs of a SETTINGS payload, in order."""
    payload = b"".join(i.to_bytes(2, "big") + v.to_bytes(4, "big") for i, v in [(1, 65536), (5, 2**24 - 1), (0xFF, 7)])
    assert wire.settings_values(memoryview(payload)) == [(1, 65536), (5, 2**24 - 1), (0xFF, 7)]
    assert wire.settings_values(memoryview(b"")) == []


def test_only_small_header_blocks_are_remembered() -> None:
    """A large block that changes no HPACK state is decoded but not kept (a client cannot fill memory with them)."""
    reader = FrameReader(expect_preface=False)
    small = wire.encode_block([(b"x-a", b"1")])
    large = wire.encode_block([(b"x-big", b"y" * 4000)])
    reader.feed(_frame(wire.HEADERS, wire.END_HEADERS, 1, small) + _frame(wire.HEADERS, wire.END_HEADERS, 3, large))
    assert list(reader._seen) == [small]


_CACHED_FIELDS = [(b"x-a", b"1"), (b"x-b", b"2"), (b"x-c", b"33")]


def _hpack_op(op: tuple[str, int]) -> bytes:
    """One HPACK representation written by hand (hpack's Encoder mishandles a table size set twice
    between blocks): a literal field added to the table, an indexed dynamic-table field, a size update."""
    kind, n = op
    if kind == "add":
        name, value = _CACHED_FIELDS[n]
        return b"\x40" + bytes([len(name)]) + name + bytes([len(value)]) + value
    if kind == "index":
        return bytes([0x80 | (62 + n)])
    if n < 31:
        return bytes([0x20 | n])
    out, n = [0x3F], n - 31  # a 5-bit prefix, then 7 bits a byte (RFC 7541 5.1)
    while n >= 128:
        out.append(0x80 | n % 128)
        n //= 128
    return bytes([*out, n])


_BLOCKS = st.tuples(
    st.sampled_from([[]] * 5 + [[("size", 40)], [("size", 80)], [("size", 4096)], [("size", 0), ("size", 80)],
                                [("size", 40), ("size", 4096)]]),  # two in a block: the smallest, then the last
    st.sampled_from([[("index", 0)], [("index", 1)], [("index", 1)], [("index", 2)], [("add", 0)], [("add", 1)],
                     [("add", 2)], [("add", 0), ("index", 1)]]),
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(_BLOCKS, min_size=1, max_size=30))
# Each example pins one way a remembered block's table can differ from the table now (the preamble below
# leaves entries 0, 1, 2 with 0 in front):
# - fewer entries: a shrink evicts from the back and the size comes back in the same block;
@example([([], [("index", 1)]), ([("size", 40), ("size", 4096)], [("index", 0)]), ([], [("index", 1)])])
# - another front entry, as many entries: at 40 bytes an added field evicts the one before;
@example([([("size", 40)], [("index", 0)]), ([], [("index", 0)]), ([], [("add", 1)]), ([], [("index", 0)])])
# - another size: a size update to the size in force changes nothing, so the block is remembered; met
#   at another size, it must set that size again (and the next field added evicts at 80 bytes).
@example([([("size", 80)], [("index", 0)]), ([("size", 80)], [("index", 0)]), ([("size", 4096)], [("index", 0)]),
          ([("size", 80)], [("index", 0)]), ([], [("add", 2)]), ([], [("index", 2)])])  # fmt: skip
def test_a_remembered_block_is_decoded_again_once_the_table_changed(blocks: list[Any]) -> None:
    """The same block bytes mean other headers after the HPACK table changed (an entry added, evicted, the
    table resized): the reader's remembered blocks always decode as a fresh decoder does, or fail as it
    does. Small tables make a repeat with the same entry count but another entry likely (40 bytes hold
    one of these fields)."""
    reference = hpack.Decoder()
    reader = FrameReader(expect_preface=False)
    blocks = [([], [("add", 2), ("add", 1), ("add", 0)]), *blocks]  # a table to index into from the start
    for sid, (sizes, ops) in enumerate(blocks):
        block = b"".join(_hpack_op(op) for op in [*sizes, *ops])
        seen = reader._seen.get(block)
        try:
            expect = [tuple(h) for h in reference.decode(block, raw=True)]
        except hpack.HPACKError:
            with pytest.raises(FrameError):
                reader.feed(_frame(wire.HEADERS, wire.END_HEADERS, 2 * sid + 1, block))
            return
        if seen is not None:
            event("a remembered block: " + ("same headers" if _hdrs(seen[3]) == expect else "other headers now"))
        (got,) = reader.feed(_frame(wire.HEADERS, wire.END_HEADERS, 2 * sid + 1, block))
        assert _hdrs(got[3]) == expect


def test_a_repeated_block_is_handed_out_as_the_same_block() -> None:
    """While the table stays as it was, the same bytes give the same Block object: what the relay derives
    from it (proxy.wire.headers.Block) is worked out once."""
    reader = FrameReader(expect_preface=False)
    block = wire.encode_block([(b":status", b"200"), (b"content-type", b"application/grpc")])
    (a,) = reader.feed(_frame(wire.HEADERS, wire.END_HEADERS, 1, block))
    (b,) = reader.feed(_frame(wire.HEADERS, wire.END_HEADERS, 3, block))
    assert type(a[3]) is Block and a[3] is b[3]


def test_a_short_data_payload_is_copied_and_a_long_one_is_a_view_of_the_read() -> None:
    """What the message cutter reads fastest for the common short frame; a long frame is never copied here."""
    reader = FrameReader(expect_preface=False)
    short, long = b"s" * 4096, b"l" * 4097
    read = _frame(wire.DATA, 0, 1, short) + _frame(wire.DATA, 0, 1, long)
    (_, _, _, a, _), (_, _, _, b, _) = reader.feed(read)
    assert type(a) is bytes and a == short
    assert isinstance(b, memoryview) and b.obj is read and bytes(b) == long

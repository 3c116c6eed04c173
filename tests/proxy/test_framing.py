"""gRPC message framing over arbitrary DATA chunking, and the h2 overrides the relay depends on."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hpack
import hyperframe.frame
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.relay import Assembler, PatchedH2Connection


def _frame(body: bytes, flag: int = 0) -> bytes:
    return bytes([flag]) + len(body).to_bytes(4, "big") + body


@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=8),
    st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=50),
    st.integers(min_value=1, max_value=400),
)
def test_any_chunking_yields_the_same_messages(bodies: list[bytes], cuts: list[int], keep: int) -> None:
    """However DATA is split, every message comes out once, whole or cut at `keep` (and says so)."""
    wire = b"".join(_frame(b) for b in bodies)
    asm = Assembler(keep=keep, hashing=True)
    out = []
    i = 0
    for c in cuts * (len(wire) // max(1, sum(cuts)) + 1):
        if i >= len(wire):
            break
        out += asm.feed(wire[i : i + c])
        i += c
    out += asm.feed(wire[i:])
    assert [(length, body, trunc) for _, length, body, trunc, _ in out] == [
        (len(b), b[:keep], len(b) > keep) for b in bodies
    ]
    assert not asm.partial


def _pair(patched: bool) -> tuple[h2.connection.H2Connection, h2.connection.H2Connection]:
    cfg = h2.config.H2Configuration
    client_cls = PatchedH2Connection if patched else h2.connection.H2Connection
    client = client_cls(config=cfg(client_side=True, header_encoding=None))
    server = PatchedH2Connection(config=cfg(client_side=False, header_encoding=None))
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    return client, server


REQ = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/x"), (b":authority", b"a")]


@pytest.mark.parametrize("patched", [True, False])
def test_goaway_lets_open_streams_drain(patched: bool) -> None:
    """With the patch, data after a GOAWAY (sent and received) still flows on a stream it kept; h2 alone fails."""
    client, server = _pair(patched)
    client.send_headers(1, REQ, end_stream=True)
    server.receive_data(client.data_to_send())
    server.send_headers(1, [(b":status", b"200")])
    server.close_connection(last_stream_id=1)
    server.send_data(1, b"late", end_stream=True)
    wire = server.data_to_send()
    if patched:
        events = client.receive_data(wire)
        assert any(isinstance(e, h2.events.DataReceived) and e.data == b"late" for e in events)
    else:
        with pytest.raises(h2.exceptions.ProtocolError):
            client.receive_data(wire)


@pytest.mark.parametrize("patched", [True, False])
def test_frame_after_end_stream_is_a_stream_error(patched: bool) -> None:
    """With the patch, a HEADERS frame on a stream closed by END_STREAM costs that stream, not the connection."""
    client, server = _pair(patched)
    client.send_headers(1, REQ, end_stream=True)
    server.receive_data(client.data_to_send())
    server.send_headers(1, [(b":status", b"200")], end_stream=True)
    client.receive_data(server.data_to_send())
    # A late HEADERS frame on the closed stream 1 (h2 itself already treats late DATA leniently).
    frame = hyperframe.frame.HeadersFrame(1)
    frame.data = hpack.Encoder().encode([(b"grpc-status", b"0")])
    frame.flags.add("END_HEADERS")
    late = frame.serialize()
    if patched:
        client.receive_data(late)
        out = client.data_to_send()
        assert out[3] == 0x03  # RST_STREAM, not GOAWAY
    else:
        with pytest.raises(h2.exceptions.StreamClosedError):
            client.receive_data(late)

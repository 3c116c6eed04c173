"""`replay send` after the server's GOAWAY: the calls the server keeps are read to the end it gives them.

A GOAWAY promises that the calls up to its last stream id may still complete (RFC 9113 6.8); a gRPC
server shutting down gracefully (tritonserver on SIGTERM) sends GOAWAY(NO_ERROR) and lets them finish.
What a real tritonserver does is tested in tests/e2e/test_send_goaway_e2e.py. The peers here are
scripted (tests/proxy/resend/scripted_peer.py) for what it cannot be made to do on demand: a GOAWAY and
the frames around it in one TCP read, a call above the last stream id, and an error GOAWAY with frames
after it in the same read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from proxy.resend.h2client import LOST, NOT_SENT, REFUSED, STATUS, Connection, Stream
from proxy.wire import frames as wire
from tests.proxy.resend.scripted_peer import PeerConn, ScriptedPeer, stray_data, stray_trailers
from tests.support.aio import until

pytestmark = pytest.mark.timeout(60)

HEADERS = [(":method", "POST"), (":scheme", "http"), (":path", "/inference.GRPCInferenceService/ModelStreamInfer"),
           (":authority", "peer"), ("content-type", "application/grpc"), ("te", "trailers")]  # fmt: skip
RESPONSE_HEADERS = [(":status", "200"), ("content-type", "application/grpc")]


async def _call(conn: Connection, half_close: bool = True) -> Stream:
    """A call with one (empty) request message, half-closed or left open."""
    stream = conn.start(HEADERS)
    await conn.send_message(stream, b"", compressed=False)
    if half_close:
        conn.half_close(stream)
    return stream


def _with_peer(act: Callable[[PeerConn, int], None], body: Callable[[Connection, ScriptedPeer], Awaitable[None]],
               on_open: Callable[[PeerConn, int], None] = lambda c, sid: None) -> None:  # fmt: skip
    async def main() -> None:
        peer = ScriptedPeer(act, on_open=on_open)
        port = await peer.start()
        conn = Connection("127.0.0.1", port, "c1")
        try:
            await conn.open()
            await body(conn, peer)
        finally:
            await conn.close()
            await peer.stop()

    asyncio.run(main())


def _ended(*streams: Stream) -> Awaitable[object]:
    return asyncio.wait_for(asyncio.gather(*(s.done.wait() for s in streams)), 10)


def test_a_call_below_a_graceful_goaway_ends_with_its_status_from_the_same_read() -> None:
    """Call 1 (stream 1) is answered when call 2 (stream 3) arrives, in one write, so one read: its response
    headers and message, GOAWAY(NO_ERROR, last stream id 1), then its trailers. h2 refused every frame after
    the GOAWAY and, raising, dropped what it had decoded before it in that read: call 1 was `connection lost`
    with no response. Now it ends with its status and its message counted; call 2, above the last stream id,
    was never processed; a call due after the GOAWAY is not sent on that connection."""

    def act(c: PeerConn, sid: int) -> None:
        if sid == 3:
            c.h2.send_headers(1, RESPONSE_HEADERS)
            c.transport.write(c.h2.data_to_send() + stray_data(1) + wire.goaway(1, wire.NO_ERROR) + stray_trailers(1, 0))

    async def body(conn: Connection, peer: ScriptedPeer) -> None:
        kept, refused = await _call(conn), await _call(conn)
        await _ended(kept, refused)
        assert (kept.id, kept.outcome, kept.status, kept.responses) == (1, STATUS, "0", 1), (kept.outcome, kept.why)
        assert (refused.id, refused.outcome, refused.responses) == (3, REFUSED, 0)
        assert refused.why == "GOAWAY NO_ERROR (stream 3 above its last stream id 1)"
        later = conn.start(HEADERS)
        assert (later.id, later.outcome) == (0, NOT_SENT)
        assert later.why == "GOAWAY NO_ERROR: the server takes no new call on this connection"
        assert peer.conns[0].requests == 2

    _with_peer(act, body)


def test_a_call_kept_by_a_graceful_goaway_still_sends_and_gets_its_answer() -> None:
    """The GOAWAY(NO_ERROR) comes while the call is open and its client has more to send (a stream, as
    tritonserver's shutdown leaves it): its request message and half-close still go out after the GOAWAY,
    and the server's answer to them ends the call. (It was `connection lost` at the GOAWAY.)"""

    def on_open(c: PeerConn, sid: int) -> None:
        c.h2.send_headers(sid, RESPONSE_HEADERS)
        c.raw(wire.goaway(sid, wire.NO_ERROR))

    def act(c: PeerConn, sid: int) -> None:  # the client's half-close: its answer
        c.raw(stray_data(sid) + stray_trailers(sid, 0))

    async def body(conn: Connection, peer: ScriptedPeer) -> None:
        stream = conn.start(HEADERS)
        await until(lambda: conn.lost is not None or stream.done.is_set(), "the GOAWAY")
        assert not stream.done.is_set(), (stream.outcome, stream.why)
        await conn.send_message(stream, b"", compressed=False)
        conn.half_close(stream)
        await _ended(stream)
        assert (stream.outcome, stream.status, stream.responses) == (STATUS, "0", 1), (stream.outcome, stream.why)

    _with_peer(act, body, on_open)


def test_an_error_goaway_keeps_what_came_before_it_in_the_same_read() -> None:
    """One read: call 1's whole answer, GOAWAY(INTERNAL_ERROR, last stream id 3), then a message on call 2.
    The connection is over (send closes it; call 2, which the server may have processed, is lost), but call
    1's answer, decoded before the GOAWAY, counts. (h2 raised for the frame after the GOAWAY, and call 1 was
    lost with it.)"""

    def act(c: PeerConn, sid: int) -> None:
        if sid == 3:
            c.h2.send_headers(1, RESPONSE_HEADERS)
            answer = c.h2.data_to_send() + stray_data(1) + stray_trailers(1, 0)
            c.h2.send_headers(3, RESPONSE_HEADERS)
            c.transport.write(answer + wire.goaway(3, wire.INTERNAL_ERROR, b"bye") + c.h2.data_to_send() + stray_data(3))

    async def body(conn: Connection, peer: ScriptedPeer) -> None:
        answered, lost = await _call(conn), await _call(conn)
        await _ended(answered, lost)
        assert (answered.outcome, answered.status, answered.responses) == (STATUS, "0", 1), answered.why
        assert (lost.outcome, lost.why) == (LOST, "GOAWAY INTERNAL_ERROR (bye) ended the connection")
        await until(lambda: conn.closed, "send to close the connection")

    _with_peer(act, body)


def test_a_protocol_error_keeps_what_came_before_it_in_the_same_read() -> None:
    """One read: call 1's whole answer, then a message on call 2 before its response headers (a connection
    error). The connection is lost with call 2, but call 1's answer, decoded before the bad frame, counts.
    (h2 raised, dropping the events of the read, and call 1 was lost too.)"""

    def act(c: PeerConn, sid: int) -> None:
        if sid == 3:
            c.h2.send_headers(1, RESPONSE_HEADERS)
            c.transport.write(c.h2.data_to_send() + stray_data(1) + stray_trailers(1, 0) + stray_data(3))

    async def body(conn: Connection, peer: ScriptedPeer) -> None:
        answered, lost = await _call(conn), await _call(conn)
        await _ended(answered, lost)
        assert (answered.outcome, answered.status, answered.responses) == (STATUS, "0", 1), answered.why
        assert lost.outcome == LOST and (lost.why or "").startswith("HTTP/2 protocol error"), lost.why

    _with_peer(act, body)

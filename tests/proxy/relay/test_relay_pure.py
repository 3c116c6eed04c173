"""The relay's edge cases, driven without sockets: a real h2 client and h2 server around a Tunnel.

Each test pins one defect found in review of the verbatim relay (memory a peer could pin or grow,
causes, frame order and GOAWAY rules of RFC 9113, peer input that must never become proxy_error).
The transports are in-memory fakes because these cases need exact control over which bytes arrive
in which read, and when a peer goes away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest

from proxy.relay import closing, from_client
from proxy.relay.call import LABEL_KEEP
from proxy.relay.from_client import ENHANCE_YOUR_CALM
from proxy.relay.options import REDACTED
from proxy.relay.refuser import Refuser
from proxy.relay.relay import Relay
from proxy.relay.tunnel import Tunnel
from proxy.wire import frames as wire
from proxy.wire.messages import Assembler
from tests.support.transport import MemoryTransport

REQ = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
       (b":authority", b"x"), (b"content-type", b"application/grpc"), (b"te", b"trailers")]  # fmt: skip


def _h2(client: bool) -> h2.connection.H2Connection:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=client, header_encoding=None))
    conn.initiate_connection()
    return conn


class _Rig:
    """client h2 <-> Tunnel <-> server h2 (or raw bytes on either side)."""

    def __init__(self, server: bool = True) -> None:
        self.records: list[Any] = []
        self.relay = Relay(("127.0.0.1", 1), self.records.append)
        self.t = Tunnel(self.relay, "c1")
        self.relay.tunnels.add(self.t)
        self.dt, self.ut = MemoryTransport(), MemoryTransport()
        self.t.down.transport = self.dt
        self.t.peer = "127.0.0.1:40000"
        self.t.up.connection_made(self.ut)
        self.client = _h2(True)
        self.server = _h2(False) if server else None

    def down(self, data: bytes) -> None:
        self.t.side_data(self.t.down, data)

    def up(self, data: bytes) -> None:
        self.t.side_data(self.t.up, data)

    def one_call(self, got: list[Any]) -> None:
        """The client opens one call (HEADERS ending its stream); bytes go to and fro a few times, its events into ``got``."""
        sid = self.client.get_next_available_stream_id()
        self.client.send_headers(sid, REQ, end_stream=True)
        for _ in range(5):
            if data := self.client.data_to_send():
                self.down(data)
            if self.dt.out:
                got.extend(self.client.receive_data(self.dt.take()))

    def pump(self, client_reads: bool = True) -> None:
        """Move bytes until quiet (the client may be told not to read what it is sent)."""
        for _ in range(100):
            moved = False
            for data, feed in ((self.client.data_to_send(), self.down),
                               (self.server.data_to_send() if self.server else b"", self.up)):  # fmt: skip
                if data:
                    feed(data)
                    moved = True
            if client_reads and self.dt.out:
                for e in self.client.receive_data(self.dt.take()):
                    if isinstance(e, h2.events.DataReceived):
                        self.client.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                moved = True
            if self.server is not None and self.ut.out:
                for e in self.server.receive_data(self.ut.take()):
                    if isinstance(e, h2.events.DataReceived):
                        self.server.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                moved = True
            if not moved:
                return
        raise AssertionError("bytes kept moving")

    def open_call(self, headers: list[tuple[bytes, bytes]] = REQ, end_stream: bool = True) -> int:
        """Settle the connection, open a call, settle again; its stream id."""
        self.pump()
        sid: int = self.client.get_next_available_stream_id()
        self.client.send_headers(sid, headers, end_stream=end_stream)
        self.pump()
        return sid

    def kinds(self) -> list[str]:
        return [r.kind for r in self.records]

    def of(self, kind: str) -> list[Any]:
        return [r for r in self.records if r.kind == kind]


def _frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    out, i = [], 0
    while i + 9 <= len(data):
        n = int.from_bytes(data[i : i + 3], "big")
        out.append((data[i + 3], data[i + 4], int.from_bytes(data[i + 5 : i + 9], "big"), data[i + 9 : i + 9 + n]))
        i += 9 + n
    return out


def _goaways(data: bytes) -> list[tuple[int, int]]:
    return [(int.from_bytes(p[:4], "big"), int.from_bytes(p[4:8], "big")) for t, _, _, p in _frames(data) if t == wire.GOAWAY]


@pytest.fixture(autouse=True)
def _loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The relay arms timers (linger close): it needs a running loop, as in the proxy."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()
    asyncio.set_event_loop(None)


def _in_loop(loop: asyncio.AbstractEventLoop, fn: Any) -> Any:
    async def run() -> Any:
        return fn()

    return loop.run_until_complete(run())


def test_a_tunnel_has_fewer_than_30_attributes(_loop: asyncio.AbstractEventLoop) -> None:
    """CPython shares one key table between a class's instances only up to 30 attributes; past that each
    tunnel gets a dict of its own and every ``self.x`` of the relay is looked up the slow way (one attribute
    more cost 4.7 % of the instructions per streamed response, ``python -m bench.icount``). Counted once
    calls have been relayed, so attributes set after ``__init__`` count too."""
    rig = _Rig()
    rig.pump()
    rig.one_call([])
    rig.pump()
    assert "call_start" in rig.kinds()
    assert len(vars(rig.t)) < 30, sorted(vars(rig.t))


def test_message_fragments_are_copied_not_views_of_the_read(_loop: asyncio.AbstractEventLoop) -> None:
    """A partial message keeps copies of its bytes, never a view that pins the whole read buffer."""
    asm = Assembler(LABEL_KEEP, False)
    read = bytes(5) + b"\x00\x00\x03\xe8" + b"x" * 10 + bytes(200_000)  # one read, message cut short
    asm.feed(memoryview(read)[5:19])
    assert asm._parts and all(type(p) is bytes for p in asm._parts)


def test_crossing_call_after_upstream_goaway_survives_the_linger(_loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call sent before the client read the upstream's GOAWAY(2^31-1) runs to its end; the connection closes after."""
    monkeypatch.setattr(closing, "_LINGER_S", 0.05)
    rig = _Rig()

    async def scenario() -> None:
        rig.pump()
        rig.up(wire.goaway(2**31 - 1, wire.NO_ERROR))
        sid = rig.client.get_next_available_stream_id()
        rig.client.send_headers(sid, REQ, end_stream=True)
        rig.pump(client_reads=False)
        await asyncio.sleep(0.2)  # several lingers: the call is still open
        assert not rig.dt.closed and list(rig.t.calls) == [sid]
        assert rig.server is not None
        rig.server.send_headers(sid, [(b":status", b"200"), (b"grpc-status", b"0")], end_stream=True)
        rig.pump(client_reads=False)
        for _ in range(100):
            if rig.dt.closed:
                break
            await asyncio.sleep(0.01)
        assert rig.dt.closed

    _loop.run_until_complete(scenario())
    (end,) = rig.of("call_end")
    assert end.cause == "ok"


def test_upstream_error_goaway_ends_calls_as_upstream_disconnect(_loop: asyncio.AbstractEventLoop) -> None:
    """An upstream GOAWAY with an error: the client's violation as judged upstream, calls upstream_disconnect, client closed."""
    rig = _Rig()

    def scenario() -> None:
        sid = rig.open_call()
        rig.up(wire.goaway(sid, wire.INTERNAL_ERROR, b"server bug"))
        rig.t.side_lost(rig.t.down, None)

    _in_loop(_loop, scenario)
    assert rig.dt.closed
    (violation,) = rig.of("protocol_error")
    assert violation.side == "client" and "GOAWAY INTERNAL_ERROR (server bug)" in violation.error
    assert [(r.kind, r.cause) for r in rig.records if r.kind in ("cancel", "call_end")] == [
        ("cancel", "upstream_disconnect"), ("call_end", "upstream_disconnect")]  # fmt: skip


@pytest.mark.parametrize("timeout", [b"\xb2m", b"1" * 5000 + b"m", b"123456789S"])
def test_malformed_grpc_timeout_is_no_timeout(_loop: asyncio.AbstractEventLoop, timeout: bytes) -> None:
    """A grpc-timeout gRPC does not allow (non-ASCII digit, too long) is recorded as no timeout, never a proxy error."""
    rig = _Rig()

    def scenario() -> None:
        rig.open_call([*REQ, (b"grpc-timeout", timeout)])

    _in_loop(_loop, scenario)
    (start,) = rig.of("call_start")
    assert start.timeout_ms is None and not rig.of("call_end")


def test_huge_grpc_status_is_unknown_not_a_proxy_error(_loop: asyncio.AbstractEventLoop) -> None:
    """An upstream grpc-status of 5000 digits ends the call as an error with status UNKNOWN."""
    rig = _Rig()

    def scenario() -> None:
        sid = rig.open_call()
        assert rig.server is not None
        rig.server.send_headers(sid, [(b":status", b"200"), (b"grpc-status", b"1" * 5000)], end_stream=True)
        rig.pump()

    _in_loop(_loop, scenario)
    (end,) = rig.of("call_end")
    assert (end.cause, end.status) == ("error", "UNKNOWN")


def test_proxy_speaks_settings_first_when_the_upstream_never_did(_loop: asyncio.AbstractEventLoop) -> None:
    """Upstream lost before its SETTINGS: the client gets an empty SETTINGS before the proxy's status; its ACK stays here."""
    rig = _Rig(server=False)

    def scenario() -> None:
        sid = rig.client.get_next_available_stream_id()
        rig.client.send_headers(sid, REQ, end_stream=True)
        rig.down(rig.client.data_to_send())
        rig.ut.take()
        rig.t.side_lost(rig.t.up, ConnectionResetError())
        sent = rig.dt.take()
        assert [f[0] for f in _frames(sent)] == [wire.SETTINGS, wire.HEADERS, wire.GOAWAY]
        rig.client.receive_data(sent)  # a valid server preface for h2: no error
        rig.down(rig.client.data_to_send())  # the client's SETTINGS ACK

    _in_loop(_loop, scenario)
    assert rig.ut.out == []  # the ACK of the proxy's SETTINGS never reaches the upstream
    (end,) = rig.of("call_end")
    assert end.cause == "upstream_disconnect"


def test_goaway_last_stream_id_never_increases(_loop: asyncio.AbstractEventLoop) -> None:
    """After the shutdown GOAWAY(1) and a refused crossing stream 3, a protocol error's GOAWAY still names 1."""
    rig = _Rig()

    def scenario() -> None:
        rig.open_call()
        rig.relay.begin_shutdown()
        s3 = rig.client.get_next_available_stream_id()
        rig.client.send_headers(s3, REQ, end_stream=True)
        rig.down(rig.client.data_to_send())
        rig.down(wire.frame(wire.PING, 0, 0, b"1234"))  # a framing error: PING of 4 bytes

    _in_loop(_loop, scenario)
    assert _goaways(rig.dt.take()) == [(1, wire.NO_ERROR), (1, wire.FRAME_SIZE_ERROR)]


def test_refuser_after_its_goaway_takes_a_ping_without_a_protocol_error(_loop: asyncio.AbstractEventLoop) -> None:
    """Upstream unreachable, then shutdown: a client PING afterwards is not a protocol violation."""
    rig = _Rig(server=False)

    def scenario() -> None:
        rig.t.refuser = Refuser(rig.t, "triton-tap: upstream 127.0.0.1:1 unreachable")
        rig.pump()
        rig.relay.begin_shutdown()
        rig.dt.take()
        rig.client.ping(b"12345678")
        rig.down(rig.client.data_to_send())

    _in_loop(_loop, scenario)
    assert not rig.of("protocol_error") and not rig.dt.closed


def test_bad_data_padding_is_never_forwarded(_loop: asyncio.AbstractEventLoop) -> None:
    """A DATA frame whose padding exceeds it is a client protocol error and never reaches the upstream."""
    rig = _Rig()

    def scenario() -> None:
        sid = rig.open_call(end_stream=False)
        rig.ut.take()
        rig.down(wire.frame(wire.DATA, wire.PADDED, sid, b"\x09abc"))

    _in_loop(_loop, scenario)
    assert wire.DATA not in [f[0] for f in _frames(rig.ut.take())]
    (violation,) = rig.of("protocol_error")
    assert violation.side == "client" and violation.error_code == wire.PROTOCOL_ERROR


def test_lowered_max_frame_size_binds_no_frame_already_in_flight(_loop: asyncio.AbstractEventLoop) -> None:
    """Upstream lowers SETTINGS_MAX_FRAME_SIZE: a larger client frame sent before the ACK is passed on, not an error."""
    rig = _Rig(server=False)

    def settings(value: int) -> bytes:
        return wire.frame(wire.SETTINGS, 0, 0, wire.SETTINGS_MAX_FRAME_SIZE.to_bytes(2, "big") + value.to_bytes(4, "big"))

    def scenario() -> None:
        rig.down(wire.PREFACE + wire.frame(wire.SETTINGS, 0, 0))
        rig.up(settings(1 << 20))
        rig.down(wire.frame(wire.SETTINGS, wire.ACK, 0))
        rig.up(settings(16384))
        rig.ut.take()
        rig.down(wire.frame(wire.DATA, 0, 1, bytes(65536)))

    _in_loop(_loop, scenario)
    assert not rig.of("protocol_error")
    assert len(rig.ut.take()) == 9 + 65536


def test_streams_opened_after_goaway_are_bounded(_loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that keeps opening streams after GOAWAY is refused each time, then cut off (ENHANCE_YOUR_CALM)."""
    monkeypatch.setattr(from_client, "KEPT_BACK_LIMIT", 5)
    rig = _Rig()

    def scenario() -> None:
        rig.pump()
        rig.relay.begin_shutdown()
        for i in range(7):
            block = wire.encode_block(REQ)
            rig.down(wire.frame(wire.HEADERS, wire.END_HEADERS, 2 * i + 1, block))

    _in_loop(_loop, scenario)
    (violation,) = rig.of("protocol_error")
    assert violation.error_code == ENHANCE_YOUR_CALM and rig.dt.closed
    assert len(rig.of("call_end")) == 5


def test_upstream_closing_before_http2_gives_calls_the_reason(_loop: asyncio.AbstractEventLoop) -> None:
    """Upstream closes before its SETTINGS (e.g. mTLS rejected us) and no call yet: each call gets UNAVAILABLE with why."""
    rig = _Rig(server=False)
    got: list[Any] = []

    def scenario() -> None:
        rig.down(rig.client.data_to_send())  # the client's preface and SETTINGS, forwarded
        rig.t.side_lost(rig.t.up, None)
        rig.one_call(got)

    _in_loop(_loop, scenario)
    (headers,) = [e for e in got if isinstance(e, h2.events.ResponseReceived)]
    trailers = dict(headers.headers)
    assert trailers[b"grpc-status"] == b"14" and b"before speaking HTTP/2" in trailers[b"grpc-message"]
    (end,) = rig.of("call_end")
    assert end.cause == "upstream_disconnect" and "before speaking HTTP/2" in end.details


@pytest.mark.parametrize("client_saw_settings", [True, False])
def test_upstream_breaking_http2_before_any_call_gives_calls_the_reason(
    _loop: asyncio.AbstractEventLoop, client_saw_settings: bool
) -> None:
    """Upstream sends its SETTINGS, then a frame no HTTP/2 peer may send, before the client's first call.

    Whether or not the client already read the upstream's SETTINGS, its call gets UNAVAILABLE with
    the reason, never a GOAWAY saying no call was processed: gRPC retries such calls on a new
    connection without limit, which met the same upstream each time until the call's deadline.
    """
    rig = _Rig()
    server = rig.server
    assert server is not None
    got: list[Any] = []

    def scenario() -> None:
        rig.down(rig.client.data_to_send())  # the client's preface and SETTINGS, forwarded
        server.receive_data(rig.ut.take())
        # SETTINGS, then DATA on stream 0 in the same read: a connection error for any client.
        rig.up(server.data_to_send() + wire.frame(wire.DATA, 0, 0, b"junk"))
        if client_saw_settings:
            got.extend(rig.client.receive_data(rig.dt.take()))
        rig.t.side_lost(rig.t.up, None)  # the proxy closed the upstream connection
        rig.one_call(got)

    _in_loop(_loop, scenario)
    assert not [e for e in got if isinstance(e, h2.events.ConnectionTerminated) and e.last_stream_id == 0], got
    (headers,) = [e for e in got if isinstance(e, h2.events.ResponseReceived)]
    trailers = dict(headers.headers)
    assert trailers[b"grpc-status"] == b"14" and b"upstream broke HTTP/2" in trailers[b"grpc-message"]
    (violation,) = rig.of("protocol_error")
    assert violation.side == "upstream"
    (end,) = rig.of("call_end")
    assert end.cause == "upstream_disconnect" and "frame type 0 on stream 0" in end.details


def test_upstream_closing_cleanly_before_any_call_sends_the_client_elsewhere(_loop: asyncio.AbstractEventLoop) -> None:
    """Upstream spoke HTTP/2, then closed (a restart, an idle timeout) before the client's first call.

    The client is told to open its calls on a new connection (GOAWAY), not failed: its next call
    may well reach a Triton that is back.
    """
    rig = _Rig()
    got: list[Any] = []

    def scenario() -> None:
        rig.pump()
        rig.t.side_lost(rig.t.up, None)
        got.extend(rig.client.receive_data(rig.dt.take()))

    _in_loop(_loop, scenario)
    (goaway,) = [e for e in got if isinstance(e, h2.events.ConnectionTerminated)]
    assert goaway.last_stream_id == 0 and goaway.error_code == 0
    assert not rig.of("call_end") and not rig.of("protocol_error")


def test_calls_repeating_a_header_block_are_recorded_alike(_loop: asyncio.AbstractEventLoop) -> None:
    """What a request block says is read once per block (proxy.wire.headers.Block): calls sending the same
    block get the same method, metadata and redaction, and a call whose block differs (another deadline)
    gets its own."""
    rig = _Rig()
    secret = [*REQ, (b"authorization", b"Bearer s3cret")]
    for headers in (secret, secret, secret, [*secret, (b"grpc-timeout", b"250m")], secret):
        rig.open_call(headers)
    starts = rig.of("call_start")
    assert [s.timeout_ms for s in starts] == [None, None, None, 250.0, None]
    assert all(s.method == "/inference.GRPCInferenceService/ModelInfer" for s in starts)
    assert [s.metadata for s in starts[:3]] == [starts[4].metadata] * 3
    assert starts[0].metadata[-1] == ["authorization", REDACTED]
    assert starts[3].metadata[-2:] == [["authorization", REDACTED], ["grpc-timeout", "250m"]]
    # the later blocks of the same headers were remembered (hpack indexes them), so the cache was used
    assert starts[1].metadata is starts[2].metadata

"""The relay's I/O shell: reads held for "connect" are kept, in order, until the upstream exists; each
read's steps are carried out (writes, then commands, then the next step).

Pure (recording stand-ins for the core, the connection and the transport): the behaviour this pins
was found with uvloop, which may deliver a read already under way after ``pause_reading`` was called
inside ``connection_made``; the bytes must neither be handled early (the upstream transport does not
exist yet, so they would be dropped) nor lost.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.relay.contract import Close, Output
from proxy.relay.shell import Side


class _Relay:
    def __init__(self, conn: _Connection) -> None:
        self.after: list[int] = []  # reads handled when after_read was called
        self.after_read = lambda: self.after.append(len(conn.got))


class _Connection:
    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.relay = _Relay(self)
        self.client: Any = None
        self.upstream: Any = None
        self.commands_run: list[Any] = []

    def side_made(self, side: Side) -> None:
        side.hold_reading("connect", True)

    def commands(self, commands: list[Any]) -> None:
        self.commands_run.extend(commands)

    def side_eof(self, side: Side) -> bool:
        self.got.append(b"<FIN>")
        return self.keep_open

    keep_open = True


class _Transport:
    def __init__(self) -> None:
        self.paused = 0
        self.resumed = 0
        self.written: list[bytes] = []

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default  # (plaintext: no ssl_object)

    closed = False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused += 1

    def resume_reading(self) -> None:
        self.resumed += 1

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))


def _side() -> tuple[Side, _Connection, _Transport]:
    conn, transport = _Connection(), _Transport()
    side = Side(conn)  # type: ignore[arg-type]
    conn.client = side
    side.connection_made(transport)  # type: ignore[arg-type]

    def receive(data: bytes) -> Output:
        conn.got.append(data)
        return Output()

    side.receive = receive
    return side, conn, transport


def test_reads_during_the_connect_hold_wait_and_come_in_order() -> None:
    side, conn, transport = _side()
    assert transport.paused == 1
    side.data_received(b"PRI * HTTP/2.0")
    side.data_received(b"\r\n\r\nSM\r\n\r\n")
    assert conn.got == []  # nothing handled while the upstream does not exist
    side.hold_reading("connect", False)
    assert conn.got == [b"PRI * HTTP/2.0", b"\r\n\r\nSM\r\n\r\n"]
    assert transport.resumed == 1
    side.data_received(b"more")
    assert conn.got[-1] == b"more"


def test_a_peer_hold_does_not_keep_reads_back() -> None:
    """Back-pressure only pauses the transport: a read already delivered is still handled."""
    side, conn, _ = _side()
    side.hold_reading("connect", False)
    side.hold_reading("peer", True)
    side.data_received(b"x")
    assert conn.got == [b"x"]


def test_after_each_handled_read_the_relay_hook_runs() -> None:
    """``Relay.after_read`` (the metrics' forwarding-latency point) runs once after each read is handled,
    reads held for "connect" included, and never for a read only kept."""
    side, conn, _ = _side()
    side.data_received(b"a")
    assert conn.relay.after == []
    side.hold_reading("connect", False)
    side.data_received(b"b")
    assert conn.relay.after == [1, 2]


def test_each_step_is_written_then_its_commands_run_then_the_next_step() -> None:
    """A read whose first step writes to both sides and asks for more: both writes, the step's commands,
    then the core's next step (here: one more write upstream and nothing after)."""
    side, conn, client_t = _side()
    side.hold_reading("connect", False)
    upstream_t = _Transport()
    conn.upstream = Side(conn)  # type: ignore[arg-type]
    conn.upstream.transport = upstream_t
    first, second = Output(), Output()
    first.c2s, first.s2c, first.commands, first.more = b"up1", b"down1", [Close("upstream")], True
    second.c2s = b"up2"
    steps = iter([second])

    def receive(data: bytes) -> Output:
        return first

    side.receive = receive
    side.resume = lambda: next(steps, None)
    side.data_received(b"x")
    assert upstream_t.written == [b"up1", b"up2"] and client_t.written == [b"down1"]
    assert conn.commands_run == [Close("upstream")]


def test_a_fin_that_comes_with_held_reads_is_handled_after_them() -> None:
    """A client that sends its request and closes before the upstream connection exists: its bytes are held,
    and its FIN was handled at once, before them: the half-close went upstream first, and the held bytes,
    written after it, raised in the connect task and were lost with their call. The FIN now follows them."""
    side, conn, transport = _side()
    side.data_received(b"POST /v2/models/echo/infer HTTP/1.1\r\n")
    assert side.eof_received() is True  # (the transport stays open until the FIN is handled)
    assert conn.got == []
    side.hold_reading("connect", False)
    assert conn.got == [b"POST /v2/models/echo/infer HTTP/1.1\r\n", b"<FIN>"] and not transport.closed
    # uvloop delivers that EOF again once reading resumes: answered as before, the core told once.
    assert side.eof_received() is True and conn.got.count(b"<FIN>") == 1


def test_a_held_fin_the_core_does_not_keep_open_closes_the_transport() -> None:
    """eof_received said "stay open" while the FIN was held: when the core then says not to, the shell closes
    the transport, as asyncio would have."""
    side, conn, transport = _side()
    conn.keep_open = False
    side.data_received(b"x")
    side.eof_received()
    side.hold_reading("connect", False)
    assert conn.got == [b"x", b"<FIN>"] and transport.closed


def test_the_fin_reaches_the_core_once_through_a_real_uvloop_relay() -> None:
    """A client sends part of an HTTP body and its FIN at once, under uvloop, which may deliver a read under way
    when reading was paused for the upstream connect, and that EOF again once reading resumes: one half_close is
    recorded (two were, once the held FIN was handled after the held bytes)."""
    import asyncio
    import socket

    import uvloop

    from proxy.relay.http1 import Http1Core
    from proxy.relay.options import RelayOptions
    from proxy.relay.relay import Relay

    records: list[Any] = []

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        got_eof = asyncio.Event()

        class Upstream(asyncio.Protocol):
            def eof_received(self) -> bool:
                got_eof.set()
                return True

        up = await loop.create_server(Upstream, "127.0.0.1", 0)
        relay = Relay(("127.0.0.1", up.sockets[0].getsockname()[1]), records.append, options=RelayOptions(),
                      core_factory=Http1Core)  # fmt: skip
        srv = await loop.create_server(relay.protocol_factory, "127.0.0.1", 0)
        body = b'{"id":"p1","inputs":[1,2,3]}'
        head = b"POST /v2/models/echo/infer HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(body)
        s = socket.create_connection(("127.0.0.1", srv.sockets[0].getsockname()[1]))
        try:
            s.sendall(head + body[:-5])
            s.shutdown(socket.SHUT_WR)
            await asyncio.wait_for(got_eof.wait(), 10)  # (the half-close reached the upstream)
            for _ in range(20):  # loop turns: a second FIN, if any, is handled by then
                await asyncio.sleep(0.01)
        finally:
            s.close()
            srv.close()
            up.close()
        return [r.kind for r in records]

    kinds = uvloop.run(main())
    assert kinds.count("half_close") == 1, kinds


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_what_a_peer_sent_before_its_reset_is_read_before_the_loss(loop_kind: str) -> None:
    """A client cancels (RST_STREAM) and closes with responses unread, so its kernel resets the connection; the
    proxy's write towards it fails on that reset before the loop read the cancel. The transport is lost, yet the
    kernel keeps the bytes: the core gets them, then the loss (it got the loss alone, and the cancel was recorded
    as a disconnect: 3 of 16 tritonclient streams cancelled mid-response, against the real Triton). Reading is
    paused here so that the write comes first, the order a busy loop met by chance."""
    import asyncio
    import socket
    import struct

    import uvloop

    events: list[tuple[str, Any]] = []

    class Conn(_Connection):
        def side_made(self, side: Side) -> None:
            pass

        def side_lost(self, side: Side, exc: Exception | None) -> None:
            events.append(("lost", type(exc).__name__))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with socket.create_server(("127.0.0.1", 0)) as listener:
            client = socket.create_connection(listener.getsockname())
            accepted, _ = listener.accept()
        conn = Conn()
        side = Side(conn)  # type: ignore[arg-type]
        side.receive = lambda data: events.append(("read", bytes(data))) or Output()  # type: ignore[func-returns-value]
        transport, _ = await loop.connect_accepted_socket(lambda: side, sock=accepted)
        transport.pause_reading()
        client.sendall(b"RST_STREAM")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset: the peer's kernel had data it did not read, or SO_LINGER 0 as here
        for _ in range(500):  # until the reset reached the proxy's socket (TCP_CLOSE in its tcp_info)
            if accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == 7:
                break
            await asyncio.sleep(0.01)
        transport.write(b"\0" * 65536)  # a response on its way: the send fails on the reset
        for _ in range(500):
            if events and events[-1][0] == "lost":
                break
            await asyncio.sleep(0.01)

    if loop_kind == "uvloop":
        uvloop.run(main())
    else:
        asyncio.run(main())
    assert events[0] == ("read", b"RST_STREAM") and [e[0] for e in events] == ["read", "lost"], events

"""The relay's I/O shell: reads held for "connect" are kept, in order, until the upstream exists; each
read's steps are carried out (writes, then commands, then the next step).

Pure (recording stand-ins for the core, the connection and the transport): the behaviour this pins
was found with uvloop, which may deliver a read already under way after ``pause_reading`` was called
inside ``connection_made``; the bytes must neither be handled early (the upstream transport does not
exist yet, so they would be dropped) nor lost.
"""

from __future__ import annotations

from typing import Any

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
    assert side.eof_received() is True and conn.got[-1] == b"<FIN>"  # (later FINs: at once, as before)


def test_a_held_fin_the_core_does_not_keep_open_closes_the_transport() -> None:
    """eof_received said "stay open" while the FIN was held: when the core then says not to, the shell closes
    the transport, as asyncio would have."""
    side, conn, transport = _side()
    conn.keep_open = False
    side.data_received(b"x")
    side.eof_received()
    side.hold_reading("connect", False)
    assert conn.got == [b"x", b"<FIN>"] and transport.closed

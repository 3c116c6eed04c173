"""A side of a tunnel: reads held for "connect" are kept, in order, until the upstream exists.

Pure (a recording stand-in for the tunnel and the transport): the behaviour this pins was found
with uvloop, which may deliver a read already under way after ``pause_reading`` was called inside
``connection_made``; the bytes must neither be handled early (the upstream transport does not exist
yet, so they would be dropped) nor lost.
"""

from __future__ import annotations

from proxy.relay.side import Side


class _Relay:
    def __init__(self, tunnel: _Tunnel) -> None:
        self.after: list[int] = []  # reads handled when after_read was called
        self.after_read = lambda: self.after.append(len(tunnel.got))


class _Tunnel:
    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.relay = _Relay(self)

    def side_made(self, side: Side) -> None:
        side.hold_reading("connect", True)

    def side_data(self, side: Side, data: bytes) -> None:
        self.got.append(data)


class _Transport:
    def __init__(self) -> None:
        self.paused = 0
        self.resumed = 0

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self.paused += 1

    def resume_reading(self) -> None:
        self.resumed += 1


def _side() -> tuple[Side, _Tunnel, _Transport]:
    tunnel, transport = _Tunnel(), _Transport()
    side = Side(tunnel, upstream=False)  # type: ignore[arg-type]
    side.connection_made(transport)  # type: ignore[arg-type]
    return side, tunnel, transport


def test_reads_during_the_connect_hold_wait_and_come_in_order() -> None:
    side, tunnel, transport = _side()
    assert transport.paused == 1
    side.data_received(b"PRI * HTTP/2.0")
    side.data_received(b"\r\n\r\nSM\r\n\r\n")
    assert tunnel.got == []  # nothing handled while the upstream does not exist
    side.hold_reading("connect", False)
    assert tunnel.got == [b"PRI * HTTP/2.0", b"\r\n\r\nSM\r\n\r\n"]
    assert transport.resumed == 1
    side.data_received(b"more")
    assert tunnel.got[-1] == b"more"


def test_a_peer_hold_does_not_keep_reads_back() -> None:
    """Back-pressure only pauses the transport: a read already delivered is still handled."""
    side, tunnel, _ = _side()
    side.hold_reading("connect", False)
    side.hold_reading("peer", True)
    side.data_received(b"x")
    assert tunnel.got == [b"x"]


def test_after_each_handled_read_the_relay_hook_runs() -> None:
    """``Relay.after_read`` (the metrics' forwarding-latency point) runs once after each read is handled,
    reads held for "connect" included, and never for a read only kept."""
    side, tunnel, _ = _side()
    side.data_received(b"a")
    assert tunnel.relay.after == []
    side.hold_reading("connect", False)
    side.data_received(b"b")
    assert tunnel.relay.after == [1, 2]

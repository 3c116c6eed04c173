"""The conversations of :mod:`tests.support.h2conv` through the Tunnel the protocol core replaced.

Kept only as long as that Tunnel exists: it produced ``equivalence.json``.
"""

from __future__ import annotations

from typing import Any

from proxy.relay.refuser import Refuser
from proxy.relay.relay import Relay
from proxy.relay.tunnel import Tunnel
from tests.support.h2conv import Rig
from tests.support.transport import MemoryTransport


class OldRig(Rig):
    def __init__(self, setup: dict[str, Any], server: bool, connect: bool) -> None:
        super().__init__(server)
        self.relay = Relay(("127.0.0.1", 1), self.records.append, **setup)
        self.t = Tunnel(self.relay, "c1")
        self.relay.tunnels.add(self.t)
        self.dt, self.ut = MemoryTransport(), MemoryTransport()
        self.t.down.transport = self.dt
        self.t.peer = "127.0.0.1:40000"
        if connect:
            self.t.up.connection_made(self.ut)

    def _down(self, data: bytes) -> None:
        self.t.down.data_received(data)

    def _up(self, data: bytes) -> None:
        self.t.up.data_received(data)

    def _lose(self, side: str, exc: Exception | None) -> None:
        (self.t.down if side == "client" else self.t.up).connection_lost(exc)

    def _fire_timers(self) -> None:
        handle = self.t._linger
        if handle is not None:
            handle.cancel()
            self.t._linger_close()

    def _take(self, side: str) -> bytes:
        return (self.dt if side == "client" else self.ut).take()

    def closed(self, side: str) -> bool:
        return (self.dt if side == "client" else self.ut).closed

    def shutdown(self) -> None:
        self._input(self.t.goaway_down)

    def abort(self, cause: str) -> None:
        self._input(self.t.abort, cause)

    def connect_failed(self, reason: str) -> None:
        self._input(lambda: setattr(self.t, "refuser", Refuser(self.t, reason)))

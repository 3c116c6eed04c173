"""One transport of a tunnel (the client's or the upstream's), and reading paused for backpressure."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from proxy.relay.state import TunnelState

#: Bytes the proxy lets queue towards one peer before it stops reading the other one: with the
#: end-to-end windows this only binds when a peer stops reading its socket altogether.
WRITE_HIGH = 4 * 1024 * 1024
WRITE_LOW = 1024 * 1024


class Side(asyncio.Protocol):
    """One transport of a tunnel; forwards everything to the tunnel."""

    def __init__(self, tunnel: TunnelState, upstream: bool) -> None:
        self.tunnel = tunnel
        self.upstream = upstream
        self.transport: asyncio.Transport | None = None
        #: Why reading this side is paused: "connect" (upstream not there yet), "peer" (the other
        #: side's write buffer is full). Reading resumes when no reason is left.
        self.hold: set[str] = set()
        #: Bytes that arrived while reading was held for "connect": some event loops (uvloop) may
        #: deliver a read already under way when reading is paused inside connection_made.
        self._early: list[bytes] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (the protocol is only used with create_server/create_connection); not an
        # isinstance check: uvloop's transports implement the interface without subclassing asyncio's.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(WRITE_HIGH, WRITE_LOW)
        self.tunnel.side_made(self)

    def data_received(self, data: bytes) -> None:
        if self._early is not None:
            self._early.append(data)
            return
        tunnel = self.tunnel
        tunnel.side_data(self, data)
        after = tunnel.relay.after_read
        if after is not None:
            after()

    def connection_lost(self, exc: Exception | None) -> None:
        self.tunnel.side_lost(self, exc)

    def pause_writing(self) -> None:
        self.tunnel.other(self).hold_reading("peer", True)

    def resume_writing(self) -> None:
        self.tunnel.other(self).hold_reading("peer", False)

    def eof_received(self) -> bool:
        return False

    def hold_reading(self, reason: str, on: bool) -> None:
        """Pause (``on``) or release reading for ``reason``."""
        before = bool(self.hold)
        if on:
            self.hold.add(reason)
            if reason == "connect":
                self._early = []
        else:
            self.hold.discard(reason)
            if reason == "connect" and self._early is not None:
                early, self._early = self._early, None
                for data in early:
                    self.data_received(data)
        t = self.transport
        if t is None or t.is_closing() or before == bool(self.hold):
            return
        if self.hold:
            t.pause_reading()
        else:
            t.resume_reading()

"""What one tunnel holds: the per-connection state that every part of the tunnel shares.

:class:`proxy.relay.tunnel.Tunnel` is assembled from parts (mixins), one per responsibility, each
a subclass of :class:`TunnelState`. The parts call each other through ``self``; the
``TYPE_CHECKING`` block at the end lists what one part offers the others, so mypy checks every
such call and every implementation against one signature. Nothing of that block exists at run
time: a method no part implements fails loudly, it never falls back to a stub.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from proxy.relay.side import Side
from proxy.wire import frames as wire

if TYPE_CHECKING:
    from proxy.relay.call import Call
    from proxy.relay.late import Late
    from proxy.relay.refuser import Refuser
    from proxy.relay.relay import Relay

#: A frame as :meth:`proxy.wire.frames.FrameReader.feed` returns it: type, flags, stream id, payload, raw bytes.
Frame = tuple[int, int, int, Any, memoryview]


class TunnelState:
    """A client connection, its upstream connection, and the calls between them: the state."""

    def __init__(self, relay: Relay, conn_id: str) -> None:
        self.relay = relay
        self.emit = relay.emit
        self.opts = relay.options
        self.conn_id = conn_id
        self.down = Side(self, upstream=False)
        self.up = Side(self, upstream=True)
        self.c2s = wire.FrameReader(expect_preface=True)
        self.s2c = wire.FrameReader(expect_preface=False)
        #: Open calls by stream id (a call leaves when it ends).
        self.calls: dict[int, Call] = {}
        self.peer = ""
        #: Subject of the verified client certificate (``--tls-client-ca``), else None.
        self.client_subject: str | None = None
        self.up_ready = False
        self.up_lost = False
        self.down_lost = False
        #: Last stream id of the GOAWAY the client got (from us or forwarded), or None.
        self.goaway_last: int | None = None
        self.max_down_id = 0
        # Header blocks go upstream re-encoded (never verbatim) once the proxy rewrites one
        # (``:authority``) or keeps one back: the upstream's HPACK table then no longer mirrors
        # the client's, and literal-only blocks are valid against any table state.
        self.reencode_c2s = relay.authority is not None
        self._connect_task: asyncio.Task[None] | None = None
        # upstream stream id -> cancelled call still watched for late frames (insertion = age order)
        self._late: dict[int, Late] = {}
        # when the current client read arrived: the start of a cancel's way upstream
        self._down_read_ns = 0
        # bytes for each side, written once at the end of a read
        self._to_up: list[Any] = []
        self._to_down: list[Any] = []
        self.refuser: Refuser | None = None
        # True while the frames of the current read were already written (see side_data)
        self._early = False
        self._linger: asyncio.TimerHandle | None = None
        # The client must see a SETTINGS frame first (RFC 9113 3.4): the upstream's, or, when the
        # proxy must speak before the upstream did, an empty one of the proxy's, whose ACK the
        # client then sends is not the upstream's to see.
        self._down_settings = False
        self._own_settings_acks = 0
        #: The HTTP/2 violation the upstream committed, if that is how its connection ended.
        self._up_error: str | None = None
        #: Streams whose HEADERS the proxy kept back (refused after its GOAWAY): the upstream never
        #: heard of them, so nothing else of theirs may reach it.
        self._kept_back: set[int] = set()

    def other(self, side: Side) -> Side:
        """The transport facing the other peer."""
        return self.up if side is self.down else self.down

    if TYPE_CHECKING:
        # transports.py: bytes in, frames out
        def side_made(self, side: Side) -> None: ...
        def side_data(self, side: Side, data: bytes) -> None: ...
        def _own_down(self, frames: bytes) -> None: ...
        def _fwd_up(self, raw: Any) -> None: ...
        def _fwd_down(self, raw: Any) -> None: ...
        def _flush(self) -> None: ...

        # closing.py: how the connections end
        def side_lost(self, side: Side, exc: Exception | None) -> None: ...
        def _protocol_error(self, side: Side, code: int, error: str, goaway: bool) -> None: ...
        def goaway_down(self) -> None: ...
        def _maybe_close_down(self) -> None: ...
        def abort(self, cause: str) -> None: ...

        # from_client.py, from_upstream.py: one frame of each direction
        def _c2s_frame(self, ftype: int, flags: int, sid: int, payload: Any, raw: memoryview) -> None: ...
        def _s2c_frame(self, ftype: int, flags: int, sid: int, payload: Any, raw: memoryview) -> None: ...
        def _request(self, sid: int, headers: list[tuple[bytes, bytes]]) -> Call: ...
        def _refuse(self, call: Call, reason: str) -> None: ...

        # messages.py: the per-message pass
        def _messages(self, call: Call, direction: int, data: memoryview) -> None: ...

        # endings.py: how calls end
        def _cancel(
            self, call: Call, cause: str, rst_code: int | None, rst: Any = None, learned_ns: int = 0
        ) -> None: ...
        def _fail_down(self, call: Call, cause: str, code: int, message: str) -> None: ...
        def _end(
            self,
            call: Call,
            cause: str,
            status: str,
            details: str | None,
            trailers: list[tuple[bytes, bytes]] | None,
            rst: int | None = None,
        ) -> None: ...

        # late.py: frames after a forwarded cancel
        def _watch_late(self, call: Call) -> None: ...
        def _late_frame(self, sid: int, kind: str, data: Any, end_stream: bool) -> None: ...

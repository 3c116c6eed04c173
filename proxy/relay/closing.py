"""How a tunnel's connections end: protocol errors, a side lost, GOAWAY, the linger, abort."""

from __future__ import annotations

import asyncio
import time

import structlog

from proxy.relay.refuser import Refuser
from proxy.relay.side import Side
from proxy.relay.state import TunnelState
from proxy.wire import frames as wire
from replay.capture import events as ev

log = structlog.get_logger("triton_tap.relay")

# How long a client may take to close the connection itself after its last call ended.
_LINGER_S = 2.0


class Closing(TunnelState):
    """The tunnel's part that closes its connections."""

    def _protocol_error(self, side: Side, code: int, error: str, goaway: bool) -> None:
        """Record the violation, tell the offender (GOAWAY), close that side; its calls end when it is lost."""
        log.warning("http2_protocol_error", conn=self.conn_id, upstream=side.upstream, error=error)
        self.emit(
            ev.ProtocolViolated(
                t_ns=time.time_ns(), conn=self.conn_id, side="upstream" if side.upstream else "client",
                error=error, error_code=code,
                open_calls=[c.id for c in self.calls.values()],
            )
        )  # fmt: skip
        if goaway:
            debug = error.encode()[:256]
            if side.upstream:
                self._to_up.append(wire.goaway(0, code, debug))
            else:
                # A GOAWAY may never raise an earlier one's last stream id (RFC 9113 6.8).
                last = self.max_down_id if self.goaway_last is None else min(self.goaway_last, self.max_down_id)
                self._own_down(wire.goaway(last, code, debug))
            self._flush()
        t = side.transport
        # Nothing more may be sent on that connection; its calls end when the transport is lost.
        if side.upstream:
            self.up_lost = True
            self._up_error = error
        else:
            self.down_lost = True
        if t is not None:
            t.close()

    def side_lost(self, side: Side, exc: Exception | None) -> None:
        if side is self.down:
            self.down_lost = True
            for call in list(self.calls.values()):
                self._cancel(call, "client_disconnect", None)
            self._flush()
            if self.up.transport is not None:
                self.up.transport.close()
            if self._connect_task is not None and not self._connect_task.done():
                self._connect_task.cancel()
            self.relay.tunnels.discard(self)
        else:
            if self.down_lost or not self.up_ready:
                return
            self.up_lost = True
            self.down.hold_reading("peer", False)
            if self.max_down_id == 0 and self.goaway_last is None and (not self._down_settings or self._up_error):
                # No call yet, and a new connection would meet the same upstream: answer calls
                # with the reason. An upstream that spoke HTTP/2 and closed cleanly (a restart, an
                # idle timeout) gets the GOAWAY below instead: the client reconnects and its next
                # call is not failed for nothing.
                self._refuse_connection(exc)
                return
            for call in list(self.calls.values()):
                self._cancel(call, "upstream_disconnect", None)
            self.goaway_down()
            self._flush()
            self._maybe_close_down()

    def _refuse_connection(self, exc: Exception | None) -> None:
        """The upstream closed before it spoke HTTP/2 (an mTLS upstream rejecting our certificate,
        a port-forward with nothing behind it) or broke HTTP/2, and the client has opened no call
        yet: it is served as when the upstream is unreachable, every call UNAVAILABLE with the
        reason. A GOAWAY instead would send a gRPC client round reconnecting until its deadline,
        never telling it why: a GOAWAY whose last stream id is 0 says no call was processed, and
        gRPC retries such calls transparently, without limit, each on a new connection."""
        if self._up_error is not None:
            reason = f"triton-tap: upstream broke HTTP/2 ({self._up_error})"
        else:
            reason = "triton-tap: upstream closed the connection before speaking HTTP/2" + (f" ({exc})" if exc else "")
        log.warning("upstream_closed_early", conn=self.conn_id, error=reason)
        self.refuser = Refuser(self, reason)
        # What the client sent so far went to the lost upstream: the refuser gets a preface in its
        # place (the client's settings do not matter for statuses), then anything unread.
        rest = self.c2s.unread()
        self.refuser.feed(rest if self.c2s.expecting_preface else wire.PREFACE + wire.frame(wire.SETTINGS, 0, 0) + rest)

    def goaway_down(self) -> None:
        """Tell the client to open no new calls on this connection; open calls go on."""
        if self.goaway_last is None and not self.down_lost:
            self.goaway_last = self.max_down_id
            if self.refuser is not None:
                self.refuser.goaway()
            else:
                self._own_down(wire.goaway(self.max_down_id, wire.NO_ERROR))
                self._flush()
            self._maybe_close_down()

    def _maybe_close_down(self) -> None:
        t = self.down.transport
        if self.goaway_last is not None and not self.calls and t is not None:
            self._flush()
            if self._linger is None and not t.is_closing():
                self._linger = asyncio.get_running_loop().call_later(_LINGER_S, self._linger_close)

    def _linger_close(self) -> None:
        """Close the client connection if it has not closed itself since its last call ended.

        Not at once: gRPC C-core clients drop bytes that arrive in the same read as the
        connection's end (TCP FIN, or RST when we close with their last frames unread); closing
        right after the final trailers made the client report "Socket closed (GOAWAY received)"
        instead of the status we sent, about one run in five. A client that got GOAWAY and has no
        calls left closes on its own.
        """
        self._linger = None
        t = self.down.transport
        if self.calls or t is None:
            # A call crossed the GOAWAY (legal below its last stream id): its end arms this again.
            return
        t.close()

    def abort(self, cause: str) -> None:
        """End every open call with ``cause`` and close both connections."""
        for call in list(self.calls.values()):
            self._cancel(call, cause, None)
        self.goaway_down()
        self._flush()
        self._maybe_close_down()
        if self.up.transport is not None:
            self.up.transport.close()

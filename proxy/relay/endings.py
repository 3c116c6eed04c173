"""How calls end: cancels (the upstream stream reset at once), statuses of the proxy's own, the record."""

from __future__ import annotations

import time
from typing import Any

from proxy.relay.call import Call
from proxy.relay.records import make_call_end
from proxy.relay.state import TunnelState
from proxy.triton import causes
from proxy.wire import frames as wire
from proxy.wire.headers import pairs, status_trailers
from replay.capture import events as ev

#: Causes for which the proxy itself gives the client a status (the upstream cannot): code, message.
PROXY_ANSWERS: dict[str, tuple[int, str]] = {
    "upstream_disconnect": (14, "triton-tap: upstream connection lost"),
    "proxy_shutdown": (14, "triton-tap: proxy shutting down"),
    "proxy_error": (13, "triton-tap: internal error (see the proxy's log)"),
}


class CallEndings(TunnelState):
    """The tunnel's part that ends calls."""

    def _cancel(
        self, call: Call, cause: str, rst_code: int | None, rst: Any = None, learned_ns: int = 0
    ) -> None:
        """The call ends by a cancel-like event: recorded, and the upstream stream reset at once.

        ``rst`` is the client's RST_STREAM frame to pass on (else the proxy sends its own CANCEL);
        ``learned_ns`` (monotonic) is when the proxy learned of it, if earlier than now.
        """
        in_flight, responded = call.inflight.snapshot()
        forwarded = False
        rst_us: float | None = None
        if not self.up_lost and self.refuser is None:
            learned = learned_ns or time.monotonic_ns()
            if self.relay.before_cancel is not None:
                self.relay.before_cancel(call.id)
            self._to_up.append(rst if rst is not None else wire.rst_stream(call.sid, wire.CANCEL))
            # Written now rather than after the whole read: the cancel is what Triton must see
            # first, and its latency is measured to the socket.
            self._flush()
            forwarded = True
            rst_us = (time.monotonic_ns() - learned) / 1e3
            self._watch_late(call)
        self.emit(
            ev.CallCancelled(
                t_ns=time.time_ns(), call=call.id, cause=cause, in_flight=in_flight, responded=responded,  # type: ignore[arg-type]
                rst_code=rst_code, elapsed_ms=call.elapsed_ms(), forwarded_upstream=forwarded,
                upstream_rst_us=rst_us,
            )
        )  # fmt: skip
        answer = PROXY_ANSWERS.get(cause)
        if answer is not None:
            self._fail_down(call, cause, *answer)
            return
        self._end(call, cause, ev.STATUS_FOR_CAUSE[cause], None, None)

    def _fail_down(self, call: Call, cause: str, code: int, message: str) -> None:
        """Give the client a gRPC status of our own (the upstream cannot)."""
        if not self.down_lost:
            trailers = status_trailers(code, message, call.resp_headers is None)
            self._own_down(wire.headers_frames(call.sid, wire.encode_block(trailers), True, self.s2c.max_frame))
        self._end(call, cause, causes.status_name(code), message, None)

    def _end(
        self,
        call: Call,
        cause: str,
        status: str,
        details: str | None,
        trailers: list[tuple[bytes, bytes]] | None,
        rst: int | None = None,
    ) -> None:
        if call.ended:
            return
        call.ended = True
        self.calls.pop(call.sid, None)
        self.relay.open_calls -= 1
        # The relay holds nothing per call: what the client did not get is in the socket buffer,
        # shared by every call of the connection, so it can be told only when that is empty.
        t = self.down.transport
        undelivered = 0 if t is None or self.down_lost or not t.get_write_buffer_size() else None
        self.emit(
            make_call_end(
                time.time_ns(), call.id, status, details, cause,
                pairs(trailers) if trailers is not None else None,
                pairs(call.resp_headers) if call.resp_headers is not None else None,
                call.elapsed_ms(), call.index[0], call.index[1], rst, undelivered, {},
            )
        )  # fmt: skip
        self._maybe_close_down()

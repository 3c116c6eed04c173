"""Upstream -> client: each frame the upstream sends, recorded and passed on; the upstream's GOAWAY."""

from __future__ import annotations

import time
from typing import Any

import h2.errors

from proxy.relay.call import Call
from proxy.relay.state import TunnelState
from proxy.triton import causes
from proxy.wire import frames as wire
from proxy.wire.headers import grpc_status
from replay.capture import events as ev

_ERROR_NAMES = {int(c): c.name for c in h2.errors.ErrorCodes}


class UpstreamFrames(TunnelState):
    """The tunnel's part that handles the upstream's frames."""

    def _s2c_frame(self, ftype: int, flags: int, sid: int, payload: Any, raw: memoryview) -> None:
        if ftype == wire.DATA:
            call = self.calls.get(sid)
            if call is not None:
                # Once per streamed response: data_payload and _fwd_down inline (two calls less a frame).
                self._messages(call, 1, payload if not flags & wire.PADDED else wire.data_payload(flags, payload))
                if not self._early:
                    self._to_down.append(raw)
                if flags & wire.END_STREAM:
                    self._end(call, "error", "INTERNAL", "upstream ended the stream without a grpc-status", None)
                return
            if sid in self._late:
                self._late_frame(sid, "data", wire.data_payload(flags, payload), bool(flags & wire.END_STREAM))
            self._fwd_down(raw)
        elif ftype == wire.HEADERS:
            self._fwd_down(raw)
            call = self.calls.get(sid)
            if call is None:
                if sid in self._late:
                    self._late_frame(sid, "headers", payload, bool(flags & wire.END_STREAM))
            elif flags & wire.END_STREAM:
                self._end_with_status(call, payload)
            elif call.resp_headers is None:
                call.resp_headers = payload
        elif ftype == wire.RST_STREAM:
            self._fwd_down(raw)
            code = int.from_bytes(payload, "big")
            call = self.calls.get(sid)
            if call is not None:
                status = causes.RST_TO_STATUS.get(code, "INTERNAL")
                self._end(call, "error", status, f"upstream reset the stream (HTTP/2 error {code})", None, rst=code)
            elif sid in self._late:
                self._late_frame(sid, "rst", code, True)
        elif ftype == wire.SETTINGS:
            if not flags & wire.ACK:
                self.c2s.receiver_settings(payload)
                self._down_settings = True
            self._fwd_down(raw)
        elif ftype == wire.GOAWAY:
            self._up_goaway(payload, raw)
        elif ftype == wire.PUSH_PROMISE:
            raise wire.FrameError(wire.PROTOCOL_ERROR, "PUSH_PROMISE: gRPC clients never accept server push")
        else:
            self._fwd_down(raw)

    def _up_goaway(self, payload: memoryview, raw: memoryview) -> None:
        last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        code = int.from_bytes(payload[4:8], "big")
        if code != wire.NO_ERROR:
            # The upstream ends the connection with an error, in answer to frames it got from the
            # client verbatim (or, like ENHANCE_YOUR_CALM for too many pings, to the client's
            # behaviour): the client gets the upstream's own GOAWAY and loses its connection, the
            # violation is the client's as the upstream judged it, and the open calls end as
            # upstream_disconnect (the upstream, not the client, ended them).
            if self.goaway_last is not None and last > self.goaway_last:
                # A GOAWAY may never raise an earlier one's last stream id (RFC 9113 6.8).
                self._own_down(wire.goaway(self.goaway_last, code, bytes(payload[8:])))
            else:
                self._fwd_down(raw)
            self._flush()
            debug = bytes(payload[8:]).decode("utf-8", "replace")
            name = _ERROR_NAMES.get(code, str(code))
            error = f"the upstream rejected the client's frames: GOAWAY {name}" + (f" ({debug})" if debug else "")
            self.up_lost = True
            self._protocol_error(self.down, code, error, goaway=False)
            for call in list(self.calls.values()):
                self._cancel(call, "upstream_disconnect", None)
            return
        for call in list(self.calls.values()):
            if call.sid > last:
                # Never processed upstream (RFC 9113 6.8): REFUSED_STREAM lets the client retry it.
                self._refuse(call, "triton-tap: upstream connection is shutting down (GOAWAY)")
        # Passed on so the client opens new calls on a new connection (and so a new upstream
        # connection); calls in flight drain. A GOAWAY may never raise an earlier one's last id.
        if self.goaway_last is None or last < self.goaway_last:
            self.goaway_last = last
            self._fwd_down(raw)
        self._maybe_close_down()

    def _end_with_status(self, call: Call, trailers: list[tuple[bytes, bytes]]) -> None:
        raw, details = grpc_status(trailers)
        if raw is None or not raw.isdigit() or len(raw) > 4:  # bytes.isdigit(): ASCII only
            self._end(call, "error", "UNKNOWN", details or "upstream trailers without grpc-status", trailers)
            return
        code = int(raw)
        cause = causes.upstream_status_cause(code, call.timeout_ms, call.elapsed_ms())
        if cause == "deadline":
            in_flight, responded = call.inflight.snapshot()
            self.emit(
                ev.CallCancelled(
                    t_ns=time.time_ns(), call=call.id, cause="deadline", in_flight=in_flight,
                    responded=responded, rst_code=None, elapsed_ms=call.elapsed_ms(),
                    forwarded_upstream=False,
                )
            )  # fmt: skip
        self._end(call, cause, causes.status_name(code), details, trailers)

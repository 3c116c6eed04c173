"""Client -> upstream: each frame the client sends, recorded and passed on (or kept back)."""

from __future__ import annotations

import time
from typing import Any

import h2.errors

from proxy.relay.call import Call
from proxy.relay.endings import PROXY_ANSWERS
from proxy.relay.options import REDACTED
from proxy.relay.records import make_call_start, make_half_close
from proxy.relay.state import TunnelState
from proxy.triton import causes
from proxy.wire import frames as wire
from proxy.wire.headers import Block, header, pairs

ENHANCE_YOUR_CALM = int(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
#: Streams a client may open after the GOAWAY it got (each refused) before that counts as abuse.
KEPT_BACK_LIMIT = 1024


class ClientFrames(TunnelState):
    """The tunnel's part that handles the client's frames."""

    def _c2s_frame(self, ftype: int, flags: int, sid: int, payload: Any, raw: memoryview) -> None:
        if sid in self._kept_back:
            self._kept_back_frame(ftype, flags, sid, payload)
            return
        if ftype == wire.DATA:
            call = self.calls.get(sid)
            if call is not None:
                self._messages(call, 0, wire.data_payload(flags, payload))
                if flags & wire.END_STREAM:
                    self.emit(make_half_close(time.time_ns(), call.id, {}))
            self._fwd_up(raw)
        elif ftype == wire.HEADERS:
            self._c2s_headers(flags, sid, payload, raw)
        elif ftype == wire.RST_STREAM:
            call = self.calls.get(sid)
            if call is None:
                self._fwd_up(raw)
                return
            cause = causes.client_reset_cause(call.timeout_ms, call.elapsed_ms())
            # The client's own RST goes upstream (the cause's clock started with this read).
            self._cancel(call, cause, int.from_bytes(payload, "big"), raw, self._down_read_ns)
        elif ftype == wire.SETTINGS:
            if not flags & wire.ACK:
                self.s2c.receiver_settings(payload)
            elif self._own_settings_acks:
                # The ACK of the proxy's own SETTINGS (see _own_down): the upstream never sent it.
                self._own_settings_acks -= 1
                return
            self._fwd_up(raw)
        elif ftype == wire.PUSH_PROMISE:
            raise wire.FrameError(wire.PROTOCOL_ERROR, "PUSH_PROMISE from a client")
        else:
            # PING, WINDOW_UPDATE, PRIORITY, GOAWAY, the preface and unknown extension frames:
            # end to end, like everything else.
            self._fwd_up(raw)

    def _kept_back_frame(self, ftype: int, flags: int, sid: int, payload: Any) -> None:
        """A frame on a stream the upstream never heard of: dropped, its flow-control credit returned.

        (A header block was decoded already, which keeps HPACK in step, and every later block goes
        upstream re-encoded.)"""
        if ftype == wire.DATA:
            if len(payload):
                self._own_down(wire.window_update(0, len(payload)))
            if flags & wire.END_STREAM:
                self._kept_back.discard(sid)
        elif ftype == wire.RST_STREAM:
            self._kept_back.discard(sid)

    def _c2s_headers(self, flags: int, sid: int, headers: list[tuple[bytes, bytes]], raw: memoryview) -> None:
        end = bool(flags & wire.END_STREAM)
        call = self.calls.get(sid)
        if call is None and sid & 1 and sid > self.max_down_id:
            if self.goaway_last is not None and sid > self.goaway_last and len(self._kept_back) >= KEPT_BACK_LIMIT:
                raise wire.FrameError(ENHANCE_YOUR_CALM, "client kept opening streams after GOAWAY")
            call = self._request(sid, headers)
            if self.up_lost:
                self._kept_back.add(sid)
                self._fail_down(call, "upstream_disconnect", *PROXY_ANSWERS["upstream_disconnect"])
                return
            if self.goaway_last is not None and sid > self.goaway_last:
                # Above the last stream id of the GOAWAY the client got (the proxy's at shutdown,
                # or the upstream's passed on): never processed, so it must not reach the upstream
                # (the client may retry it elsewhere). Its header block is kept back.
                self.reencode_c2s = True
                self._kept_back.add(sid)
                self._refuse(call, "triton-tap: connection is shutting down (GOAWAY): stream not processed")
                return
            self._forward_headers(sid, headers, end, raw)
        else:
            # Trailers from the client, or a stream the upstream will judge (closed, even id).
            self._forward_headers(sid, headers, end, raw)
        if end and call is not None and not call.ended:
            self.emit(make_half_close(time.time_ns(), call.id, {}))

    def _forward_headers(self, sid: int, headers: list[tuple[bytes, bytes]], end: bool, raw: memoryview) -> None:
        if not self.reencode_c2s:
            self._fwd_up(raw)
            return
        authority = self.relay.authority
        if authority is not None:
            headers = [(k, authority) if k == b":authority" else (k, v) for k, v in headers]
        # Each block starts with a dynamic table size update to 0: valid whatever the upstream
        # advertised (RFC 7541 4.2), and the literal-only blocks never need its table.
        block = b"\x20" + wire.encode_block(headers)
        self._to_up.append(wire.headers_frames(sid, block, end, self.c2s.max_frame))

    def _request(self, sid: int, headers: list[tuple[bytes, bytes]]) -> Call:
        self.max_down_id = sid
        # A client's calls repeat their header block: what it says is read once per block (Block).
        got = headers.derived.get("request") if type(headers) is Block else None
        if got is None or got[0] is not self.opts:
            got = self._read_request(headers)
        _, method, timeout_ms, meta = got
        call = Call(f"{self.conn_id}.{sid}", sid, method, timeout_ms, self.opts)
        self.calls[sid] = call
        self.relay.open_calls += 1
        self.emit(
            make_call_start(time.time_ns(), call.id, self.conn_id, method, self.peer, meta, timeout_ms,
                            self.client_subject, {})
        )  # fmt: skip
        return call

    def _read_request(self, headers: list[tuple[bytes, bytes]]) -> tuple[Any, str, float | None, list[list[str]]]:
        """(options, method, timeout in ms, metadata as recorded) of a request header block."""
        path = header(headers, b":path") or b""
        timeout = header(headers, b"grpc-timeout")
        timeout_ms = causes.parse_grpc_timeout(timeout.decode("latin-1")) if timeout else None
        meta = [[k, REDACTED if self.opts.redacts(k) else v] for k, v in pairs(headers)]
        got = (self.opts, path.decode("latin-1"), timeout_ms, meta)
        if type(headers) is Block:
            headers.derived["request"] = got
        return got

    def _refuse(self, call: Call, reason: str) -> None:
        """REFUSED_STREAM to the client: never processed, so the client may retry it itself."""
        self._own_down(wire.rst_stream(call.sid, wire.REFUSED_STREAM))
        self._end(call, "error", "UNAVAILABLE", reason, None, rst=wire.REFUSED_STREAM)

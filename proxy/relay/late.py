"""Late frames: what the upstream still sends on a stream after the proxy forwarded its cancel."""

from __future__ import annotations

import time
from typing import Any

from proxy.relay.call import LABEL_KEEP, Call
from proxy.relay.state import TunnelState
from proxy.triton import labels
from proxy.wire.headers import grpc_status
from proxy.wire.messages import Assembler
from replay.capture import events as ev

#: Cancelled upstream streams per connection still watched for late frames (oldest forgotten first).
LATE_WATCH = 256
#: ``late`` records per cancelled call; then one ``overflow`` record and the call is no longer watched.
LATE_RECORDS = 64


class Late:
    """A call whose cancel the proxy forwarded upstream, watched for frames the upstream still sends."""

    __slots__ = ("asm", "call_id", "mkind", "records", "t_rst")

    def __init__(self, call: Call) -> None:
        self.call_id = call.id
        self.mkind = call.mkind
        self.t_rst = time.monotonic_ns()
        # A message cut by the cancel: its tail arrives late and must not be read as a new one.
        self.asm = call.s2c_asm if call.s2c_asm.partial else Assembler(LABEL_KEEP, False)
        self.records = 0


class LateFrames(TunnelState):
    """The tunnel's part that watches cancelled calls for late frames."""

    def _watch_late(self, call: Call) -> None:
        if len(self._late) >= LATE_WATCH:
            # Triton usually sends nothing after our RST: old entries would otherwise live as long
            # as the connection.
            del self._late[next(iter(self._late))]
        self._late[call.sid] = Late(call)

    def _late_frame(self, sid: int, kind: str, data: Any, end_stream: bool) -> None:
        """A frame the upstream sent on a stream after the cancel went upstream: recorded as ``late``.

        It is passed on like every frame (the client's HTTP/2 stack discards frames on a stream it
        reset, RFC 9113 5.1, and counts them for flow control; a header block must reach it for
        HPACK's sake).
        """
        late = self._late[sid]
        since = (time.monotonic_ns() - late.t_rst) / 1e6
        if kind == "data":
            for flag, length, kept, truncated, _ in late.asm.feed(data):
                body = b"".join(kept) if isinstance(kept, list) else kept
                fields: dict[str, Any] = {}
                if late.mkind and not flag:
                    try:
                        if late.mkind == labels.STREAM:
                            got = labels.stream_response_labels(body, truncated)
                        else:
                            got = labels.response_labels(body, truncated)
                        fields = {"request_id": got["request_id"], "final": got["final"], "error": got.get("error")}
                    except Exception:
                        # A late message that does not decode is still recorded, by size.
                        pass
                self._late_emit(sid, late, "message", length, since, **fields)
        elif kind == "headers":
            headers: list[tuple[bytes, bytes]] = data
            size = sum(len(k) + len(v) for k, v in headers)
            error = None
            status, details = grpc_status(headers)
            if status is not None:
                error = status.decode("latin-1") + (" " + details if details else "")
            self._late_emit(sid, late, "trailers" if end_stream else "headers", size, since, error=error)
        else:
            self._late_emit(sid, late, "rst", 0, since, rst_code=int(data))
        if end_stream:
            self._late.pop(sid, None)

    def _late_emit(self, sid: int, late: Late, frame: str, size: int, since: float, **fields: Any) -> None:
        if sid not in self._late:
            return
        late.records += 1
        if late.records > LATE_RECORDS:
            frame, size, fields = "overflow", 0, {}
            del self._late[sid]
        self.emit(
            ev.LateFrameSeen(t_ns=time.time_ns(), call=late.call_id, frame=frame, size=size,  # type: ignore[arg-type]
                             since_cancel_ms=since, **fields)
        )  # fmt: skip

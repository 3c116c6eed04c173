"""One RPC as the relay follows it: its stream, method, clock, and a message assembler per direction."""

from __future__ import annotations

import time

from proxy.relay.options import RelayOptions
from proxy.triton import labels
from proxy.triton.inflight import InFlight
from proxy.wire.messages import Assembler

#: Bytes of a message kept for labelling in ``meta``/``none`` mode (tensor bytes come last).
LABEL_KEEP = 1024 * 1024


class Call:
    """One RPC: a stream, seen from both sides (the same stream id on both connections)."""

    __slots__ = (
        "c2s_asm",
        "ended",
        "id",
        "index",
        "inflight",
        "method",
        "mkind",
        "req_headers",
        "resp_headers",
        "s2c_asm",
        "sid",
        "t0",
        "timeout_ms",
    )  # fmt: skip

    def __init__(self, call_id: str, sid: int, method: str, timeout_ms: float | None, opts: RelayOptions) -> None:
        self.id = call_id
        self.sid = sid
        self.method = method
        self.mkind = labels.method_kind(method)
        self.t0 = time.monotonic_ns()
        self.timeout_ms = timeout_ms
        self.inflight = InFlight(unary=self.mkind == labels.UNARY_INFER)
        keep = LABEL_KEEP if opts.payload != "full" else max(LABEL_KEEP, opts.payload_cap or 2**62)
        hashing = opts.payload == "full"
        # Whole messages of 1 MiB or more go to the side file as the pieces they came in (no join);
        # labels read their first MiB, as with --payload meta (proxy/relay/recording.py).
        split = LABEL_KEEP if hashing and opts.payload_store == "side" and opts.payload_cap is None else None
        self.c2s_asm = Assembler(keep, hashing, split)
        self.s2c_asm = Assembler(keep, hashing, split)
        self.index = [0, 0]
        #: The request's and the response's header blocks (their grpc-encoding is read when a message is compressed).
        self.req_headers: list[tuple[bytes, bytes]] | None = None
        self.resp_headers: list[tuple[bytes, bytes]] | None = None
        self.ended = False

    def elapsed_ms(self) -> float:
        """Milliseconds since the request HEADERS."""
        return (time.monotonic_ns() - self.t0) / 1e6

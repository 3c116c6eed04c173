"""End-to-end backpressure: a client that stops reading stalls the upstream, not the proxy's memory.

Uses the fake upstream: it can stream 400 MB in a second or two, which the real Python-backend
model cannot, and it counts what grpc let it send.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from proxy.ops.server import RecordingProxy
from tests.support.capture import of_kind, records
from tests.support.proxy import stop_proxy

MESSAGE = 64 * 1024
TOTAL = 400 * 1024 * 1024


def _settled(read: Callable[[], int], quiet_s: float = 1.0, timeout: float = 60.0) -> int:
    """The value of ``read()`` once it stopped changing for ``quiet_s`` (bounded by ``timeout``)."""
    deadline = time.monotonic() + timeout
    last, since = read(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return now
    raise AssertionError("upstream never stalled: no backpressure")


def test_non_reading_client_stalls_upstream(fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]) -> None:
    """After one response read, the upstream can send only what the windows hold, not the 400 MB it has;
    another client is served meanwhile."""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", payload="none")
    req = pb.ModelInferRequest(model_name="m", id="slow-reader")
    req.parameters["n"].int64_param = TOTAL // MESSAGE
    req.parameters["size"].int64_param = MESSAGE
    with grpc.insecure_channel(f"127.0.0.1:{proxy.port}") as ch:
        responses = pb_grpc.GRPCInferenceServiceStub(ch).ModelStreamInfer(iter([req]))
        assert next(responses).infer_response.id == "slow-reader"
        sent = _settled(lambda: fake_upstream.servicer.yielded) * MESSAGE
        # The client's own windows (the proxy passes them on) + socket buffers: tens of MB at most.
        assert sent < 48 * 1024 * 1024 < TOTAL, sent
        # Another client meanwhile: its own connection, answered at once (the stall is one stream's).
        with grpc.insecure_channel(f"127.0.0.1:{proxy.port}", options=[("grpc.use_local_subchannel_pool", 1)]) as other:
            neighbour = pb_grpc.GRPCInferenceServiceStub(other).ModelStreamInfer(
                iter([pb.ModelInferRequest(model_name="m", id="neighbour")]), timeout=10
            )
            assert [r.infer_response.id for r in neighbour] == ["neighbour"] * 3
        responses.cancel()
    stop_proxy(proxy)
    recs = records(proxy.capture_path)
    slow = of_kind(recs, "call_start")[0]["call"]
    (end,) = of_kind(recs, "call_end", slow)
    # The relay held nothing back: what Triton could send reached the client's socket (its
    # own windows stopped Triton), and the capture says so.
    assert end["cause"] == "client_cancel" and end["s2c_undelivered_bytes"] == 0

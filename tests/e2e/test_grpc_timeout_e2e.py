"""A ``grpc-timeout`` of more digits than gRPC's spec allows is a deadline all the same, for Triton and the capture.

gRPC's spec gives the value at most 8 digits; Triton 2.51's gRPC server (C-core) reads any number. The client
here is raw HTTP/2 (grpc libraries write the spec's form).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import service_pb2

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer
from replay.capture import events as ev
from replay.capture.methods import INFER
from replay.capture.reader import read_capture
from tests.support.raw_h2 import END_STREAM, HEADERS, RawClient

pytestmark = pytest.mark.timeout(240)


def _slow_echo(url: str, timeout: str) -> str:
    """The end of an echo call that takes 1.5 s under ``timeout``, as the client got it."""
    host, port = url.rsplit(":", 1)
    client = RawClient(host, int(port))
    try:
        request = service_pb2.ModelInferRequest(model_name="echo", id="t")
        request.inputs.add(name="INPUT", datatype="UINT8", shape=[3])
        request.raw_input_contents.append(b"abc")
        request.inputs.add(name="DELAY_MS", datatype="INT32", shape=[1])
        request.raw_input_contents.append((1500).to_bytes(4, "little"))
        sid = client.open(INFER, timeout=timeout)
        client.send(sid, request, end=True)
        # Its trailers as logged, not h2's StreamEnded: Triton repeats a deadline's end, and h2 raises at the
        # repeat in the read that holds them (tests/e2e/test_deadline_repeats_e2e.py).
        ends = lambda: [str(f) for f in client.on(sid) if f.type == HEADERS and f.flags & END_STREAM]  # noqa: E731
        assert client.wait(lambda: bool(ends()) or client.closed) and ends(), f"the call never ended: {client.error}"
        return ends()[0]
    finally:
        client.close()


def test_a_nine_digit_timeout_is_recorded_and_its_end_is_a_deadline(triton: TritonServer, tmp_path: Path) -> None:
    direct = _slow_echo(triton.grpc_url, "000000500m")
    assert "'grpc-status': '4'" in direct, direct
    with ProxyThread(triton.grpc_url, tmp_path / "captures", payload="meta", drain_timeout=5) as proxy:
        assert _slow_echo(proxy.url, "000000500m") == direct
    records = [r for _, r in read_capture([proxy.capture_path])]
    (start,) = [r for r in records if isinstance(r, ev.CallStarted)]
    (end,) = [r for r in records if isinstance(r, ev.CallEnded)]
    assert start.timeout_ms == 500.0
    assert (end.cause, end.status) == ("deadline", "DEADLINE_EXCEEDED"), end

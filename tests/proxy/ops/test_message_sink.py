"""Where ``message`` records go (proxy/ops/server.py): straight to the writer without metrics, through the
observer with them. Loopback: the proxy in-process in front of the fake Triton (tests/support/fake_triton.py:
the wiring is the proxy's own, no Triton behaviour is involved)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from proxy.ops.server import RecordingProxy
from tests.support.capture import records
from tests.support.loop_thread import BackgroundLoop
from tests.support.triton_client import echo_inputs, wait_for


def _one_call(p: RecordingProxy) -> None:
    with grpcclient.InferenceServerClient(f"127.0.0.1:{p.port}") as client:
        client.infer("echo", echo_inputs(np.arange(3, dtype=np.uint8)))


def _kinds(p: RecordingProxy, bg: BackgroundLoop) -> list[str]:
    path = p.capture_path
    bg.run(p.stop())
    return [r["kind"] for r in records(path)]


def test_without_metrics_messages_skip_the_observer(
    bg: BackgroundLoop, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    p = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    assert p.relay is not None and p.writer is not None
    assert p.relay.emit_message == p.writer.emit and p.relay.emit != p.writer.emit
    _one_call(p)
    kinds = _kinds(p, bg)
    assert kinds.count("message") == 2 and kinds.index("call_start") < kinds.index("message") < kinds.index("call_end")


def test_with_metrics_messages_are_counted(
    bg: BackgroundLoop, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    p = start_proxy(f"127.0.0.1:{fake_upstream.port}", metrics="127.0.0.1:0")
    assert p.relay is not None and p.metrics is not None
    assert p.relay.emit_message is p.relay.emit  # the observer's
    _one_call(p)
    m = p.metrics
    # The response is written before it is recorded (latency): the count may come just after the client has it.
    wait_for(lambda: m.messages == [1, 1], 10, "both messages counted")
    assert _kinds(p, bg).count("message") == 2

"""Upstream restarts of the real tritonserver through the proxy: clients never hang, nothing leaks (counted)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer
from tests.support.capture import calls_by_method, of_kind, records
from tests.support.triton_client import StreamSession, token_inputs, wait_for


def _ready(url: str) -> bool:
    c = grpcclient.InferenceServerClient(url)
    try:
        return bool(c.is_server_ready())
    except InferenceServerException:
        return False
    finally:
        c.close()


def test_tritonserver_restarts_leak_nothing(triton: TritonServer, tmp_path: Path) -> None:
    """2 rounds of SIGKILL + restart with a stream open: UNAVAILABLE then OK; no tunnel, task or fd left behind."""
    with ProxyThread(triton.grpc_url, tmp_path / "cap", payload="meta", drain_timeout=5) as proxy:
        relay = proxy.proxy.relay
        assert relay is not None
        loop = proxy.proxy.loop

        def conn_tasks() -> int:
            return sum(1 for t in asyncio.all_tasks(loop) if t.get_name().startswith("triton-tap-upstream"))

        baseline = None
        for i in range(2):
            s = StreamSession(proxy.url)
            s.send("tokens", token_inputs("r", 500, 20), f"kill{i}")
            s.take(1)
            try:
                triton.kill()
                last = s.take_until(lambda e: e[0] == "error", timeout=30)[-1]
            finally:
                s.close()
                triton.restart()
            assert last[1] == "StatusCode.UNAVAILABLE"
            wait_for(lambda: _ready(proxy.url), timeout=60, what="calls through the proxy after the restart")
            wait_for(lambda: not relay.tunnels and relay.open_calls == 0, timeout=20, what="tunnels to close")
            wait_for(lambda: conn_tasks() == 0, timeout=20, what="per-connection tasks to end")
            fds = len(os.listdir("/proc/self/fd"))
            if baseline is None:
                baseline = fds
        assert baseline is not None
        wait_for(lambda: len(os.listdir("/proc/self/fd")) <= baseline + 2, timeout=20, what="fds back to baseline")
    recs = records(proxy.capture_path)
    streams = calls_by_method(recs, "ModelStreamInfer")
    assert len(streams) == 2
    for call in streams:
        (cancel,) = of_kind(recs, "cancel", call)
        assert cancel["cause"] == "upstream_disconnect" and len(cancel["in_flight"]) == 1
    assert len(of_kind(recs, "call_start")) == len(of_kind(recs, "call_end"))

"""``triton-tap demo``: a real CPU tritonserver, the proxy in front, real traffic, a replay check.

Traffic: a normal decoupled stream, two interleaved requests on one stream, a stream-wide cancel
(``stop_stream(cancel_requests=True)``) and a deadline (``client_timeout``). Every process and
thread it starts is stopped on the way out, Ctrl-C included.
"""

from __future__ import annotations

import queue
import tempfile
import time
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer, model_repository

T = TypeVar("T")


def _inputs(prompt: str, n: int, delay_ms: int) -> list[Any]:
    import tritonclient.grpc as grpcclient

    out = []
    for name, dtype, value in (
        ("PROMPT", "BYTES", np.array([prompt.encode()], dtype=object)),
        ("MAX_TOKENS", "INT32", np.array([n], dtype=np.int32)),
        ("DELAY_MS", "INT32", np.array([delay_ms], dtype=np.int32)),
    ):
        i = grpcclient.InferInput(name, [1], dtype)
        i.set_data_from_numpy(value)
        out.append(i)
    return out


def _traffic(url: str) -> list[str]:
    """Run the demo traffic; returns what the client saw, one line per step."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    seen: list[str] = []
    events: queue.Queue[tuple[Any, Any]] = queue.Queue()
    c = grpcclient.InferenceServerClient(url)

    def take_final(rid: str) -> int:
        n = 0
        while True:
            result, error = events.get(timeout=60)
            if error is not None:
                raise error
            r = result.get_response()
            n += 1
            if r.id == rid and r.parameters["triton_final_response"].bool_param:
                return n

    # 1. a normal stream with the opt-in empty final response
    c.start_stream(callback=lambda result, error: events.put((result, error)))
    c.async_stream_infer("tokens", _inputs("hello", 5, 5), request_id="normal-1", enable_empty_final_response=True)
    seen.append(f"normal-1: {take_final('normal-1')} responses (5 text + empty final)")
    # 2. two interleaved requests on the same stream
    c.async_stream_infer("tokens", _inputs("a", 6, 10), request_id="inter-a", enable_empty_final_response=True)
    c.async_stream_infer("tokens", _inputs("b", 6, 10), request_id="inter-b", enable_empty_final_response=True)
    finals: set[str] = set()
    while len(finals) < 2:
        result, error = events.get(timeout=60)
        if error is not None:
            raise error
        r = result.get_response()
        if r.parameters["triton_final_response"].bool_param:
            finals.add(r.id)
    seen.append("inter-a, inter-b: both completed, responses interleaved on one stream")
    c.stop_stream()
    # 3. a stream-wide cancel with two long requests in flight
    c.start_stream(callback=lambda result, error: events.put((result, error)))
    c.async_stream_infer("tokens", _inputs("long", 1000, 20), request_id="cancel-1", enable_empty_final_response=True)
    c.async_stream_infer("tokens", _inputs("long", 1000, 20), request_id="cancel-2", enable_empty_final_response=True)
    events.get(timeout=60)
    c.stop_stream(cancel_requests=True)
    seen.append("cancel-1, cancel-2: stop_stream(cancel_requests=True) after the first response")
    # 4. a deadline
    d = grpcclient.InferInput("INPUT", [4], "UINT8")
    d.set_data_from_numpy(np.arange(4, dtype=np.uint8))
    delay = grpcclient.InferInput("DELAY_MS", [1], "INT32")
    delay.set_data_from_numpy(np.array([3000], dtype=np.int32))
    try:
        c.infer("echo", [d, delay], request_id="deadline-1", client_timeout=0.5)
        seen.append("deadline-1: unexpectedly completed")
    except InferenceServerException as e:
        seen.append(f"deadline-1: client got {e.status()}")
    c.close()
    return seen


def main(workdir: Path | None) -> int:
    """Run the demo; returns the exit code of the final ``replay check``."""
    from replay.cli.check import check

    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="triton-tap-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"demo workdir: {root}")
    server = TritonServer(model_repository(), workdir=root / "triton")
    proxy: ProxyThread | None = None
    try:
        print("starting tritonserver (CPU, Python backend) ...", flush=True)
        t0 = time.monotonic()
        server.start()
        print(f"tritonserver ready on {server.grpc_url} in {time.monotonic() - t0:.1f}s")
        proxy = ProxyThread(server.grpc_url, root / "captures", payload="meta", drain_timeout=5).start()
        print(f"proxy on {proxy.url} -> {server.grpc_url}; capture {proxy.capture_path}")
        for line in _traffic(proxy.url):
            print("  client:", line)
        capture = proxy.stop()
        print(f"\ncapture: {capture}\n\nreplay check (offline, from the capture):")
        return check([str(capture)])
    finally:
        if proxy is not None:
            proxy.stop()  # idempotent: also on Ctrl-C or a failed step
        server.stop()

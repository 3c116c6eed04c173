"""perf_analyzer -i http through the proxy's HTTP port, against the real CPU tritonserver.

perf_analyzer is found as the bench finds it (bench/probes/perfa.py: ``$PERF_ANALYZER``, the
checkout's ``.venv-pa`` that ``.ci/run`` installs, or PATH: docs/testing.md); without it the test is
skipped with the reason. Its printed counts cover only its measurement windows, so the capture is compared
with Triton's own statistics read after it exited (every request it sent is done by then).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.probes.perfa import PA_WHERE, find_perf_analyzer, pa_environment
from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer
from proxy.ops.server import RecordingProxy
from tests.support.capture import of_kind, records

PA_INPUT = Path(__file__).parents[1] / "proxy" / "relay" / "data" / "http1" / "pa_echo.json"


def echo_successes(triton: TritonServer) -> int:
    """Triton's cumulative count of successful echo inferences (its statistics extension)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{triton.http_url}/v2/models/echo/stats", timeout=10) as r:
        stats: dict[str, Any] = json.loads(r.read())
    return sum(int(m["inference_stats"]["success"]["count"]) for m in stats["model_stats"])


@pytest.fixture
def http_proxy(triton: TritonServer, tmp_path: Path) -> Iterator[ProxyThread]:
    """The proxy on Triton's HTTP port only (no gRPC pair)."""
    proxy = ProxyThread(triton.grpc_url, tmp_path / "captures", payload="meta", drain_timeout=5,
                        http_listen="127.0.0.1:0", http_upstream=triton.http_url.removeprefix("http://"))  # fmt: skip
    proxy.config = dataclasses.replace(proxy.config, listen="", upstream="")
    proxy.proxy = RecordingProxy(proxy.config)
    with proxy:
        yield proxy


def test_perf_analyzer_http_every_request_answered(http_proxy: ProxyThread, triton: TritonServer) -> None:
    pa = find_perf_analyzer()
    if pa is None:
        pytest.skip(f"perf_analyzer not found ({PA_WHERE}): docs/testing.md says how to install it")
    before = echo_successes(triton)
    # Optional inputs given explicitly: left out, perf_analyzer fills echo's DELAY_MS with random bytes.
    cmd = [str(pa), "-m", "echo", "-i", "http", "-u", f"127.0.0.1:{http_proxy.proxy.http_port}",
           "--input-data", str(PA_INPUT), "--concurrency-range", "2", "--measurement-mode", "count_windows",
           "--measurement-request-count", "40", "--max-trials", "4",
           # A shared 2-core machine is never "stable": what is tested is the relay, not the latency.
           "--stability-percentage", "999"]  # fmt: skip
    out = subprocess.run(cmd, env=pa_environment(pa), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    done = echo_successes(triton) - before
    recs = records(http_proxy.stop())
    infers = [r["call"] for r in of_kind(recs, "call_start") if r["method"] == "POST /v2/models/echo/infer"]
    ends = {r["call"]: r for r in of_kind(recs, "call_end")}
    assert infers and all((ends[c]["status"], ends[c]["cause"]) == ("200", "ok") for c in infers)
    assert len(infers) == done
    assert not of_kind(recs, "protocol_error") and not of_kind(recs, "cancel")
    assert (recs[0]["listen"], recs[0]["upstream"]) == ("", "")

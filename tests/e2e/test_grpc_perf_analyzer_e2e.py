"""perf_analyzer -i grpc --streaming through the proxy's gRPC port, against the real CPU tritonserver.

perf_analyzer is found as the bench finds it (bench/probes/perfa.py: ``$PERF_ANALYZER``, the
checkout's ``.venv-pa`` that ``.ci/run`` installs, or PATH: docs/testing.md); without it the test is
skipped with the reason. ``--request-count`` makes the run one window of exactly that many requests
(no stability search), so perf_analyzer's own count and its per-request export can be held against
the capture request by request.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from bench.probes.perfa import PA_WHERE, find_perf_analyzer, pa_environment
from proxy.lab.background import ProxyThread
from replay import track
from tests.support.capture import of_kind, records

REQUESTS = 30
TOKENS = 3


def test_perf_analyzer_grpc_streaming_every_request_answered(recording_proxy: ProxyThread, tmp_path: Path) -> None:
    pa = find_perf_analyzer()
    if pa is None:
        pytest.skip(f"perf_analyzer not found ({PA_WHERE}): docs/testing.md says how to install it")
    data = tmp_path / "pa-tokens.json"
    data.write_text(json.dumps({"data": [{"PROMPT": ["pa"], "MAX_TOKENS": [TOKENS], "DELAY_MS": [0]}]}))
    export = tmp_path / "pa-export.json"
    cmd = [str(pa), "-m", "tokens", "-i", "grpc", "-u", recording_proxy.url, "--streaming",
           "--input-data", str(data), "--concurrency-range", "2", "--request-count", str(REQUESTS),
           "--measurement-interval", "500",
           # A shared 2-core machine is never "stable": what is tested is the relay, not the latency.
           "--stability-percentage", "999", "--profile-export-file", str(export)]  # fmt: skip
    out = subprocess.run(cmd, env=pa_environment(pa), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    counted = [int(n) for n in re.findall(r"Request count:\s*(\d+)", out.stdout)]
    assert counted == [REQUESTS], out.stdout[-2000:]
    # perf_analyzer's own record of each request: the texts and the empty final it asked for.
    (experiment,) = json.loads(export.read_text())["experiments"]
    assert [len(r["response_timestamps"]) for r in experiment["requests"]] == [TOKENS + 1] * REQUESTS

    capture = recording_proxy.stop()
    result = track(capture)
    answered = [r for r in result.requests if r.model == "tokens" and r.final]
    assert len(answered) == counted[0] == len([r for r in result.requests if r.model == "tokens"])
    assert {(r.outcome, r.text_responses, r.responses) for r in answered} == {("completed", TOKENS, TOKENS + 1)}
    assert result.ok and not result.gaps and not result.protocol_errors
    recs = records(capture)
    # perf_analyzer closes its connection with the streams still open (no half-close): those calls end
    # client_disconnect, but with no request in flight.
    assert all(c["in_flight"] == [] for c in of_kind(recs, "cancel")), of_kind(recs, "cancel")

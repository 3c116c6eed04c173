"""`replay send` at a tritonserver that is stopped (SIGTERM) while the call it sends is in flight.

Triton 2.51 stops gracefully: it waits for its in-flight work up to its exit timeout (5 s here,
proxy/lab/tritonserver.py), then its gRPC server (C-core) sends GOAWAY(NO_ERROR, last stream id 2^31-1)
and a PING, then GOAWAY(NO_ERROR) with the real last stream id, and lets the calls up to it finish: a stream
still open keeps its responses coming after the GOAWAY, and ends with grpc-status 0 once its client
half-closes. Through send's recorder (which passes the GOAWAY on), send got the GOAWAY while the
recorded stream was still streaming and ended the call `connection lost` at once (closing the connection,
which the recorder then recorded as the client's disconnect); it must instead read the call to its real end.

The recorded call: one `tokens` request streaming for ``TOKENS * DELAY_MS`` (10 s), its client half-closing
after the last response, so the half-close is re-enacted well after Triton's GOAWAY.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer, model_repository
from tests.support.capture import records
from tests.support.child import wait_while_running
from tests.support.triton_client import StreamSession, token_inputs
from tests.support.triton_server import started

pytestmark = pytest.mark.timeout(300)

TOKENS, DELAY_MS = 40, 250
EXIT_TIMEOUT_S = 5  # tritonserver's --exit-timeout-secs (proxy/lab/tritonserver.py)
WAIT_S = 60.0


def _messages(capture: Path, call_id: str) -> int:
    return sum(1 for r in records(capture) if r["kind"] == "message" and r["dir"] == "s2c" and r["call"] == call_id)


def test_a_call_in_flight_when_triton_stops_ends_as_triton_ends_it(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    server = started(TritonServer(model_repository(), workdir=tmp_path / "triton"), request)
    with ProxyThread(server.grpc_url, tmp_path / "recorded", payload="full") as proxy:
        s = StreamSession(proxy.url)
        s.send("tokens", token_inputs("p", TOKENS, delay_ms=DELAY_MS), "long", enable_empty_final_response=True)
        s.take_until(lambda e: e[0] == "result" and e[2] is True, WAIT_S)
        s.close()
    (recorded_end,) = [r for r in records(proxy.capture_path) if r["kind"] == "call_end"]
    call_id = recorded_end["call"]
    recorded = _messages(proxy.capture_path, call_id)
    assert recorded_end["cause"] == "ok" and recorded == TOKENS + 1, (recorded_end, recorded)  # + the empty final

    out = tmp_path / "sent"
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from proxy.cli import main; sys.exit(main(sys.argv[1:]))",
                             "replay", "send", str(proxy.capture_path), "--target", server.grpc_url, "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        # Under way: a few responses reached send's recorder, most of the stream (and its half-close) still to come.
        wait_while_running(proc, lambda: any(_messages(f, call_id) >= 3 for f in out.glob("*.jsonl")), "the call under way")
        assert server.pid is not None
        os.kill(server.pid, signal.SIGTERM)
        stopped_at = time.time()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.stop()

    assert proc.returncode == 0, (stdout, stderr)
    assert "outcomes seen by send: grpc-status 1\n" in stdout, stdout
    (capture,) = out.glob("*.jsonl")
    (end,) = [r for r in records(capture) if r["kind"] == "call_end"]
    assert (end["call"], end["status"], end["cause"]) == (call_id, "OK", "ok"), end
    assert _messages(capture, call_id) == recorded
    # The shape tested: the call was still open when Triton's exit timeout ran out and it sent its GOAWAY.
    assert end["t_ns"] / 1e9 > stopped_at + EXIT_TIMEOUT_S, (end["t_ns"] / 1e9 - stopped_at)

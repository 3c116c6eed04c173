"""Operating the proxy against a real Triton: `record --metrics` scraped under real tritonclient traffic,
and `triton-tap health` (the container HEALTHCHECK)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer, free_port
from replay.capture import events as ev
from tests.support.capture import of_kind, records
from tests.support.triton_client import StreamSession, echo_inputs, token_inputs, wait_for

TRITON_TAP = Path(sys.executable).parent / "triton-tap"


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics as {(name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def test_metrics_follow_real_traffic(triton: TritonServer, tmp_path: Path) -> None:
    """Open streams, calls by method and cause, messages/bytes per direction, writer and latency figures."""
    started = time.monotonic()
    with ProxyThread(triton.grpc_url, tmp_path / "cap", payload="meta", drain_timeout=5,
                     metrics="127.0.0.1:0") as proxy:  # fmt: skip
        assert proxy.proxy.metrics_server is not None
        port = proxy.proxy.metrics_server.port
        stream = StreamSession(proxy.url)
        stream.send("tokens", token_inputs("m", 6, delay_ms=150), "r1")
        stream.take(1)
        during = scrape(port)
        # Scraped mid-stream: the stream is in flight and its first messages are counted.
        assert during["triton_tap_open_calls", (("method", "ModelStreamInfer"),)] == 1
        assert during["triton_tap_messages_total", (("direction", "c2s"),)] >= 1
        assert during["triton_tap_messages_total", (("direction", "s2c"),)] >= 1
        stream.take(5)
        stream.close()
        with grpcclient.InferenceServerClient(proxy.url) as client:
            client.infer("echo", echo_inputs(np.arange(4, dtype=np.uint8)))
        cancelled = StreamSession(proxy.url)
        cancelled.send("tokens", token_inputs("c", 50, delay_ms=100), "r2")
        cancelled.take(1)
        cancelled.close(cancel_requests=True)

        def ended(method: str, cause: str) -> float:
            return scrape(port).get(("triton_tap_calls_total", (("cause", cause), ("method", method))), 0)

        wait_for(lambda: ended("ModelStreamInfer", "client_cancel") == 1, 20, "the cancelled stream's end")
        wait_for(lambda: scrape(port)["triton_tap_capture_records_written_total", ()] > 0, 20, "records written")
        after = scrape(port)
        assert ended("ModelStreamInfer", "ok") == 1
        assert ended("ModelInfer", "ok") == 1
        assert after["triton_tap_open_calls", (("method", "ModelStreamInfer"),)] == 0
        assert after["triton_tap_calls_started_total", (("method", "ModelStreamInfer"),)] == 2
        assert after["triton_tap_capture_records_dropped_total", ()] == 0
        assert after["triton_tap_capture_writer_backlog", ()] >= 0
        capture = proxy.stop()
    session_s = time.monotonic() - started
    recs = of_kind(records(capture), "message")
    whole = [r for r in recs if ev.ends_whole(r.get("decode_error"))]
    for d in ("c2s", "s2c"):
        mine = [r for r in recs if r["dir"] == d]
        assert after["triton_tap_messages_total", (("direction", d),)] == sum(r in whole for r in mine)
        assert after["triton_tap_messages_cut_total", (("direction", d),)] == sum(
            ev.ends_cut(r.get("decode_error")) for r in mine
        )
        assert after["triton_tap_message_bytes_total", (("direction", d),)] == sum(r["size"] for r in mine)
    # One latency observation per message that ended whole. Relative, not a wall-clock bound: forwarding the messages
    # one by one takes, all together, less than the session that sent them, whose streams spend most
    # of it waiting for the model (150 ms and 100 ms per token); a latency in the wrong unit, or one
    # that kept counting while the model worked, would exceed it.
    assert after["triton_tap_forwarding_latency_seconds_count", ()] == len(whole)
    assert after["triton_tap_forwarding_latency_seconds_bucket", (("le", "+Inf"),)] == len(whole)
    assert 0 < after["triton_tap_forwarding_latency_seconds_sum", ()] < session_s


def test_health_command_through_the_proxy(triton: TritonServer, recording_proxy: ProxyThread) -> None:
    """`triton-tap health` passes via a proxy in front of a ready Triton and is recorded as a call."""
    proc = subprocess.run([str(TRITON_TAP), "health", "--target", recording_proxy.url], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    capture = recording_proxy.stop()
    assert [r["method"] for r in of_kind(records(capture), "call_start")] == ["/grpc.health.v1.Health/Check"]


def test_health_command_fails_in_one_line_without_a_proxy() -> None:
    """Nothing listening: one line naming the target, exit 1."""
    port = free_port()
    proc = subprocess.run([str(TRITON_TAP), "health", "--target", f"127.0.0.1:{port}", "--timeout", "2"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"health check via 127.0.0.1:{port} failed: UNAVAILABLE" in lines[0], proc.stderr


def test_a_script_starts_record_waits_for_it_and_calls_at_once(triton: TritonServer, tmp_path: Path) -> None:
    """What a script does: start `record --ready-file`, run `health --wait` at once (the proxy is not listening
    yet), then stream through the proxy: health passes once Triton answers SERVING through it, the ready file
    names the port, and the first tritonclient stream call succeeds (no "stream is no longer in valid state")."""
    port = free_port()
    ready = tmp_path / "ready.json"
    rec = subprocess.Popen([str(TRITON_TAP), "record", "--listen", f"127.0.0.1:{port}", "--upstream", triton.grpc_url,
                            "--capture-dir", str(tmp_path / "cap"), "--ready-file", str(ready)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        health = subprocess.run([str(TRITON_TAP), "health", "--target", f"127.0.0.1:{port}", "--wait", "60"],
                                capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        assert health.returncode == 0, health.stderr
        assert health.stderr.startswith("SERVING")
        # health passed through the proxy, so it listened, so the file was written before.
        assert json.loads(ready.read_text())["listen"] == f"127.0.0.1:{port}"
        s = StreamSession(f"127.0.0.1:{port}")
        try:
            s.send("tokens", token_inputs("hi", 2), "r1", enable_empty_final_response=True)
            got = s.take_until(lambda e: e[0] == "error" or e[2] is True)
        finally:
            s.close()
        assert [(e[0], e[1], e[2]) for e in got] == [("result", "r1", False)] * 2 + [("result", "r1", True)]
    finally:
        rec.send_signal(signal.SIGTERM)
        _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    assert not ready.exists()
    capture = sorted((tmp_path / "cap").iterdir())
    methods = [r["method"] for p in capture for r in of_kind(records(p), "call_start")]
    assert methods[-1].endswith("/ModelStreamInfer") and set(methods[:-1]) == {"/grpc.health.v1.Health/Check"}

"""The admin service against a real Triton: `triton-tap tail --admin` and `status` (the real CLI) on real tritonclient traffic."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import tritonclient.grpc as grpcclient

from proxy.admin.hub import TailFilter
from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer
from replay.capture.reader import read_capture
from replay.capture.schema import decode
from replay.cli.check import check
from tests.support.admin_client import TailClient, admin_call, pb
from tests.support.loop_thread import BackgroundLoop
from tests.support.triton_client import StreamSession, echo_inputs, token_inputs, wait_for

TRITON_TAP = Path(sys.executable).parent / "triton-tap"


def _lines(directory: Path) -> list[bytes]:
    out = [line for p in sorted(directory.glob("*.jsonl")) for line in p.read_bytes().splitlines() if line]
    return sorted(out, key=lambda line: orjson.loads(line)["seq"])


def test_tail_and_status_follow_real_traffic(triton: TritonServer, tmp_path: Path) -> None:
    """`tail --admin --json` prints every record of the capture from its start to capture_end; --model filters;
    `status --json` shows the open stream; a Mark shows in the capture and in replay check."""
    bg = BackgroundLoop()
    proc = None
    try:
        with ProxyThread(triton.grpc_url, tmp_path / "cap", payload="meta", drain_timeout=5,
                         admin="127.0.0.1:0") as proxy:  # fmt: skip
            addr = proxy.proxy.admin.address
            proc = subprocess.Popen([str(TRITON_TAP), "tail", "--admin", addr, "--json"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
            echo_only = TailClient(bg, addr, TailFilter(models=frozenset({"echo"})))
            wait_for(lambda: admin_call(bg, addr, "Status", pb.StatusRequest()).tail.subscribers == 2,
                     what="the tail process to subscribe")  # fmt: skip
            admin_call(bg, addr, "Mark", pb.MarkRequest(note="load test 3", labels={"who": "e2e"}))
            stream = StreamSession(proxy.url)
            stream.send("tokens", token_inputs("m", 6, delay_ms=200), "r1")
            stream.take(1)
            st = json.loads(subprocess.run([str(TRITON_TAP), "status", "--admin", addr, "--json"],
                                           capture_output=True, check=True, timeout=60).stdout)  # fmt: skip
            (oc,) = st["open_calls"]
            assert oc["method"].endswith("ModelStreamInfer") and oc["model"] == "tokens" and oc["in_flight"] == ["r1"]
            # r1's first response reached the client: the capture's name for that list, and only that name.
            assert oc["responded"] == ["r1"] and "executing" not in oc
            stream.take(5)
            stream.close()
            with grpcclient.InferenceServerClient(proxy.url) as client:
                client.infer("echo", echo_inputs(np.arange(4, dtype=np.uint8)), request_id="e1")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        # Each printed line stands alone (a watcher may start anywhere): it decodes to the record the
        # capture's reader reads, whose file lines may omit what a call's earlier lines said.
        captured = list(read_capture(tmp_path / "cap"))
        printed = [decode(orjson.loads(line)) for line in out.splitlines()]
        first = printed[0][0]
        assert printed == captured[first:] and printed[-1][1].kind == "capture_end"
        assert len(printed) == len(_lines(tmp_path / "cap")) - first
        assert echo_only.done.wait(30) and echo_only.error is None
        echo = [orjson.loads(line) for _, line in echo_only.records()]
        assert {r.get("model") for r in echo if r["kind"] == "message"} == {"echo"}
        assert [r["kind"] for r in echo if r["kind"] != "message"] == ["mark", "call_start", "half_close", "call_end",
                                                                       "capture_end"]
        report = io.StringIO()
        check([str(tmp_path / "cap")], out=report, err=io.StringIO())
        assert "load test 3 who=e2e" in report.getvalue()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        bg.close()


def test_status_lists_open_http_and_grpc_calls(triton: TritonServer, tmp_path: Path) -> None:
    """Both ports relayed (`--listen` and `--http-listen`): `status` shows both pairs and lists an open
    HTTP generate_stream (tokens, slow) beside an open gRPC stream, each with its in-flight request."""
    import httpx

    bg = BackgroundLoop()
    http_upstream = triton.http_url.removeprefix("http://")
    with ProxyThread(triton.grpc_url, tmp_path / "cap", payload="meta", drain_timeout=5, admin="127.0.0.1:0",
                     http_listen="127.0.0.1:0", http_upstream=http_upstream) as proxy:  # fmt: skip
        addr = proxy.proxy.admin.address
        http_listen = f"127.0.0.1:{proxy.proxy.http_port}"
        stream = StreamSession(proxy.url)
        stream.send("tokens", token_inputs("g", 50, delay_ms=200), "grpc-1")
        stream.take(1)
        body = {"id": "http-1", "PROMPT": "h", "MAX_TOKENS": 50, "DELAY_MS": 200}
        with httpx.stream("POST", f"http://{http_listen}/v2/models/tokens/generate_stream", json=body,
                          timeout=60) as resp:  # fmt: skip
            lines = resp.iter_lines()  # (kept: a dropped line iterator closes the response)
            while not next(lines).startswith("data:"):
                pass

            def http_responded() -> bool:
                calls = admin_call(bg, addr, "Status", pb.StatusRequest()).open_calls
                return any(oc.method.startswith("POST") and list(oc.responded) and oc.model for oc in calls)

            wait_for(http_responded, what="the HTTP call's first event and model in the status")
            st = json.loads(subprocess.run([str(TRITON_TAP), "status", "--admin", addr, "--json"],
                                           capture_output=True, check=True, timeout=60).stdout)  # fmt: skip
            text = subprocess.run([str(TRITON_TAP), "status", "--admin", addr], capture_output=True, check=True,
                                  text=True, timeout=60).stdout  # fmt: skip
        stream.close(cancel_requests=True)
    assert (st["listen"], st["upstream"]) == (proxy.url, triton.grpc_url)
    assert (st["http_listen"], st["http_upstream"]) == (http_listen, http_upstream)
    by_method = {oc["method"]: oc for oc in st["open_calls"]}
    assert set(by_method) == {"/inference.GRPCInferenceService/ModelStreamInfer",
                              "POST /v2/models/tokens/generate_stream"}  # fmt: skip
    http = by_method["POST /v2/models/tokens/generate_stream"]
    assert (http["model"], http["in_flight"], http["responded"]) == ("tokens", ["http-1"], ["http-1"])
    assert http["in_flight_models"] == ["tokens"]
    grpc_call = by_method["/inference.GRPCInferenceService/ModelStreamInfer"]
    assert (grpc_call["in_flight"], grpc_call["in_flight_models"]) == (["grpc-1"], ["tokens"])
    assert f"{proxy.url} -> {triton.grpc_url}, http {http_listen} -> {http_upstream} (tls" in text
    assert "HTTP generate_stream" in text and "ModelStreamInfer" in text


def test_status_names_the_models_in_flight_not_the_latest(triton: TritonServer, tmp_path: Path) -> None:
    """One stream, a long `tokens` request, then an `echo` request that is answered at once: the stream's
    latest request is echo's, finished; what is in flight is tokens'. `status` names tokens (it named
    echo, a model with nothing in flight); the proto keeps the latest in `model`."""
    bg = BackgroundLoop()
    try:
        with ProxyThread(triton.grpc_url, tmp_path / "cap", payload="meta", drain_timeout=5,
                         admin="127.0.0.1:0") as proxy:  # fmt: skip
            addr = proxy.proxy.admin.address
            stream = StreamSession(proxy.url)
            try:
                stream.send("tokens", token_inputs("m", 40, delay_ms=300), "long-1")
                stream.take_until(lambda e: e[1] == "long-1")
                stream.send("echo", echo_inputs(np.arange(3, dtype=np.uint8)), "echo-1")
                stream.take_until(lambda e: e[1] == "echo-1" and e[2] is True)

                got: list[Any] = []

                def settled() -> bool:
                    got.append(admin_call(bg, addr, "Status", pb.StatusRequest()))
                    # (models come from the records the writer has published, on its own tick)
                    return [(list(oc.in_flight), oc.model) for oc in got[-1].open_calls] == [(["long-1"], "echo")]

                wait_for(settled, what="echo-1 to leave the in-flight list, its record published")
                st = got[-1]
                text = subprocess.run([str(TRITON_TAP), "status", "--admin", addr], capture_output=True, check=True,
                                      text=True, timeout=60).stdout  # fmt: skip
            finally:
                stream.close(cancel_requests=True)
    finally:
        bg.close()
    (oc,) = st.open_calls
    assert (oc.model, list(oc.in_flight), list(oc.in_flight_models)) == ("echo", ["long-1"], ["tokens"])
    (row,) = [line for line in text.splitlines() if "ModelStreamInfer" in line]
    assert "tokens" in row and "echo" not in row, text


def test_a_filtered_watcher_and_a_moved_capture_file(triton: TritonServer, tmp_path: Path) -> None:
    """`tail --admin --model echo` watching while the operator renames the live capture file: the proxy
    writes `files_removed` (reason moved) and goes on in a new file. That record has no call; the filter read
    one, raised in the writer's thread and stopped the capture for good (no gap, nothing said until a
    traceback at shutdown). Now the watcher gets it, and the calls after it are recorded and watched."""
    bg = BackgroundLoop()
    try:
        with ProxyThread(triton.grpc_url, tmp_path / "cap", payload="meta", drain_timeout=5,
                         admin="127.0.0.1:0") as proxy:  # fmt: skip
            addr = proxy.proxy.admin.address
            watcher = TailClient(bg, addr, TailFilter(models=frozenset({"echo"})))
            wait_for(lambda: admin_call(bg, addr, "Status", pb.StatusRequest()).tail.subscribers == 1,
                     what="the watcher to subscribe")  # fmt: skip
            with grpcclient.InferenceServerClient(proxy.url) as client:
                client.infer("echo", echo_inputs(np.arange(4, dtype=np.uint8)), request_id="before-move")
                live = proxy.capture_path
                wait_for(live.exists, what="the live capture file")
                live.rename(tmp_path / "cap" / "renamed-by-operator.jsonl")

                def kinds() -> list[str]:
                    return [orjson.loads(line)["kind"] for _, line in watcher.records()]

                wait_for(lambda: "files_removed" in kinds(), what="the watcher to get files_removed")
                client.infer("echo", echo_inputs(np.arange(4, dtype=np.uint8)), request_id="after-move")
                wait_for(lambda: kinds().count("call_end") == 2, what="the watcher to get the second call")
        assert watcher.done.wait(30) and watcher.error is None
    finally:
        bg.close()
    recs = [r for _, r in read_capture(sorted((tmp_path / "cap").glob("capture-*")))]
    assert [r.request_id for r in recs if r.kind == "message" and r.dir == "c2s"] == ["after-move"]
    assert recs[-1].kind == "capture_end"
    (removed,) = [r for r in recs if r.kind == "files_removed"]
    assert removed.reason == "moved"

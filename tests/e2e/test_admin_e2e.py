"""The admin service against a real Triton: `triton-tap tail --admin` and `status` (the real CLI) on real tritonclient traffic."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

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

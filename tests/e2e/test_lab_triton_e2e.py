"""`triton-tap lab triton` as a user runs it: the installed console script starts a real CPU tritonserver,
prints its addresses once ready, serves real tritonclient calls, and on Ctrl-C (SIGINT) or SIGTERM stops the
server, its backend stubs included, removes its temporary directory and exits 0; a server that dies is
reported (exit 1) with its log kept."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from proxy.lab.tritonserver import group_alive

pytestmark = pytest.mark.timeout(300)

READY_TIMEOUT_S = 240
STOP_TIMEOUT_S = 60


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    """Stdout lines as they come (None at EOF), so that waiting for them can time out."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="lab-stdout", daemon=True).start()
    return lines


def _ready_output(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> str:
    """Everything printed up to and including the `log` line, the last of the ready block."""
    out = ""
    while not re.search(r"^  log ", out, re.MULTILINE):
        line = lines.get(timeout=READY_TIMEOUT_S)
        if line is None:
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"triton-tap lab triton ended before it was ready (exit {proc.wait(10)}); "
                                 f"stdout: {out!r}; stderr: {err!r}")  # fmt: skip
        out += line
    return out


def _get(url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no http_proxy
    with opener.open(url, timeout=10) as response:
        return str(response.read().decode())


def _start() -> subprocess.Popen[str]:
    exe = Path(sys.executable).with_name("triton-tap")  # the console script `pip install -e .` made
    return subprocess.Popen(
        [str(exe), "lab", "triton", "--grpc-port", "0", "--http-port", "0", "--metrics-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _field(out: str, name: str) -> str:
    """A value of the ready block (``  grpc     127.0.0.1:...``)."""
    found = re.search(rf"^  {name} +(.*)$", out, re.MULTILINE)
    assert found, out
    return found[1]


def _pid(out: str) -> int:
    found = re.search(r"^tritonserver 2\.51\.0 ready \(pid (\d+)\)", out, re.MULTILINE)
    assert found, out
    return int(found[1])


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_prints_its_addresses_serves_and_stops_the_server_on_a_signal(stop_signal: signal.Signals) -> None:
    proc = _start()
    server_pid = None
    try:
        out = _ready_output(proc, _lines(proc))
        server_pid = _pid(out)
        grpc, metrics = _field(out, "grpc"), _field(out, "metrics")
        assert re.fullmatch(r"127\.0\.0\.1:\d+", grpc) and re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", metrics), out
        assert {"echo", "tokens"} <= set(_field(out, "models").split(", ")), out
        workdir = Path(_field(out, "log")).parent

        # A real call to the printed gRPC address, and the printed metrics endpoint counts it.
        client = grpcclient.InferenceServerClient(grpc)
        data = grpcclient.InferInput("INPUT", [3], "UINT8")
        data.set_data_from_numpy(np.array([1, 2, 3], dtype=np.uint8))
        result = client.infer("echo", [data])
        client.close()
        assert result.as_numpy("OUTPUT").tolist() == [1, 2, 3]
        counted = 'nv_inference_request_success{model="echo",version="1"} 1'
        deadline = time.monotonic() + 30
        while counted not in (page := _get(metrics)):
            assert time.monotonic() < deadline, page
            time.sleep(0.1)
        assert workdir.is_dir()

        proc.send_signal(stop_signal)
        assert proc.wait(STOP_TIMEOUT_S) == 0, proc.stderr.read() if proc.stderr else ""
        assert not group_alive(server_pid), "tritonserver (or a backend stub of it) outlived the command"
        assert not workdir.exists(), "the temporary directory was left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if server_pid is not None and group_alive(server_pid):
            os.killpg(server_pid, signal.SIGKILL)  # the server runs in a session (group) of its own


def test_a_server_that_dies_is_reported_with_its_log_kept() -> None:
    """A tritonserver killed under the command (a crash, as far as it can tell): exit 1, the last lines of the
    server's log on stderr, and the log kept where it says. Killing the real server is the real crash."""
    proc = _start()
    server_pid, log = None, None
    try:
        out = _ready_output(proc, _lines(proc))
        server_pid = _pid(out)
        log = Path(_field(out, "log"))
        os.killpg(server_pid, signal.SIGKILL)
        assert proc.wait(STOP_TIMEOUT_S) == 1
        err = proc.stderr.read() if proc.stderr else ""
        assert f"tritonserver exited by itself with code -9; last lines of {log}:" in err, err
        assert "Started GRPCInferenceService" in err, err  # the log's tail, as Triton wrote it
        assert log.is_file()
        assert not group_alive(server_pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if server_pid is not None and group_alive(server_pid):
            os.killpg(server_pid, signal.SIGKILL)
        if log is not None:
            shutil.rmtree(log.parent, ignore_errors=True)  # kept by the command, for the user

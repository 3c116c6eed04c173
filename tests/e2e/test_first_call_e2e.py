"""A fresh `triton-tap record` has done at start-up what its first call would otherwise do on the data path
(proxy/ops/warmup.py): the first call through it, to the real tritonserver, imports no module and starts no
thread (the capture writer's thread runs before any traffic), and the objects start-up left behind are out of
the collector's generations (frozen), so no collection under traffic traverses them."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from proxy.lab.tritonserver import TritonServer

pytestmark = pytest.mark.timeout(180)

# The proxy as the CLI runs it, plus one line at exit saying how many objects the collector has frozen.
PROXY = (
    "import atexit, gc, sys\n"
    "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr, flush=True))\n"
    "from proxy.cli import record_main\n"
    "sys.exit(record_main(sys.argv[1:]))\n"
)
IMPORT_LINE = "import time:"  # what -X importtime writes to stderr for each module imported


def _wait(what: str, condition: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_the_first_call_imports_nothing_starts_no_thread_and_meets_a_settled_heap(
    triton: TritonServer, tmp_path: Path
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-c", PROXY, "--listen", "127.0.0.1:0", "--upstream", triton.grpc_url,
         "--capture-dir", str(tmp_path)],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)

    reader = threading.Thread(target=pump, name="proxy-stderr", daemon=True)
    reader.start()
    try:
        while not seen or '"recording"' not in seen[-1]:
            seen.append(lines.get(timeout=60))
        ready = json.loads(seen[-1])
        capture = Path(ready["capture"])
        threads = sorted(os.listdir(f"/proc/{proc.pid}/task"))
        size = capture.stat().st_size

        client = grpcclient.InferenceServerClient(ready["listen"])
        data = grpcclient.InferInput("INPUT", [4], "UINT8")
        data.set_data_from_numpy(np.arange(4, dtype=np.uint8))
        assert client.infer("echo", [data]).as_numpy("OUTPUT").tolist() == [0, 1, 2, 3]
        client.close()
        # The call's records written: the writer thread has had its first batch.
        _wait("the first call's records in the capture", lambda: capture.stat().st_size > size)

        assert sorted(os.listdir(f"/proc/{proc.pid}/task")) == threads, "the first call started a thread"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(30)
    while not lines.empty():
        seen.append(lines.get())
    # Between the ready line and the shutdown's first line: the first call and its records' batch.
    start = next(i for i, line in enumerate(seen) if '"recording"' in line)
    end = next(i for i, line in enumerate(seen) if '"shutting_down"' in line)
    traffic = seen[start + 1 : end]
    assert any('"call_end"' in line for line in traffic), traffic
    imported = [line.strip() for line in traffic if line.startswith(IMPORT_LINE)]
    assert not imported, f"modules imported by the first call: {imported}"
    (frozen,) = [int(line.split()[1]) for line in seen if line.startswith("frozen ")]
    assert frozen > 10_000, f"start-up's objects were not frozen: {frozen}"


def test_the_measuring_script_times_fresh_proxies_warm_ones_and_direct(
    triton: TritonServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m proxy.lab.firstcall` (the measurement behind docs/benchmarks.md's first-call figures) runs
    against a real server and reports every figure it promises."""
    from proxy.lab.firstcall import main

    assert main(["--runs", "1", "--upstream", triton.grpc_url, "--", "--payload", "none"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("run 1: first call through a fresh proxy "), out
    ms = r"\d+\.\d\d ms"
    assert re.fullmatch(
        rf"median of 1 fresh proxies: first call {ms}, a new connection through the warm proxy {ms}, later calls "
        rf"{ms}; direct: first call {ms}, later calls {ms}", out.splitlines()[-1]
    ), out

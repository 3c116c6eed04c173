"""`record --workers 2` against a real Triton: one port, two processes, one capture set read as one
capture, SIGHUP reopening every worker's file, and SIGTERM draining every worker's calls."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from proxy.lab.tritonserver import TritonServer, free_port
from replay.capture import events as ev
from replay.capture.reader import read_capture
from tests.support.triton_client import echo_inputs, wait_for


def _starts(capture_dir: Path) -> list[Path]:
    return sorted(p for p in capture_dir.glob("capture-*.w*.jsonl") if p.read_bytes().count(b"\n") >= 1)


def _call_conns(capture_dir: Path) -> set[str]:
    """Connection ids of the calls recorded so far (records reach the file within ~20 ms)."""
    out = set()
    for p in capture_dir.glob("capture-*.w*.jsonl"):
        for line in p.read_bytes().splitlines():
            if b'"kind":"call_start"' in line:
                out.add(line.split(b'"conn":"')[1].split(b'"')[0].decode())
    return out


def test_two_workers_one_capture_set(triton: TritonServer, tmp_path: Path) -> None:
    """Connections spread over both workers; SIGHUP reopens both files; SIGTERM lets an in-flight call finish; the
    set reads as one capture."""
    port = free_port()
    captures = tmp_path / "captures"
    log = (tmp_path / "proxy.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy", "--workers", "2", "--listen", f"127.0.0.1:{port}",
         "--upstream", triton.grpc_url, "--capture-dir", str(captures), "--drain-timeout", "20",
         "--compress", "none"],  # plain files: the test watches lines arrive in them
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(lambda: captures.exists() and len(_starts(captures)) == 2, what="two workers' capture files")
        # A capture file is opened before its worker listens: the `recording` line says it serves.
        wait_for(lambda: (tmp_path / "proxy.log").read_bytes().count(b'"event":"recording"') == 2, what="both workers serving")
        lines = [json.loads(x) for x in (tmp_path / "proxy.log").read_bytes().splitlines() if b'"event":"recording"' in x]
        assert sorted(line["worker"] for line in lines) == [0, 1]  # (which worker each line is)
        url = f"127.0.0.1:{port}"
        data = np.arange(8, dtype=np.uint8)
        # Each client its own connection (no shared subchannel), so the kernel balances them.
        for i in range(64):
            with grpcclient.InferenceServerClient(url, channel_args=[("grpc.use_local_subchannel_pool", 1)]) as c:
                out = c.infer("echo", echo_inputs(data), request_id=f"u{i}")
                assert (out.as_numpy("OUTPUT") == data).all()
            conns = _call_conns(captures)
            if {c[:2] for c in conns} == {"w0", "w1"}:
                break
        wait_for(lambda: {c[:2] for c in _call_conns(captures)} == {"w0", "w1"}, what="calls on both workers")
        # logrotate's SIGHUP to the supervisor: every worker reopens its file, and the set goes on.
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: len(list(captures.glob("capture-*.w*.jsonl"))) == 4, what="both workers' next files")
        assert proc.poll() is None
        # A call in flight when SIGTERM arrives: its worker drains it, then exits.
        done: queue.Queue[tuple[object, object]] = queue.Queue()
        slow = grpcclient.InferenceServerClient(url)
        slow.async_infer("echo", echo_inputs(data, delay_ms=1500), lambda result, error: done.put((result, error)), request_id="slow")
        wait_for(lambda: b'"request_id":"slow"' in b"".join(p.read_bytes() for p in captures.glob("*.jsonl")),
                 what="the slow call recorded")  # fmt: skip
        proc.send_signal(signal.SIGTERM)
        result, error = done.get(timeout=60)
        slow.close()
        assert error is None and (result.as_numpy("OUTPUT") == data).all(), error  # type: ignore[attr-defined]
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    reader = read_capture(captures)
    recs = [r for _, r in reader]
    assert reader.captures == 1 and reader.gaps == [] and reader.warnings == []
    starts = [r for r in recs if isinstance(r, ev.CaptureStarted)]
    assert sorted((r.worker, r.workers) for r in starts) == [(0, 2), (0, 2), (1, 2), (1, 2)]  # (reopened once)
    assert len({r.capture_set for r in starts}) == 1
    ends = [r for r in recs if isinstance(r, ev.CaptureEnded)]
    assert sorted(e.reason for e in ends) == ["reopen", "reopen", "shutdown", "shutdown"]
    call_ends = {r.call: r for r in recs if isinstance(r, ev.CallEnded)}
    call_starts = [r for r in recs if isinstance(r, ev.CallStarted)]
    assert {r.call for r in call_starts} == set(call_ends)  # call ids unique across the set
    assert all(e.cause == "ok" for e in call_ends.values()), [e.cause for e in call_ends.values()]
    assert [r.request_id for r in recs if isinstance(r, ev.MessageSeen) and r.dir == "s2c"].count("slow") == 1


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (its new parent may be slow to reap it, or never do)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_workers_stop_when_the_supervisor_is_killed(triton: TritonServer, tmp_path: Path) -> None:
    """SIGKILL to the supervisor runs no handler: its workers went on relaying and recording on the port, with
    parent 1, beside the set a restart starts (which took the port too, SO_REUSEPORT). Each worker now gets a
    SIGTERM when its supervisor dies, drains and closes its chain as on the supervisor's own SIGTERM."""
    import json

    port = free_port()
    captures = tmp_path / "captures"
    log = (tmp_path / "proxy.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy", "--workers", "2", "--listen", f"127.0.0.1:{port}",
         "--upstream", triton.grpc_url, "--capture-dir", str(captures), "--compress", "none"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    pids: list[int] = []
    try:
        wait_for(lambda: (tmp_path / "proxy.log").read_bytes().count(b'"event":"recording"') == 2, what="both workers serving")
        lines = [json.loads(x) for x in (tmp_path / "proxy.log").read_bytes().splitlines() if b'"event":"recording"' in x]
        assert sorted(line["worker"] for line in lines) == [0, 1]  # (which worker each line is)
        (started,) = [json.loads(line) for line in (tmp_path / "proxy.log").read_bytes().splitlines()
                      if b'"event":"workers_started"' in line]  # fmt: skip
        pids = started["pids"]
        assert len(pids) == 2 and all(_running(p) for p in pids)
        proc.kill()
        proc.wait(30)
        wait_for(lambda: not any(_running(p) for p in pids), 60, "the workers to stop after their supervisor")
    finally:
        for p in pids:
            if _running(p):
                os.kill(p, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    ends = [r for _, r in read_capture(captures) if isinstance(r, ev.CaptureEnded)]
    assert sorted(e.reason for e in ends) == ["shutdown", "shutdown"]

"""Readiness for scripts: `record`/`serve --ready-file PATH`, and `health --wait` when nothing listens.

Real processes (the console script, `python -m proxy`), real sockets. `record`'s upstream here is a
bare listening socket: the proxy only needs it to accept its start-up check, and no call is made
through it (tests/e2e/test_operating_e2e.py runs `health --wait` and a call through a real Triton).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient

from proxy.lab.tritonserver import free_port
from tests.support.capture import records
from tests.support.child import wait_while_running
from tests.support.paths import DATA, ROOT

TRITON_TAP = Path(sys.executable).parent / "triton-tap"


def _accepts(listen: str) -> bool:
    host, port = listen.rsplit(":", 1)
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) == 0


def _until_ready(proc: subprocess.Popen[str], ready: Path, timeout: float = 60) -> dict[str, Any]:
    """Poll for the ready file; the moment it is there it must be whole and its address must accept a connection."""
    wait_while_running(proc, ready.exists, "the ready file appeared", timeout, poll_s=0.005)
    info: dict[str, Any] = json.loads(ready.read_text())  # written atomically: never half a line
    assert _accepts(info["listen"]), f"ready file written before {info['listen']} accepted connections"
    return info


def _recording(tmp_path: Path, listening: int, ready: Path, *flags: str) -> subprocess.Popen[str]:
    """`record` on a free loopback port (``flags`` may name another) in front of ``listening``, with ``ready``."""
    return subprocess.Popen([str(TRITON_TAP), "record", "--listen", "127.0.0.1:0", "--upstream", f"127.0.0.1:{listening}",
                             "--capture-dir", str(tmp_path / "cap"), "--ready-file", str(ready), *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM; stderr. The exit status is the caller's to check (after a failed check it would only add noise)."""
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=60)[1]


def test_record_writes_the_ready_file_once_it_accepts_connections(tmp_path: Path, listening: int) -> None:
    """`python -m proxy --ready-file`: the file appears only when the port (0: a free one) accepts connections,
    names the bound address, the pid, the admin address and the capture; shutdown removes it."""
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen([sys.executable, "-m", "proxy", "--listen", "127.0.0.1:0", "--upstream",
                             f"127.0.0.1:{listening}", "--capture-dir", str(tmp_path / "cap"), "--ready-file",
                             str(ready), "--admin", "127.0.0.1:0"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        info = _until_ready(proc, ready)
        assert info["pid"] == proc.pid and info["listen"] != "127.0.0.1:0" and _accepts(info["admin"])
        assert info["metrics"] is None and Path(info["capture"]).parent == tmp_path / "cap"
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    finally:
        err = _stop(proc)
    assert proc.returncode == 0, err
    assert not ready.exists()
    # The ready log line says the same address.
    (line,) = [json.loads(x) for x in err.splitlines() if '"recording"' in x]
    assert line["listen"] == info["listen"]
    assert line["admin"] == info["admin"] and "worker" not in line  # (the bound admin port, as docs/admin.md says)


_SIGTERM_AS_READY = """
import os, signal, sys
from replay import readyfile
from proxy.cli import record_main

written = readyfile.write
def write_then_sigterm(*args, **kwargs):
    written(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)  # a script that stops the proxy the moment it reads the file
readyfile.write = write_then_sigterm
sys.argv[0] = "proxy"
sys.exit(record_main())
"""


def test_a_sigterm_the_moment_the_ready_file_is_written_stops_cleanly(tmp_path: Path, listening: int) -> None:
    """The signal handlers are in place before the ready file says "signal me now": a SIGTERM sent from inside
    the write (no race left to the scheduler) ends in a clean shutdown, exit 0, the file removed, the capture
    closed with its capture_end, not in a process killed with the capture open."""
    ready = tmp_path / "ready.json"
    proc = subprocess.run([sys.executable, "-c", _SIGTERM_AS_READY, "--listen", "127.0.0.1:0", "--upstream",
                           f"127.0.0.1:{listening}", "--capture-dir", str(tmp_path / "cap"), "--ready-file",
                           str(ready)],
                          cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert not ready.exists()
    (capture,) = (tmp_path / "cap").glob("capture-*")
    assert records(capture)[-1]["kind"] == "capture_end"


def test_serve_writes_the_ready_file_and_a_client_can_call_at_once(tmp_path: Path) -> None:
    """`triton-tap serve --ready-file`: when the file appears, tritonclient's first call succeeds (no "stream is
    no longer in valid state"); the file goes at shutdown."""
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen([str(TRITON_TAP), "serve", str(DATA / "unary.jsonl"), "--listen", "127.0.0.1:0",
                             "--ready-file", str(ready)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        info = _until_ready(proc, ready)
        assert info["pid"] == proc.pid
        with grpcclient.InferenceServerClient(info["listen"]) as client:
            # The call completes (the captured ServerLive answer had no message: live=false, as captured).
            assert client.is_server_live() is False
    finally:
        err = _stop(proc)
    assert proc.returncode == 0, err
    assert not ready.exists()


@pytest.mark.parametrize("command", ["record", "serve"])
def test_a_ready_file_in_a_missing_directory_is_one_line_before_anything_starts(tmp_path: Path, listening: int,
                                                                                command: str) -> None:  # fmt: skip
    """Exit 2, one line naming the directory; record leaves no capture behind."""
    ready = tmp_path / "no" / "ready.json"
    if command == "record":
        args = ["record", "--listen", "127.0.0.1:0", "--upstream", f"127.0.0.1:{listening}", "--capture-dir",
                str(tmp_path / "cap")]  # fmt: skip
    else:
        args = ["serve", str(DATA / "stream_cancel.jsonl"), "--listen", "127.0.0.1:0"]
    proc = subprocess.run([str(TRITON_TAP), *args, "--ready-file", str(ready)], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"triton-tap: error: --ready-file {str(ready)!r}: directory {str(ready.parent)!r} does not exist"]
    assert not list(tmp_path.glob("cap/capture-*"))


def test_ready_file_with_workers_is_refused_in_one_line(tmp_path: Path, listening: int) -> None:
    """Workers listen each on its own: there is no one moment to call ready; the refusal points at health --wait."""
    proc = subprocess.run([str(TRITON_TAP), "record", "--workers", "2", "--upstream", f"127.0.0.1:{listening}",
                           "--capture-dir", str(tmp_path / "cap"), "--ready-file", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "triton-tap: error: --ready-file works with one process: with --workers use `triton-tap health --wait`"
    ]


def test_health_wait_fails_in_one_line_when_nothing_listens() -> None:
    """`health --wait 1` with nothing on the port: it keeps asking for the whole second, then one line, exit 1."""
    port = free_port()
    t0 = time.monotonic()
    proc = subprocess.run([str(TRITON_TAP), "health", "--target", f"127.0.0.1:{port}", "--wait", "1"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"triton-tap: error: health check via 127.0.0.1:{port} failed: UNAVAILABLE: "
                           "connection refused (nothing listens there); still so after waiting 1 s (")  # fmt: skip
    assert line.endswith(" tries)") and int(line.rsplit("(", 1)[1].split()[0]) >= 2
    assert elapsed >= 1.0


def test_a_leftover_ready_file_is_removed_before_anything_else(tmp_path: Path) -> None:
    """A ready file left by a killed run is removed at start-up, before the upstream check: a run that then
    fails (nothing listens upstream: exit 1) leaves no file claiming it is ready."""
    ready = tmp_path / "ready.json"
    ready.write_text('{"pid": 1, "listen": "127.0.0.1:1"}\n')
    proc = subprocess.run([str(TRITON_TAP), "record", "--listen", "127.0.0.1:0", "--upstream",
                           f"127.0.0.1:{free_port()}", "--capture-dir", str(tmp_path / "cap"), "--ready-file", str(ready)],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 1 and "is unreachable" in proc.stderr
    assert not ready.exists()


def test_pid_in_the_ready_file_is_the_process_that_listens(tmp_path: Path, listening: int) -> None:
    """`os.kill(pid, 0)` on the file's pid reaches the running proxy (a script can tell a leftover from a live file)."""
    ready = tmp_path / "ready.json"
    proc = _recording(tmp_path, listening, ready)
    try:
        info = _until_ready(proc, ready)
        os.kill(info["pid"], 0)
        assert info["pid"] == proc.pid
    finally:
        _stop(proc)


def test_a_running_servers_ready_file_is_not_taken_by_a_second_one_that_fails(tmp_path: Path, listening: int) -> None:
    """A second `record` given the running one's ready file (and its busy port) is refused in one line, and the
    running one's file stays: scripts poll it, and the proxy still accepts connections."""
    ready = tmp_path / "ready.json"
    first = _recording(tmp_path, listening, ready)
    try:
        info = _until_ready(first, ready)
        second = subprocess.run([str(TRITON_TAP), "record", "--listen", info["listen"], "--upstream",
                                 f"127.0.0.1:{listening}", "--capture-dir", str(tmp_path / "cap2"), "--ready-file",
                                 str(ready)], capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert second.returncode == 2, second.stderr
        assert second.stderr.strip() == (f"triton-tap: error: --ready-file {str(ready)!r} is the ready file of a server "
                                         f"still running (pid {first.pid}): give another path")  # fmt: skip
        assert json.loads(ready.read_text()) == info and _accepts(info["listen"])
    finally:
        _stop(first)
    assert not ready.exists()


@pytest.mark.parametrize("command", ["record", "serve"])
def test_a_ready_file_path_that_is_a_capture_or_no_ready_file_is_never_removed(tmp_path: Path, command: str) -> None:
    """`serve CAP --ready-file CAP` deleted the capture, then failed on it; `record` did the same to a capture
    given by mistake, on a busy port. A capture's name is refused, and any file that is no ready file kept."""
    capture = tmp_path / "capture-20261206T100000-1.jsonl"
    capture.write_bytes((DATA / "unary.jsonl").read_bytes())
    other = tmp_path / "notes.txt"
    other.write_text("mine\n")
    head = ([str(TRITON_TAP), "serve", str(capture), "--listen", "127.0.0.1:0"] if command == "serve" else
            [str(TRITON_TAP), "record", "--listen", "127.0.0.1:0", "--upstream", f"127.0.0.1:{free_port()}",
             "--capture-dir", str(tmp_path / "cap")])  # fmt: skip
    for path, says in ((capture, "has a capture file's name"), (other, "exists and is not a ready file")):
        proc = subprocess.run([*head, "--ready-file", str(path)], capture_output=True, text=True, timeout=60,
                              check=False)  # fmt: skip
        assert proc.returncode == 2 and says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert capture.read_bytes() == (DATA / "unary.jsonl").read_bytes() and other.read_text() == "mine\n"


def test_ipv6_addresses_are_written_with_brackets_everywhere_a_client_reads_them(tmp_path: Path, listening: int) -> None:
    """`--listen [::1]:0 --admin [::1]:0 --metrics [::1]:0`: the ready file and capture_start say `[::1]:PORT`,
    which grpc and tritonclient take; `::1:PORT`, as they said, is "Misformatted domain name" to them."""
    import grpc

    from replay.hostport import parse_hostport

    ready = tmp_path / "ready.json"
    proc = _recording(tmp_path, listening, ready, "--listen", "[::1]:0", "--admin", "[::1]:0", "--metrics", "[::1]:0",
                      "--compress", "none")
    try:
        wait_while_running(proc, ready.exists, "the ready file appeared", 60, poll_s=0.005)
        info = json.loads(ready.read_text())
        for key in ("listen", "admin", "metrics"):
            assert info[key].startswith("[::1]:") and parse_hostport(info[key], key)[0] == "::1", info
        with grpc.insecure_channel(info["admin"]) as channel:  # the address as a client takes it
            grpc.channel_ready_future(channel).result(timeout=60)
    finally:
        _stop(proc)
    (start,) = [r for r in records(next((tmp_path / "cap").iterdir())) if r["kind"] == "capture_start"]
    assert start["listen"] == info["listen"]

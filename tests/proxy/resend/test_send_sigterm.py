"""`replay send` stopped by SIGTERM (a harness's timeout, `kill`) or SIGHUP (its terminal closed) stops as Ctrl-C does: the calls in flight end as
the recorder's stop ends them, the capture gets its `capture_end`, exit 130, nothing on stderr.

A real `triton-tap replay send` process; its target is the mock Triton (`serve`'s MockTriton, in this process),
which answers as long as the test needs without a model. The capture it sends is recorded first by the proxy
between tritonclient and that mock (the test data's captures hold no request headers to send)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.lab.background import ProxyThread
from replay.capture.reader import read_capture
from replay.errors import EXIT_INTERRUPTED
from replay.tools.serve import MockTriton, load
from tests.support.child import wait_while_running
from tests.support.loop_thread import BackgroundLoop
from tests.support.paths import DATA
from tests.support.triton_client import stream_to_its_end

TRITON_TAP = Path(sys.executable).parent / "triton-tap"


def _recorded(target: str, directory: Path) -> Path:
    """A stream through the recording proxy (payload full) to ``target``: its capture."""
    proxy = ProxyThread(target, directory, payload="full").start()
    try:
        stream_to_its_end(f"127.0.0.1:{proxy.proxy.port}")
    finally:
        path = proxy.stop()
    return path


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_mid_run_ends_the_capture_and_exits_as_interrupted(tmp_path: Path, sig: signal.Signals) -> None:
    """(SIGHUP's default action left the capture without its end, exit 129.)"""
    loop = BackgroundLoop()
    server = MockTriton(load(DATA / "stream_cancel.jsonl"), speed=1.0)
    port = loop.run(server.start("127.0.0.1:0"))
    proc: subprocess.Popen[str] | None = None
    try:
        captured = _recorded(f"127.0.0.1:{port}", tmp_path / "recorded")
        out = tmp_path / "sent"
        proc = subprocess.Popen([str(TRITON_TAP), "replay", "send", str(captured), "--target",
                                 f"127.0.0.1:{port}", "--out", str(out), "--loop", "1000"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        # Under way: the recorder has written a batch of records beyond its capture_start.
        wait_while_running(proc, lambda: any(f.stat().st_size > 2000 for f in out.glob("capture-*")), "send got going")
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        loop.run(server.stop(0))
        loop.close()
    assert proc.returncode == EXIT_INTERRUPTED, stderr
    assert "Traceback" not in stderr and stdout == ""
    records = [r for _, r in read_capture(out)]
    assert records[0].kind == "capture_start" and records[-1].kind == "capture_end"
    assert sum(r.kind == "call_start" for r in records) < 1000  # stopped mid-run
    # Nothing cut off: every call started has its end (those in flight: as the sender's connections closed).
    ends = {r.call: r.cause for r in records if r.kind == "call_end"}
    assert {r.call for r in records if r.kind == "call_start"} == set(ends)

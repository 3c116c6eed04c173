"""The supervisor of ``record --workers N`` stopped while its workers are still starting.

The workers here are stand-ins (a Python that reads its configuration and sleeps, with no handler of
its own): what a real worker is before its handlers are in place, a window too short to hit on purpose.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proxy.ops import workers
from proxy.ops.server import ProxyConfig

_STARTING = "import sys, time; sys.stdin.buffer.read(); time.sleep(120)"


class _SignalWhenStarted:
    """``log`` for the supervisor: at ``workers_started`` (every worker spawned) SIGTERM this process, as
    systemd stopping a unit at once would."""

    def info(self, event: str, **fields: Any) -> None:
        if event == "workers_started":
            os.kill(os.getpid(), signal.SIGTERM)

    def warning(self, event: str, **fields: Any) -> None:
        raise AssertionError(f"unexpected warning {event}: {fields}")


def test_a_stop_before_the_workers_handle_signals_exits_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM to the supervisor reaches workers still starting: each dies of the signal (no handler of its
    own yet, nothing opened, nothing lost): the stop went as asked, exit 0, not the 1 of a failed worker."""
    spawned: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen(args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        p = real_popen([sys.executable, "-c", _STARTING], **kwargs)
        spawned.append(p)
        return p

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(workers, "log", _SignalWhenStarted())
    cfg = ProxyConfig(listen="127.0.0.1:0", upstream="127.0.0.1:1", capture_dir=tmp_path, workers=2)
    try:
        assert workers.supervise(cfg, "info") == 0
    finally:
        for p in spawned:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert len(spawned) == 2

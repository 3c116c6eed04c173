"""The supervisor of ``record --workers N`` stopped while its workers are still starting.

The workers here are stand-ins (a Python that reads its configuration and sleeps, with no handler of
its own): what a real worker is before its handlers are in place, a window too short to hit on purpose.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
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


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Workers spawned by the supervisor are stand-ins (see the module docstring); each is stopped at teardown."""
    spawned: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen(args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        p = real_popen([sys.executable, "-c", _STARTING], **kwargs)
        spawned.append(p)
        return p

    monkeypatch.setattr(subprocess, "Popen", popen)
    # (The stand-ins relay nothing: the supervisor's upstream check, before any worker starts, is not theirs.)
    monkeypatch.setattr(workers, "check_upstream", lambda *args, **kwargs: None)
    try:
        yield spawned
    finally:
        for p in spawned:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_stop_before_the_workers_handle_signals_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stand_ins: list[subprocess.Popen[bytes]]
) -> None:
    """SIGTERM to the supervisor reaches workers still starting: each dies of the signal (no handler of its
    own yet, nothing opened, nothing lost): the stop went as asked, exit 0, not the 1 of a failed worker."""
    monkeypatch.setattr(workers, "log", _SignalWhenStarted())
    cfg = ProxyConfig(listen="127.0.0.1:0", upstream="127.0.0.1:1", capture_dir=tmp_path, workers=2)
    assert workers.supervise(cfg, "info") == 0
    assert len(stand_ins) == 2


class _HangUpThenStopWhenStarted:
    """``log`` for the supervisor: at ``workers_started`` SIGHUP this process (logrotate's reopen, sent while
    the workers are still starting), then SIGTERM it once both workers were seen alive after the SIGHUP."""

    def __init__(self, spawned: list[subprocess.Popen[bytes]]) -> None:
        self.spawned = spawned
        self.alive_after_hup: list[bool] = []

    def info(self, event: str, **fields: Any) -> None:
        if event == "workers_started":
            os.kill(os.getpid(), signal.SIGHUP)
            # The stand-ins have no handler of their own: SIGHUP's default would end each at once.
            for p in self.spawned:
                try:
                    p.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    pass
            self.alive_after_hup = [p.poll() is None for p in self.spawned]
            os.kill(os.getpid(), signal.SIGTERM)

    def warning(self, event: str, **fields: Any) -> None:
        raise AssertionError(f"unexpected warning {event}: {fields}")


def test_a_sighup_while_the_workers_start_ends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stand_ins: list[subprocess.Popen[bytes]]
) -> None:
    """SIGHUP to the supervisor is passed to its workers (each reopens its capture); one that comes while they
    start, before their own handlers are in place, is ignored (inherited across exec): no worker and not the
    supervisor dies of it, and a SIGTERM after it still stops the set with exit 0. (That the workers reopen
    their files: tests/e2e/test_workers_e2e.py.)"""
    log = _HangUpThenStopWhenStarted(stand_ins)
    monkeypatch.setattr(workers, "log", log)
    cfg = ProxyConfig(listen="127.0.0.1:0", upstream="127.0.0.1:1", capture_dir=tmp_path, workers=2)

    def test_runner(signum: int, frame: object) -> None:
        pass  # (a supervisor that left SIGHUP alone: not the end of this process)

    before = signal.signal(signal.SIGHUP, test_runner)
    try:
        assert workers.supervise(cfg, "info") == 0
        assert signal.getsignal(signal.SIGHUP) is test_runner  # the supervisor's handlers are undone
    finally:
        signal.signal(signal.SIGHUP, before)
    assert log.alive_after_hup == [True, True]


def test_each_workers_own_ports_are_refused_before_any_starts() -> None:
    """--admin/--metrics port + k for worker k: past 65535, the listening port or busy is one line from the
    supervisor (it came out of worker k among several lines, a capture set of the others left behind)."""
    import re
    import socket

    from proxy.ops.server import ProxyConfig
    from proxy.ops.workers import _check_worker_ports
    from replay.errors import UserError

    cfg = ProxyConfig(listen="127.0.0.1:0", upstream="127.0.0.1:1", workers=2)
    with pytest.raises(UserError, match="worker 1's port would be 65536, past 65535"):
        _check_worker_ports(dataclasses.replace(cfg, admin="127.0.0.1:65535"), 9000)
    with pytest.raises(UserError, match="worker 1's port 9000 is the --listen port"):
        _check_worker_ports(dataclasses.replace(cfg, metrics="127.0.0.1:8999"), 9000)
    # Worker 0's metrics port is worker 1's admin port: one of them could not bind.
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        p = free.getsockname()[1]
    with pytest.raises(UserError, match=f"worker 0's port {p + 1} is worker 1's --admin port"):
        _check_worker_ports(dataclasses.replace(cfg, admin=f"127.0.0.1:{p}", metrics=f"127.0.0.1:{p + 1}"), 1)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(UserError, match=re.escape(f"worker 0: cannot listen on 127.0.0.1:{port}: address already in use")):
            _check_worker_ports(dataclasses.replace(cfg, admin=f"127.0.0.1:{port}"), 1)
    _check_worker_ports(dataclasses.replace(cfg, admin="127.0.0.1:0", metrics="127.0.0.1:0"), 9000)

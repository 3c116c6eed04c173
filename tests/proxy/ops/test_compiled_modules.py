"""Which compiled modules run is visible: ``triton-tap --version``, the proxy's start log line and
``capture_start.options.compiled`` name each of replay.compiled's modules as compiled or say why its Python
version runs."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from proxy.ops.server import RecordingProxy
from replay import compiled
from replay.capture import events as ev
from replay.capture.reader import read_capture
from tests.support.loop_thread import BackgroundLoop
from tests.support.paths import ROOT
from tests.support.proxy import start_lines

TRITON_TAP = Path(sys.executable).parent / "triton-tap"
#: Every compiled module, spelled out here rather than read from the registry, so that one dropped from it
#: shows: the relay's per-read path and the capture decoder and writer compiled from their source (mypyc), then the hand-written C.
ALL = ("proxy.relay.core", "proxy.relay.call", "proxy.relay.contract", "proxy.relay.recording", "proxy.relay.records",
       "proxy.wire.frames", "proxy.wire.messages", "proxy.triton.labels", "proxy.triton.pieces",
       "proxy.triton.inflight", "replay.capture.shapes", "replay.capture.sparse",
       "replay._frozen")  # fmt: skip


def _env(pure: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    if pure:
        env[compiled.PURE_ENV] = "1"
    return env


def _why_not(name: str) -> str | None:
    """Why ``name`` runs uncompiled in a process started without TRITON_TAP_PURE (None: it is compiled)."""
    if name in compiled.SOURCES:
        with pytest.MonkeyPatch.context() as mp:
            mp.delenv(compiled.PURE_ENV, raising=False)
            return compiled.sources_reason()
    return None if importlib.util.find_spec(name) is not None else "not built"


def _built(name: str) -> bool:
    return _why_not(name) is None


@pytest.mark.parametrize("pure", [False, True], ids=["default", "TRITON_TAP_PURE=1"])
def test_version_lists_every_compiled_module_and_whether_it_runs(pure: bool) -> None:
    """One line per module: ``compiled`` where it was built (and not turned off), else why the Python runs."""
    proc = subprocess.run([str(TRITON_TAP), "--version"], cwd=ROOT, env=_env(pure), capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("triton-tap ")
    shown = dict(line.split(None, 1) for line in lines[2:])
    assert list(shown) == list(ALL)
    for name, state in shown.items():
        if pure:
            assert state == "uncompiled: TRITON_TAP_PURE=1"
        else:
            assert state == ("compiled" if _built(name) else f"uncompiled: {_why_not(name)}")


def test_with_the_pure_setting_the_start_line_and_capture_say_so(tmp_path: Path, listening: int) -> None:
    """``python -m proxy`` with TRITON_TAP_PURE=1: the ``recording`` log line and the capture's
    ``capture_start.options.compiled`` both say every module runs its Python version, and why.
    (The upstream is a bare listening socket: nothing is relayed, only the start is looked at.)"""
    seen = start_lines("--upstream", f"127.0.0.1:{listening}", "--listen", "127.0.0.1:0", "--capture-dir", str(tmp_path),
                       env=_env(True))  # fmt: skip
    start_line = json.loads(seen[-1])
    assert start_line["event"] == "recording", seen
    want = dict.fromkeys(ALL, "TRITON_TAP_PURE=1")
    assert start_line["compiled"] == want
    (start,) = [r for _, r in read_capture(tmp_path) if isinstance(r, ev.CaptureStarted)]
    assert start.options["compiled"] == want


def test_capture_start_records_which_compiled_modules_ran(
    bg: BackgroundLoop, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """A proxy on a loop thread: its capture's first record names the compiled modules, each compiled where it was
    built and the setting is off. (The fake upstream only has to accept the start's connection.)"""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    bg.run(proxy.stop())
    (start,) = [r for _, r in read_capture(proxy.capture_path.parent) if isinstance(r, ev.CaptureStarted)]
    shown = start.options["compiled"]
    assert list(shown) == list(ALL)
    for name, state in shown.items():
        if compiled.pure():
            assert state == f"{compiled.PURE_ENV}={os.environ[compiled.PURE_ENV]}"
        else:
            assert state == ("compiled" if _built(name) else _why_not(name))

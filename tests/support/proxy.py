"""Helpers for a RecordingProxy living on a background event loop, and for ``python -m proxy`` as a process."""

from __future__ import annotations

import asyncio
import queue
import subprocess
import sys
import threading
import time

from proxy.ops.server import RecordingProxy
from tests.support.paths import ROOT


def stop_proxy(proxy: RecordingProxy, timeout: float = 30.0) -> None:
    """Stop the proxy (drain, close the capture) from a test thread."""
    asyncio.run_coroutine_threadsafe(proxy.stop(), proxy.loop).result(timeout)


def start_lines(*args: str, env: dict[str, str] | None = None, timeout: float = 60.0) -> list[str]:
    """What ``python -m proxy ARGS`` prints (stdout and stderr, one log line each) up to and with its ``recording``
    start line; then it is stopped. Fewer lines when it exits first; an AssertionError when neither comes within
    ``timeout`` seconds."""
    proc = subprocess.Popen([sys.executable, "-m", "proxy", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    assert proc.stdout is not None
    out = proc.stdout
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:  # a thread: a pipe read has no timeout of its own
        for line in out:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=read, name="proxy-output", daemon=True)
    reader.start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"python -m proxy printed no recording line within {timeout} s: {seen}") from None
            if line is None:
                break
            seen.append(line)
            if '"recording"' in line:
                break
    finally:
        proc.terminate()
        proc.wait(30)
        reader.join(10)
        out.close()
    return seen

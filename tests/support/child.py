"""Code run in a child interpreter: where compiled code that could crash (a segfault) must fail one test,
not end the test run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from tests.support.paths import ROOT


def run_python(code: str, *, timeout: float = 120) -> str:
    """Run ``code`` in a new interpreter and return what it printed; fail the calling test, with the
    child's stderr, when it did not exit 0 (a signal named: a crash is a failure, not a dead run).

    The child runs in the repository (it imports this tree's modules, as the test does) with freed
    memory overwritten (``PYTHONMALLOC=debug``, unless the environment names another allocator, as the
    sanitizer run does: tests/sanitize.py): a use after free then crashes every time instead of reading
    whatever was left there.
    """
    env = dict(os.environ)
    env.setdefault("PYTHONMALLOC", "debug")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    if proc.returncode != 0:
        how = f"exited with {proc.returncode}"
        if proc.returncode < 0:
            try:
                how = f"was killed by {signal.Signals(-proc.returncode).name}"
            except ValueError:
                how = f"was killed by signal {-proc.returncode}"
        pytest.fail(f"the child interpreter {how}:\n{proc.stderr[-3000:]}", pytrace=False)
    return proc.stdout


def wait_while_running(proc: subprocess.Popen[str], cond: Callable[[], bool], what: str, timeout: float = 60.0,
                       poll_s: float = 0.01) -> None:  # fmt: skip
    """Poll ``cond`` until it holds; fail, naming ``what``, if ``proc`` exits first (with what it printed) or
    ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"exited {proc.returncode} before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll_s)

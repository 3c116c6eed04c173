"""Writing a command's result to stdout when the reader may go away (``check ... | head -1``).

A closed pipe is not an error of the command: what it computed stands, so the command exits with
the code for that result, silently. rich's own handling exits 1, which reads as "violations"
(:class:`replay.cli.console.QuietConsole` turns it into the same BrokenPipeError).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO


def _silence_stdout() -> None:
    # Python flushes stdout again at exit; pointing the fd at /dev/null keeps that flush quiet too.
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def write_result(out: TextIO, write: Callable[[], Any]) -> bool:
    """Run ``write`` (which prints to ``out``) and flush; False when the reader closed the pipe."""
    try:
        write()
        out.flush()
    except BrokenPipeError:
        if out is sys.stdout or out is sys.__stdout__:
            _silence_stdout()
        return False
    return True

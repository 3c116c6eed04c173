"""Commands whose reader goes away (`| head -1`) exit quietly with the code of what they computed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import DATA

TRITON_TAP = Path(sys.executable).parent / "triton-tap"


def _run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte: every write gets EPIPE
    try:
        return subprocess.run([str(TRITON_TAP), *args], stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=60, check=False)  # fmt: skip
    finally:
        os.close(write)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("replay", "check", str(DATA / "one_response.jsonl")), 0),
        (("replay", "check", "--json", str(DATA / "one_response.jsonl")), 0),
        (("replay", "check", str(DATA / "unattributable.jsonl")), 1),
        (("diff", str(DATA / "interleaved.jsonl"), str(DATA / "interleaved.jsonl")), 0),
        (("diff", "--json", str(DATA / "interleaved.jsonl"), str(DATA / "interleaved.jsonl")), 0),
    ],
)
def test_closed_stdout_keeps_the_computed_exit_code_and_is_silent(args: tuple[str, ...], code: int) -> None:
    """A closed stdout pipe: no traceback or message, and the exit code says what was found (not 1 by rich)."""
    proc = _run_into_closed_pipe(*args)
    assert (proc.returncode, proc.stderr) == (code, "")

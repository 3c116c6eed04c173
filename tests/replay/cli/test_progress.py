"""Long `report` / `replay check` runs show a rich progress counter on a terminal, nothing otherwise."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data.make_golden import Builder

TRITON_TAP = Path(sys.executable).parent / "triton-tap"


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~12k records: 150 streams of 2 requests x 40 responses."""
    b = Builder().start()
    for s in range(150):
        call = f"c{s + 1}.1"
        b.call(call)
        for rid in ("a", "b"):
            b.request(call, rid, ms=0.1)
        for _ in range(40):
            for rid in ("a", "b"):
                b.response(call, rid, "t", final=False, ms=0.01)
        for rid in ("a", "b"):
            b.response(call, rid, None, final=True, ms=0.01)
        b.end(call)
    b.finish()
    path = tmp_path_factory.mktemp("progress") / "capture.jsonl"
    path.write_bytes(b.render())
    return path


def _stderr_on_a_tty(args: list[str]) -> str:
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    out = b""
    try:
        while True:
            ready = select.select([master], [], [], 60)[0]
            assert ready, "no output for 60 s"
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        assert proc.wait(60) in (0, 1)
        os.close(master)
    return out.decode(errors="replace")


@pytest.mark.parametrize("command", ["report", "check"])
def test_progress_on_a_terminal_only(capture: Path, tmp_path: Path, command: str) -> None:
    """On a TTY the record counter appears (at 5,000-record steps); piped stderr has no progress at all."""
    args = ([str(TRITON_TAP), "report", str(capture), "-o", str(tmp_path / "r.html")] if command == "report"
            else [str(TRITON_TAP), "replay", "check", str(capture)])  # fmt: skip
    tty = _stderr_on_a_tty(args)
    assert "reading captures: 10,000 records" in tty or "reading captures: 5,000 records" in tty, tty[-2000:]
    piped = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert "reading captures" not in piped.stderr

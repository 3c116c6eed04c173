"""Every command that talks to an address it was given (an upstream, a target, an admin service) run
against a closed port (a free loopback port nothing listens on): exit 1, the upstream's fault
(docs/exit-codes.md), and one line on stderr that says so. Real processes of the console script.

Not here, as they take no such address: `serve`, `demo` and `lab triton` (they start their own server)
and the offline commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from proxy.lab.tritonserver import free_port
from replay.errors import EXIT_FINDINGS
from tests.support.paths import DATA, ROOT

TRITON_TAP = Path(sys.executable).parent / "triton-tap"
DOC = (ROOT / "docs" / "exit-codes.md").read_text()


def _argv(command: str, address: str, tmp_path: Path) -> list[str]:
    return {
        "record": ["record", "--listen", "127.0.0.1:0", "--upstream", address, "--capture-dir", str(tmp_path / "cap")],
        "health": ["health", "--target", address],
        "tail": ["tail", "--admin", address],
        "status": ["status", "--admin", address],
        "mark": ["mark", "a note", "--admin", address],
        "rotate": ["rotate", "--admin", address],
        "replay send": ["replay", "send", str(DATA / "interleaved.jsonl"), "--target", address, "--out",
                        str(tmp_path / "out")],
        "check-cancel": ["check-cancel", "--target", address, "--model", "tokens"],
    }[command]


def _documented(command: str) -> str:
    """The `1` cell of the command's row in docs/exit-codes.md."""
    (row,) = [line for line in DOC.splitlines() if line.startswith(f"| `triton-tap {command}` |")]
    return row.strip("|").split("|")[2]


@pytest.mark.parametrize("command", ["record", "health", "tail", "status", "mark", "rotate", "replay send",
                                     "check-cancel"])  # fmt: skip
def test_an_unreachable_address_is_exit_1_in_one_line(command: str, tmp_path: Path) -> None:
    assert "unreachable" in _documented(command), "the doc's row says an unreachable address is exit 1"
    address = f"127.0.0.1:{free_port()}"
    proc = subprocess.run([str(TRITON_TAP), *_argv(command, address, tmp_path)], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    lines = proc.stderr.splitlines()
    assert proc.returncode == EXIT_FINDINGS, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("triton-tap: error: ") and address in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    # Nothing was written: no capture, no --out directory.
    assert not list(tmp_path.glob("cap/capture-*")) and not (tmp_path / "out").exists()

"""`triton-tap record` / `python -m proxy`: bad input is one clear line and a non-zero exit."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.tritonserver import free_port

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def listening() -> Iterator[int]:
    """A port something listens on (plays the upstream, or a busy listen port)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_unreachable_upstream(tmp_path: Path) -> None:
    """Nothing listening upstream at start: one line naming it, exit 1, no capture file."""
    port = free_port()
    proc = _run("--upstream", f"127.0.0.1:{port}", "--listen", "127.0.0.1:0", "--capture-dir", str(tmp_path))
    assert proc.returncode == 1
    assert f"upstream 127.0.0.1:{port} is unreachable" in _one_line(proc)
    assert list(tmp_path.glob("*.jsonl")) == []


def test_unwritable_capture_dir(tmp_path: Path, listening: int) -> None:
    """A capture dir that cannot be created: one line, exit 2."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = _run("--upstream", f"127.0.0.1:{listening}", "--listen", "127.0.0.1:0", "--capture-dir", str(blocker / "sub"))
    assert proc.returncode == 2
    assert "is not writable" in _one_line(proc)


def test_busy_listen_port(tmp_path: Path, listening: int) -> None:
    """A listen port in use: one line, exit 2, and no empty capture left behind."""
    proc = _run("--upstream", f"127.0.0.1:{listening}", "--listen", f"127.0.0.1:{listening}", "--capture-dir", str(tmp_path))
    assert proc.returncode == 2
    assert "cannot listen on" in _one_line(proc)
    assert list(tmp_path.glob("*.jsonl")) == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--bogus"], "unrecognized arguments"),
        (["--payload", "all"], "invalid choice"),
        (["--listen", "nohostport"], "--listen must be HOST:PORT"),
        (["--rotate-mb", "-1"], "must be a number > 0"),
    ],
)
def test_bad_flags(args: list[str], needle: str, tmp_path: Path) -> None:
    """Wrong flags: one line that says what is wrong, exit 2."""
    proc = _run(*args, "--capture-dir", str(tmp_path))
    assert proc.returncode == 2
    assert needle in _one_line(proc)


def test_console_script_has_the_same_record_flags() -> None:
    """`triton-tap record --help` and `python -m proxy --help` list the same flags."""
    a = subprocess.run([sys.executable, "-m", "proxy", "--help"], capture_output=True, text=True, timeout=60).stdout
    b = subprocess.run(
        [sys.executable, "-c", "import sys; from proxy.cli import main; sys.exit(main(['record', '--help']))"],
        capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    flags = {w for w in a.split() if w.startswith("--")}
    assert flags and flags == {w for w in b.split() if w.startswith("--")}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("metrics", "takes metrics=URL and/or log=PATH"),
        ("metrics=localhost:8002", "must be an http(s) URL"),
        ("log=/no/such/triton.log", "is not a readable file"),
        ("gpu=1", "unknown source 'gpu'"),
    ],
)
def test_bad_evidence_flag(tmp_path: Path, listening: int, value: str, message: str) -> None:
    """A malformed --evidence: one line, exit 2, before anything is recorded."""
    proc = _run("--upstream", f"127.0.0.1:{listening}", "--listen", "127.0.0.1:0", "--capture-dir", str(tmp_path),
                "--evidence", value)  # fmt: skip
    assert proc.returncode == 2
    assert message in _one_line(proc)
    assert list(tmp_path.glob("*.jsonl")) == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--evidence-window", "nan", "--evidence", "metrics=http://127.0.0.1:1/metrics"], "--evidence-window"),
        (["--drain-timeout", "inf"], "--drain-timeout"),
        (["--rotate-mb", "inf"], "--rotate-mb"),
        (["--rotate-mb", "nan"], "--rotate-mb"),
        (["--payload", "full", "--payload-cap", "99999999999999999999999"], "--payload-cap"),
        (["--listen", "127.0.0.1:99999"], "port 0..65535"),
        (["--listen", "127.0.0.1:"], "port 0..65535"),
        (["--upstream", "127.0.0.1:0"], "port 1..65535"),
        (["--evidence", ""], "--evidence takes"),
        (["--evidence", "metrics=http://a/m,metrics=http://b/m"], "names metrics= twice"),
    ],
)
def test_bad_numbers_and_addresses_fail_before_any_capture(
    args: list[str], needle: str, tmp_path: Path, listening: int
) -> None:
    """nan/inf/huge numbers, out-of-range ports, empty or repeated --evidence: one line, exit 2, no file."""
    proc = _run("--upstream", f"127.0.0.1:{listening}", "--listen", "127.0.0.1:0", "--capture-dir", str(tmp_path),
                *args)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert needle in _one_line(proc)
    assert list(tmp_path.iterdir()) == []


def test_metrics_port_equal_to_listen_port(tmp_path: Path, listening: int) -> None:
    """--metrics on the --listen port: one line, exit 2, and no capture file at all."""
    port = free_port()
    proc = _run("--upstream", f"127.0.0.1:{listening}", "--listen", f"127.0.0.1:{port}", "--metrics",
                f"127.0.0.1:{port}", "--capture-dir", str(tmp_path))  # fmt: skip
    assert proc.returncode == 2
    assert "use the same port" in _one_line(proc)
    assert list(tmp_path.iterdir()) == []


def test_redact_help_lists_what_is_redacted() -> None:
    """--redact's help names every key and suffix the relay always redacts."""
    from proxy.relay import DEFAULT_REDACT, REDACT_SUFFIXES

    text = "".join(_run("--help").stdout.split())  # argparse may wrap inside "set-cookie"
    for key in (*DEFAULT_REDACT, *(f"*{s}" for s in REDACT_SUFFIXES)):
        assert key in text


def test_unreachable_evidence_metrics_warns_at_start(tmp_path: Path, listening: int) -> None:
    """--evidence metrics=URL that does not answer: the proxy starts, with one warning line naming it."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy", "--upstream", f"127.0.0.1:{listening}", "--listen", "127.0.0.1:0",
         "--capture-dir", str(tmp_path), "--evidence", f"metrics=http://127.0.0.1:{port}/metrics"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "recording" in line:
                break
        assert any("evidence_metrics_unreachable" in ln and str(port) in ln for ln in seen), seen
    finally:
        proc.terminate()
        proc.wait(30)

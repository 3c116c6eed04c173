"""`--skip-damaged` on the commands that read captures (check, report, diff, export, serve): a damaged
line in the middle is a hole they show, and they go on; without it they stop (exit 2) with one line
that names the file, the line and the flag."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.cli import main as triton_tap
from replay import feed_stream
from replay.capture.reader import skipping_damaged
from replay.cli.main import main as python_m_replay
from tests.support.child import wait_while_running
from tests.support.paths import DATA
from tests.support.triton_client import stream_to_its_end
from tests.support.user_client import TextAssembler

TRITON_TAP = Path(sys.executable).parent / "triton-tap"

GOLDEN = DATA / "stream_cancel.jsonl"


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    """stream_cancel.jsonl with its 5th line (seq 4, a response of `done`) garbled."""
    lines = GOLDEN.read_bytes().splitlines(keepends=True)
    lines[4] = b'{"v":3,"seq":4,"kind":"message","t_ns":17\x00\x00 garbage\n'
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(b"".join(lines))
    return path


def _commands(damaged: Path, out: Path) -> dict[str, list[str]]:
    return {
        "check": ["replay", "check", str(damaged)],
        "check --json": ["replay", "check", "--json", str(damaged)],
        "report": ["report", str(damaged), "-o", str(out / "r.html")],
        "diff": ["diff", str(damaged), str(GOLDEN)],
        "export": ["export", "--parquet", str(out / "pq"), str(damaged)],
    }


@pytest.mark.parametrize("command", ["check", "check --json", "report", "diff", "export"])
def test_without_the_flag_the_error_names_the_line_and_the_flag(
    command: str, damaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _commands(damaged, tmp_path)[command]
    assert triton_tap(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"triton-tap: error: {damaged}:5: not valid JSON: unexpected character, expected ',' or '}}': line 1 column "
        "42 (char 41) (--skip-damaged reads on past damaged lines, reporting each as a hole)"
    ]


@pytest.mark.parametrize("command", ["check", "check --json", "report", "diff", "export"])
def test_with_the_flag_the_command_reads_on_and_shows_the_hole(
    command: str, damaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _commands(damaged, tmp_path)[command]
    code = triton_tap([*argv, "--skip-damaged"])
    out, err = capsys.readouterr()
    assert code == {"diff": 1}.get(command, 0), out + err  # diff: `done` lost its final with the line
    if command == "check --json":
        doc = json.loads(out)
        assert [(g["kind"], g["file"], g["line"]) for g in doc["gaps"]] == [("damaged_line", str(damaged), 5)]
        assert "not valid JSON" in doc["gaps"][0]["detail"] and doc["summary"]["records"] == 11
    elif command == "report":  # the page lists the capture's holes
        page = (tmp_path / "r.html").read_text()
        assert "damaged_line" in page and "not valid JSON" in page
    else:
        assert f"{damaged}:5" in out + err and "not valid JSON" in out + err
    if command == "check":
        assert f"hole damaged_line at {damaged}:5: not valid JSON" in out


def test_python_m_replay_takes_the_flag_too(damaged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert python_m_replay(["check", str(damaged)]) == 2
    assert "--skip-damaged" in capsys.readouterr().err
    assert python_m_replay(["check", "--skip-damaged", str(damaged)]) == 0
    assert "hole damaged_line" in capsys.readouterr().out


def test_upgrade_has_no_such_flag(damaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """upgrade rewrites a capture record for record: it never drops a line, so it neither takes the flag
    nor suggests it."""
    assert triton_tap(["replay", "upgrade", "-o", str(tmp_path / "up"), str(damaged)]) == 2
    err = capsys.readouterr().err
    assert f"{damaged}:5: not valid JSON" in err and "--skip-damaged" not in err


def _serve(damaged: Path, ready: Path, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(TRITON_TAP), "serve", str(damaged), "--listen", "127.0.0.1:0", "--timing", "fast",
                             "--ready-file", str(ready), *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_serve_refuses_a_damaged_capture_in_one_line_naming_the_flag(damaged: Path, tmp_path: Path) -> None:
    """A real `triton-tap serve` process: exit 2 before it listens (no ready file), one line naming line and flag."""
    ready = tmp_path / "ready.json"
    proc = _serve(damaged, ready)
    try:
        err = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, err
    assert err.splitlines() == [
        f"triton-tap: error: {damaged}:5: not valid JSON: unexpected character, expected ',' or '}}': line 1 column "
        "42 (char 41) (--skip-damaged reads on past damaged lines, reporting each as a hole)"
    ]
    assert not ready.exists()


def test_serve_with_the_flag_answers_from_the_records_it_could_read(damaged: Path, tmp_path: Path) -> None:
    """A real `triton-tap serve --skip-damaged` process and a real tritonclient: it starts, logs the hole, and a
    stream gets what the readable records say (`done`'s final was on the damaged line: it gets its first
    response only; `a` its two texts; then the captured cancel), the same as the capture fed with the flag."""
    ready = tmp_path / "ready.json"
    proc = _serve(damaged, ready, "--skip-damaged")
    try:
        wait_while_running(proc, ready.exists, "serve became ready")
        got = stream_to_its_end(json.loads(ready.read_text())["listen"])
    finally:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 0, err
    want = TextAssembler()
    with skipping_damaged():
        feed_stream(damaged, want)
    assert got.state() == want.state()
    assert got.responses["done"] == 1 and "done" not in got.done and got.text["a"]
    assert f"capture hole: damaged_line at {damaged}:5: not valid JSON" in err
    assert "Traceback" not in err

"""`replay check` as a command: both entry points, exit codes, the human table, one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from proxy.cli import main as triton_tap_main
from replay.cli.main import main
from tests.support.paths import DATA

TRITON_TAP = Path(sys.executable).parent / "triton-tap"


def test_table_shows_outcomes_violations_and_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """The default output is a per-request table plus a summary naming the violations."""
    code = main(["check", str(DATA / "missing_final.jsonl")])
    out, err = capsys.readouterr()
    assert code == 1
    assert err == ""
    for text in ("due", "incomplete", "missing_final", "not-due", "unconfirmed", "2 request(s) on 1 call(s)"):
        assert text in out
    assert "violations: missing_final 1" in out


def test_table_lists_unattributable_responses_and_holes(capsys: pytest.CaptureFixture[str]) -> None:
    """Unattributable responses get their own table; holes are printed with where and why."""
    main(["check", str(DATA / "unattributable.jsonl"), str(DATA / "gaps.jsonl")])
    out, _ = capsys.readouterr()
    assert "unattributable responses" in out
    assert "empty_id" in out and "unknown_id" in out
    assert "hole gap_record" in out and "hole seq_gap" in out


def test_rows_limit_keeps_requests_needing_attention(capsys: pytest.CaptureFixture[str]) -> None:
    """Beyond --rows, only requests with violations or a non-completed outcome are shown."""
    main(["check", "--rows", "1", str(DATA / "stream_cancel.jsonl")])
    out, _ = capsys.readouterr()
    assert "cancelled" in out
    assert "2 request(s) not shown" in out


def test_several_captures_in_one_check(capsys: pytest.CaptureFixture[str]) -> None:
    """Several files are separate captures: call ids of the second are prefixed, results add up."""
    code = main(["check", "--json", str(DATA / "one_response.jsonl"), str(DATA / "no_text.jsonl")])
    out, _ = capsys.readouterr()
    assert code == 0
    assert '"call": "2:c1.1"' in out
    assert '"captures": 2' in out


def test_triton_tap_replay_check_is_the_same_command(capsys: pytest.CaptureFixture[str]) -> None:
    """`triton-tap replay check` is registered by proxy/cli.py and behaves the same (exit codes, one line)."""
    assert triton_tap_main(["replay", "check", "--json", str(DATA / "deadline.jsonl")]) == 0
    assert '"outcome": "deadline"' in capsys.readouterr().out
    assert triton_tap_main(["replay", "check", str(DATA / "response_after_final.jsonl")]) == 1
    capsys.readouterr()
    assert triton_tap_main(["replay", "check", str(DATA / "too_new.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "too_new.jsonl:2: capture schema version" in err


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        ([sys.executable, "-m", "replay", "check", str(DATA / "garbled_middle.jsonl")], 2, "garbled_middle.jsonl:3:"),
        ([str(TRITON_TAP), "replay", "check", str(DATA / "nope.jsonl")], 2, "nope.jsonl: no such file"),
        ([sys.executable, "-m", "replay", "check", "--json", str(DATA / "truncated_last_line.jsonl")], 0,
         "truncated_last_line.jsonl:8: last line cut short"),
        ([sys.executable, "-m", "replay", "check", "--bogus", str(DATA)], 2, "unrecognized arguments: --bogus"),
    ],
)  # fmt: skip
def test_entry_points_exit_codes_and_one_line_stderr(argv: list[str], code: int, needle: str) -> None:
    """Both console entry points exit 0/1/2 as documented and explain problems in exactly one stderr line."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_directory_of_goldens_is_unreadable_because_of_its_damaged_files(capsys: pytest.CaptureFixture[str]) -> None:
    """Checking tests/data as a directory fails on the first damaged capture with one line (exit 2)."""
    assert main(["check", str(DATA)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "garbled_middle.jsonl:3:" in err

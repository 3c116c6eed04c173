"""`replay send` refuses bad input in one line, exit 2 (an unreachable target: exit 1), before anything is
written (loopback, no Triton)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from proxy.cli import main
from tests.support.paths import DATA


def _unused_port() -> int:
    # Bound and released: nothing listens there for the test's few milliseconds.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _send(tmp_path: Path, capsys: pytest.CaptureFixture[str], capture: str, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["replay", "send", str(DATA / capture), "--target", f"127.0.0.1:{_unused_port()}",
                 "--out", str(tmp_path / "out"), *extra])  # fmt: skip
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.count("\n") == 1, err
    return code, err


def test_a_meta_capture_names_the_calls_it_cannot_send(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _send(tmp_path, capsys, "deadline.jsonl")
    assert code == 2
    assert "1 of 1 call(s) cannot be sent: 1 with no request bytes" in err and "--payload full" in err
    assert not (tmp_path / "out").exists()


def test_skipping_every_call_leaves_nothing_to_send(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _send(tmp_path, capsys, "deadline.jsonl", "--skip-unsendable")
    assert code == 2 and "no call to send" in err and not (tmp_path / "out").exists()


def test_an_unreachable_target_is_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listens at --target: the upstream failed the run (exit 1, as for every command), not its input."""
    code, err = _send(tmp_path, capsys, "interleaved.jsonl")
    assert code == 1 and "--target: upstream 127.0.0.1:" in err and "unreachable" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("flags", "text"),
    [
        (["--speed", "0"], "--speed"),
        (["--only", "colour=red"], "--only"),
        (["--only", "model=nothing-like-it"], "no call to send"),
        (["--model-map", "tokens"], "--model-map"),
        (["--header", ":path=/x"], "--header"),
    ],
)
def test_bad_flags_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], text: str) -> None:
    code, err = _send(tmp_path, capsys, "interleaved.jsonl", *flags)
    assert code == 2 and text in err
    assert not (tmp_path / "out").exists()


def test_out_must_be_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "out").write_text("x")
    code, err = _send(tmp_path, capsys, "interleaved.jsonl")
    assert code == 2 and "is not a directory" in err


def test_an_out_holding_a_capture_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second run into the first's --out would make one mixed set for diff (which reads every capture of a
    directory): refused in one line, the capture there untouched; other files there are no capture."""
    (tmp_path / "out").mkdir()
    kept = tmp_path / "out" / "capture-20261206T000000Z-1-0001.jsonl"
    kept.write_bytes(b"x\n")
    (tmp_path / "out" / "notes.txt").write_text("mine")
    code, err = _send(tmp_path, capsys, "interleaved.jsonl")
    assert code == 2 and "already holds 1 capture file(s)" in err
    assert kept.read_bytes() == b"x\n" and sorted(p.name for p in (tmp_path / "out").iterdir()) == [kept.name, "notes.txt"]
    kept.unlink()
    code, err = _send(tmp_path, capsys, "interleaved.jsonl")  # (then the target is tried: nothing listens)
    assert code == 1 and "unreachable" in err


def test_a_capture_of_calls_begun_before_it_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A rotated file whose only call began in the file before it (no call_start here): nothing to send, and
    the one line says why."""
    from tests.data.make_golden import INFER, Builder

    b = Builder(payload="full").start()
    b.call("c1.1", method=INFER)
    b.request("c1.1", "u1", model="echo", empty_final=None)
    b.response("c1.1", "u1", "hi", final=None, model="echo")
    b.end("c1.1")
    b.records = [r for r in b.records if not r.kind == "call_start"]
    (tmp_path / "later.jsonl").write_bytes(b.finish().render())
    capsys.readouterr()
    code = main(["replay", "send", str(tmp_path / "later.jsonl"), "--target", "127.0.0.1:1", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "the capture holds no calls to send: its 1 call(s) began before it" in err

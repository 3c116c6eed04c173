"""Bad input is one line on stderr and exit 2, found before anything runs, and loses nothing already recorded.

Each case was found by driving the real commands (the console script, a real process): a traceback and
exit 1, a capture turned into Markdown, a typo that waited for ever, or a cut capture upgraded in silence.
No server is needed: every case is refused before any connection is made.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import DATA

TRITON_TAP = Path(sys.executable).parent / "triton-tap"
CAPTURE = (DATA / "unary.jsonl").read_bytes()


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRITON_TAP), *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          check=False, env={**os.environ, "PYTHONWARNINGS": "ignore"})  # fmt: skip


def _one_line(proc: subprocess.CompletedProcess[str], says: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("triton-tap") and says in lines[0], proc.stderr


def test_check_cancel_refuses_a_report_over_a_capture(tmp_path: Path) -> None:
    """`--report captures/capture-....jsonl` wrote the Markdown over the capture, after the whole run."""
    capture = tmp_path / "capture-20261206T100000-1.jsonl"
    capture.write_bytes(CAPTURE)
    proc = _run("check-cancel", "--target", "127.0.0.1:1", "--model", "tokens", "--report", str(capture), cwd=tmp_path)
    _one_line(proc, "has a capture file's name")
    assert capture.read_bytes() == CAPTURE


@pytest.mark.parametrize("command", ["report", "upgrade"])
def test_a_symlink_loop_is_one_line(tmp_path: Path, command: str) -> None:
    """`report`/`replay upgrade` on a symlink loop raised RuntimeError from Path.resolve (a traceback, exit 1)."""
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)
    args = ["report", str(loop), "-o", str(tmp_path / "r.html")] if command == "report" else [
        "replay", "upgrade", str(loop), "-o", str(tmp_path / "out")]  # fmt: skip
    proc = _run(*args, cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_upgrade_to_an_existing_file_is_one_line(tmp_path: Path) -> None:
    """`replay upgrade -o FILE` raised FileExistsError from mkdir; the file is left as it was."""
    capture = tmp_path / "c.jsonl"
    capture.write_bytes(CAPTURE)
    out = tmp_path / "taken"
    out.write_text("mine\n")
    _one_line(_run("replay", "upgrade", str(capture), "-o", str(out), cwd=tmp_path), "is not a directory")
    assert out.read_text() == "mine\n"


def test_upgrade_of_a_cut_compressed_capture_says_it_was_cut(tmp_path: Path) -> None:
    """A zstd capture cut short: check, report and export warn "cut short"; upgrade wrote the records it could
    read, exit 0, and nothing said the rest was gone (the new file no longer shows the cut). It warns, and
    exits 1 naming the file."""
    import zstandard

    whole = zstandard.ZstdCompressor(write_checksum=True).compress(CAPTURE[: len(CAPTURE) // 2])
    rest = zstandard.ZstdCompressor(write_checksum=True).compress(CAPTURE[len(CAPTURE) // 2 :])
    capture = tmp_path / "capture-20261206T100000-1.jsonl.zst"
    capture.write_bytes(whole + rest[: len(rest) // 2])
    proc = _run("replay", "upgrade", str(capture), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "triton-tap: warning:" in proc.stderr and "cut short" in proc.stderr
    assert proc.stderr.splitlines()[-1].endswith(f"keep the originals: {capture}"), proc.stderr


def test_admin_commands_refuse_a_ca_that_is_no_certificate(tmp_path: Path) -> None:
    """`status --ca garbage`: exit 1 after grpc's C-core errors, as if the proxy were unreachable; a bad flag."""
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate\n")
    proc = _run("status", "--admin", "127.0.0.1:1", "--ca", str(ca), cwd=tmp_path)
    _one_line(proc, "holds no PEM certificate")


def test_mark_refuses_a_note_that_is_not_utf8(tmp_path: Path) -> None:
    """A note or label from a non-UTF-8 argv (surrogate escapes) raised UnicodeEncodeError in protobuf."""
    proc = subprocess.run([os.fsencode(TRITON_TAP), b"mark", b"--admin", b"127.0.0.1:1", b"caf\xe9"],
                          capture_output=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    assert len(err) == 1 and "must be UTF-8 text" in err[0]


@pytest.mark.parametrize("where", [["--admin", "127.0.0.1:1"], ["CAPTURE_DIR", "--follow"]])
def test_tail_refuses_an_unknown_kind(tmp_path: Path, where: list[str]) -> None:
    """`tail --kind mesage` ran for ever and printed nothing (no record has that kind)."""
    args = [str(tmp_path) if a == "CAPTURE_DIR" else a for a in where]
    proc = _run("tail", *args, "--kind", "mesage", cwd=tmp_path)
    assert proc.returncode == 2 and "invalid choice: 'mesage'" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--payload-cap", "100"], "--payload-cap works with --payload full only"),
        (["--payload-store", "inline"], "--payload-store inline works with --payload full only"),
        (["--payload", "none", "--redact-input", "PROMPT"], "--redact-input works with --payload full only (--payload none"),
        (["--capture-dir", ""], "argument --capture-dir: must name a directory"),
    ],
)
def test_record_refuses_flags_that_would_do_nothing(tmp_path: Path, flags: list[str], says: str) -> None:
    """Accepted in silence before: a cap, a store or a redaction of message bytes that --payload meta never
    stores, and an empty --capture-dir that wrote the captures into the working directory."""
    proc = _run("record", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:1", *flags, cwd=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_check_cancel_refuses_a_metrics_flag_that_is_no_url(tmp_path: Path) -> None:
    """`--metrics notaurl` ran the whole protocol (seconds of a model's time), then exit 2."""
    proc = _run("check-cancel", "--target", "127.0.0.1:1", "--model", "tokens", "--metrics", "notaurl", cwd=tmp_path)
    _one_line(proc, "--metrics must be an http(s) URL")


@pytest.mark.parametrize("command", ["diff", "send"])
@pytest.mark.parametrize(
    ("maps", "says"),
    [
        # the last one won in silence
        (["--model-map", "echo=b", "--model-map", "echo=c"], "--model-map 'echo' given twice: 'b' and 'c'"),
        # send re-addressed the requests to a model named "" (diff refused it: one rule for both now)
        (["--model-map", "echo="], "--model-map 'echo=': expected OLD=NEW"),
        (["--model-map", " =b"], "--model-map ' =b': expected OLD=NEW"),
    ],
)
def test_a_model_map_that_says_no_one_thing_is_refused(tmp_path: Path, command: str, maps: list[str], says: str) -> None:
    """diff and send read `--model-map` by one rule (replay/cli/base.parse_pairs)."""
    capture = tmp_path / "c.jsonl"
    capture.write_bytes(CAPTURE)
    args = (["diff", str(capture), str(capture), *maps] if command == "diff" else
            ["replay", "send", str(capture), "--target", "127.0.0.1:1", "--out", str(tmp_path / "out"), *maps])  # fmt: skip
    _one_line(_run(*args, cwd=tmp_path), says)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--server-name", "triton.internal"], "--server-name needs --ca"),
        (["--cert", "c.pem", "--key", "k.pem"], "--cert needs --ca"),
        (["--ca", "CA", "--cert", "c.pem"], "--cert and --key go together"),
        (["--ca", "CA", "--cert", "c.pem", "--key", "k.pem"], "cannot read --cert 'c.pem'"),
    ],
)
def test_admin_commands_refuse_tls_flags_that_cannot_apply(tmp_path: Path, flags: list[str], says: str) -> None:
    """`--server-name` without `--ca` was ignored (a plaintext attempt, exit 1 "Socket closed"); the client
    certificate flags need TLS, each other, and a pair that loads."""
    from tests.support.tls import make_pki

    ca = make_pki(tmp_path / "pki").ca
    args = [str(ca) if a == "CA" else a for a in flags]
    proc = _run("status", "--admin", "127.0.0.1:1", *args, cwd=tmp_path)
    _one_line(proc, says)


def test_workers_refuse_a_tls_file_that_does_not_load_in_one_line(tmp_path: Path) -> None:
    """`record --workers 2` with a certificate that is no certificate: one line, exit 2, as without --workers (each
    worker printed its own error among the set's log lines: workers_started, two errors, worker_failed)."""
    bad = tmp_path / "cert.pem"
    bad.write_text("not a certificate\n")
    proc = _run("record", "--workers", "2", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:1",
                "--tls-cert", str(bad), "--tls-key", str(bad), "--capture-dir", str(tmp_path / "caps"), cwd=tmp_path)  # fmt: skip
    _one_line(proc, "cannot load --tls-cert/--tls-key")
    assert not (tmp_path / "caps").exists()


def test_workers_say_an_unreachable_upstream_in_one_line(tmp_path: Path) -> None:
    """`record --workers 2` with nothing listening upstream: one line and exit 1, before any worker starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # (bound, not listening: refused)
        proc = _run("record", "--workers", "2", "--listen", "127.0.0.1:0", "--upstream", f"127.0.0.1:{port}",
                    "--capture-dir", str(tmp_path / "caps"), cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "is unreachable" in lines[0], proc.stderr

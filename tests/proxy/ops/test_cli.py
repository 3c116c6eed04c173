"""`triton-tap record` / `python -m proxy`: bad input is one clear line and a non-zero exit."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.lab.tritonserver import free_port
from tests.support.capture import read_bytes, records, side_bytes, stored_payload
from tests.support.paths import ROOT
from tests.support.proxy import start_lines


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


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
    assert list(tmp_path.glob("capture-*")) == []


def test_unwritable_capture_dir(tmp_path: Path, listening: int) -> None:
    """A capture dir that cannot be created: one line, exit 2."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = _run("--upstream", f"127.0.0.1:{listening}", "--listen", "127.0.0.1:0", "--capture-dir", str(blocker / "sub"))
    assert proc.returncode == 2
    assert "is not writable" in _one_line(proc)


@pytest.mark.parametrize("extra", [(), ("--event-loop", "asyncio"), ("--workers", "2")])
def test_busy_listen_port(tmp_path: Path, listening: int, extra: tuple[str, ...]) -> None:
    """A listen port in use: one line that says why once (not asyncio's "error while attempting to bind on
    address (...)" after ours), exit 2, and no empty capture left behind; with either event loop and with
    --workers (which binds the port itself)."""
    proc = _run("--upstream", f"127.0.0.1:{listening}", "--listen", f"127.0.0.1:{listening}", "--capture-dir",
                str(tmp_path), *extra)  # fmt: skip
    assert proc.returncode == 2
    assert _one_line(proc).endswith(f": error: cannot listen on 127.0.0.1:{listening}: address already in use")
    assert list(tmp_path.glob("capture-*")) == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--bogus"], "unrecognized arguments"),
        (["--payload", "all"], "invalid choice"),
        (["--listen", "nohostport"], "--listen must be HOST:PORT"),
        (["--rotate-mb", "-1"], "must be a number > 0"),
        (["--min-free-mb", "-1"], "must be a number >= 0 (0: off)"),  # (0 is valid: never "must be > 0")
        (["--tls-watch", "x"], "not a number: 'x'"),
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
    assert list(tmp_path.glob("capture-*")) == []


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
    from proxy.triton.metadata import DEFAULT_REDACT, REDACT_SUFFIXES

    text = "".join(_run("--help").stdout.split())  # argparse may wrap inside "set-cookie"
    for key in (*DEFAULT_REDACT, *(f"*{s}" for s in REDACT_SUFFIXES)):
        assert key in text


def test_unreachable_evidence_metrics_warns_at_start(tmp_path: Path, listening: int) -> None:
    """--evidence metrics=URL that does not answer: the proxy starts, with one warning line naming it."""
    port = free_port()
    seen = start_lines("--upstream", f"127.0.0.1:{listening}", "--listen", "127.0.0.1:0", "--capture-dir",
                       str(tmp_path), "--evidence", f"metrics=http://127.0.0.1:{port}/metrics")  # fmt: skip
    assert '"recording"' in seen[-1], seen  # it started
    assert any("evidence_metrics_unreachable" in ln and str(port) in ln for ln in seen), seen


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--tls-cert", "/nonexistent.pem"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"], "cannot load --tls-cert/--tls-key"),
        (["--upstream-ca", "/nonexistent.pem"], "need --upstream-tls"),
        (["--upstream-tls", "--upstream-ca", "/nonexistent.pem"], "cannot load --upstream-ca"),
        (["--upstream-tls", "--upstream-cert", "/c.pem"], "--upstream-cert and --upstream-key go together"),
        (["--redact-salt"], "expected one argument"),
    ],
)
def test_bad_tls_and_redaction_flags(args: list[str], needle: str, tmp_path: Path, listening: int) -> None:
    """TLS/redaction flags given wrong: one line naming the flag, exit 2, no capture file."""
    proc = _run("--upstream", f"127.0.0.1:{listening}", "--listen", "127.0.0.1:0", "--capture-dir", str(tmp_path), *args)
    assert proc.returncode == 2
    assert needle in _one_line(proc)
    assert list(tmp_path.glob("capture-*")) == []


def test_unresolvable_upstream_host(tmp_path: Path) -> None:
    """An upstream host name that does not resolve: one line naming it, exit 1."""
    proc = _run("--upstream", "no-such-host.invalid:8001", "--listen", "127.0.0.1:0", "--capture-dir", str(tmp_path))
    assert proc.returncode == 1
    assert "upstream no-such-host.invalid:8001 is unreachable" in _one_line(proc)


def test_listen_address_not_on_this_machine(tmp_path: Path, listening: int) -> None:
    """A --listen address no interface has (TEST-NET-3): one line, exit 2, no capture."""
    proc = _run("--upstream", f"127.0.0.1:{listening}", "--listen", "203.0.113.7:0", "--capture-dir", str(tmp_path))
    assert proc.returncode == 2
    assert "cannot listen on 203.0.113.7:0" in _one_line(proc)
    assert list(tmp_path.glob("capture-*")) == []


def test_upstream_tls_against_a_plaintext_port_is_one_line(tmp_path: Path) -> None:
    """--upstream-tls towards something that answers in plaintext HTTP/2: one line about TLS, exit 1."""
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def answer() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")  # an h2c SETTINGS frame, not a TLS record

    t = threading.Thread(target=answer, name="plaintext-upstream", daemon=True)
    t.start()
    try:
        port = srv.getsockname()[1]
        proc = _run("--upstream", f"127.0.0.1:{port}", "--upstream-tls", "--listen", "127.0.0.1:0", "--capture-dir", str(tmp_path))
    finally:
        t.join(10)
        srv.close()
    assert proc.returncode == 1
    assert "TLS handshake failed" in _one_line(proc)


def test_redact_salt_from_environment(tmp_path: Path) -> None:
    """TRITON_TAP_REDACT_SALT keys the HMAC of --redact-input tensors, is not recorded, and the data is not stored.

    The upstream is the fake Triton: what is checked happens in the proxy (the salt, the capture),
    the upstream need only answer, and this tier starts no tritonserver (tests/e2e has the real one).
    """
    import hashlib
    import hmac
    import os
    import signal

    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc as pb_grpc

    from tests.support.triton_client import wait_for

    up = subprocess.Popen([sys.executable, "-m", "tests.support.fake_triton", "0"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    proxy = None
    try:
        assert up.stdout is not None
        up_port = int(up.stdout.readline())
        port = free_port()
        env = {**os.environ, "TRITON_TAP_REDACT_SALT": "from-env"}
        proxy = subprocess.Popen(
            [sys.executable, "-m", "proxy", "--listen", f"127.0.0.1:{port}", "--upstream", f"127.0.0.1:{up_port}",
             "--capture-dir", str(tmp_path), "--payload", "full", "--redact-input", "INPUT"],
            cwd=ROOT, env=env, stderr=subprocess.DEVNULL,
        )  # fmt: skip

        def serving() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return True
            except OSError:
                return False

        wait_for(serving, timeout=30, what="the proxy")
        req = pb.ModelInferRequest(model_name="echo", id="env")
        req.inputs.add(name="INPUT", datatype="BYTES", shape=[1])
        req.raw_input_contents.append(b"SECRET-PAYLOAD")
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            pb_grpc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=10)
        proxy.send_signal(signal.SIGTERM)
        assert proxy.wait(30) == 0
    finally:
        for p in (proxy, up):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)
    (path,) = tmp_path.glob("capture-*")
    recs = records(path)
    assert recs[0]["options"]["redact_salt"] is None and recs[0]["options"]["redact_salt_given"] is True
    assert b"from-env" not in read_bytes(path)
    (c2s,) = [r for r in recs if r["kind"] == "message" and r["dir"] == "c2s"]
    assert c2s["inputs"][0]["hmac_sha256"] == hmac.new(b"from-env", b"SECRET-PAYLOAD", hashlib.sha256).hexdigest()
    assert b"SECRET-PAYLOAD" not in stored_payload(path, c2s) and b"SECRET-PAYLOAD" not in side_bytes(path)

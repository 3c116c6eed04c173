"""Input checks of health, check-cancel and serve, and evidence sampling that must never break anything."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from proxy.cancelcheck.evidence import LogTail, end_window, metrics_or_none
from proxy.cancelcheck.options import CheckOptions, Setup
from proxy.lab.tritonserver import free_port
from proxy.ops.evidence import EvidenceCollector, EvidenceSpec
from proxy.ops.server import _with_evidence
from replay.capture import events as ev
from tests.support.fake_triton import start_fake
from tests.support.loop_thread import BackgroundLoop
from tests.support.paths import DATA
from tests.support.tls import make_pki
from tests.support.triton_client import wait_for

TRITON_TAP = Path(sys.executable).parent / "triton-tap"


def _tap(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRITON_TAP), *args], capture_output=True, text=True, timeout=timeout, check=False)


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture
def not_http() -> Iterator[str]:
    """A URL whose port answers every connection with bytes that are not HTTP (like Triton's gRPC port)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00 not http\r\n\r\n")

    t = threading.Thread(target=serve, name="not-http", daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}/metrics"
    stop.set()
    t.join(5)
    srv.close()


def _cancel(call: str = "c1.1") -> ev.CallCancelled:
    return ev.CallCancelled(t_ns=1, call=call, cause="client_cancel", in_flight=["r1"], responded=[], rst_code=8,
                            elapsed_ms=1.0, forwarded_upstream=True)  # fmt: skip


# -- evidence -----------------------------------------------------------------------------------------


def test_evidence_from_a_non_http_metrics_port_is_a_record_with_the_error(not_http: str) -> None:
    """A metrics URL that answers non-HTTP: an `evidence` record with error=..., no task exception."""
    records: list[Any] = []
    loop_errors: list[Any] = []

    async def go() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: loop_errors.append(ctx))
        collector = EvidenceCollector(EvidenceSpec(metrics_url=not_http, window_s=0.05), records.append)
        collector.notify(_cancel())
        await asyncio.sleep(0.3)
        await collector.close()

    asyncio.run(go())
    (rec,) = records
    assert rec.source == "metrics" and rec.error and "unreadable" in rec.error and rec.call == "c1.1"
    assert loop_errors == []


def test_overlapping_windows_name_each_other_whichever_began_first(tmp_path: Path) -> None:
    """Cancel A, then B while A's window is open: Triton's skipped-response lines carry no request id, so B's
    window (read from B's offset to its end) holds A's work too. Each record names the other, B's too (it named
    none: A's window had ended first, and B's lines, A's model ignoring its cancel, read as B's); a cancel C
    after both windows ended names neither."""
    log = tmp_path / "tritonserver.log"
    log.write_text("start\n")
    records: list[Any] = []
    window = 0.3

    async def go() -> None:
        collector = EvidenceCollector(EvidenceSpec(log_path=log, window_s=window), records.append)
        t0 = time.time_ns()
        for call, after in (("c1.1", 0.0), ("c1.2", window / 2)):  # (B's cancel half a window after A's)
            collector.mark(call)
            collector.notify(dataclasses.replace(_cancel(call), t_ns=t0 + int(after * 1e9)))
        deadline = time.monotonic() + 30
        while len(records) < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        collector.mark("c1.3")
        collector.notify(dataclasses.replace(_cancel("c1.3"), t_ns=time.time_ns()))
        await collector.close()

    asyncio.run(go())
    got = {r.call: r.overlapping for r in records}
    assert got == {"c1.1": ["c1.2"], "c1.2": ["c1.1"], "c1.3": None}, got


def test_evidence_failure_does_not_reach_the_relay() -> None:
    """A collector that raises on a cancel (e.g. a nan window) leaves the capture sink working."""
    emitted: list[Any] = []

    def broken(_rec: ev.CallCancelled) -> None:
        raise ValueError("cannot convert float NaN to integer")

    sink = _with_evidence(emitted.append, broken)
    sink(_cancel())
    assert [type(r) for r in emitted] == [ev.CallCancelled]


# -- check-cancel ---------------------------------------------------------------------------------------


def _setup(**kw: Any) -> Setup:
    opts = CheckOptions(target="127.0.0.1:1", model="m", method="stream", inputs=None, probe_inputs=None, length=1,
                        allowance_ms=300.0, window_s=0.01, cases=("executing",), start_wait_ms=300.0, **kw)  # fmt: skip
    return Setup(url=opts.target, opts=opts, config=None, long_inputs=list, probe_inputs=list)


def test_check_cancel_non_http_metrics_is_a_note(not_http: str) -> None:
    """check-cancel --metrics on a non-HTTP port: a note in the report, not a traceback."""
    setup = _setup(metrics_url=not_http)
    assert metrics_or_none(setup) is None
    assert len(setup.notes) == 1 and "unreadable" in setup.notes[0]
    # (what the port sent is not quoted: a gRPC port's bytes made the report's text binary)
    assert setup.notes[0].endswith("ValueError: not an HTTP answer (BadStatusLine)") and setup.notes[0].isprintable()


def test_check_cancel_log_that_vanished_is_a_note(tmp_path: Path) -> None:
    """A --log that cannot be read after the window: a note, the case goes on without log evidence."""
    path = tmp_path / "triton.log"
    path.write_text("x\n")
    tail = LogTail(path)
    tail.mark()
    path.unlink()
    path.mkdir()
    setup = _setup(log_path=path)
    log, deltas = end_window(setup, tail, None, "r1", 0.0, "executing")
    assert log is None and deltas is None and "unreadable" in setup.notes[0]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--target", "127.0.0.1:99999"], "--target must be HOST:PORT"),
        (["--target", ""], "--target must be HOST:PORT"),
        (["--capture-dir", "/tmp/x"], "--capture-dir needs --through-proxy"),
        (["--log", "/"], "is not a readable regular file"),
        (["--report", "/nonexistent-dir/r.md"], "is not writable"),
        (["--window", "nan"], "--window"),
        (["--allowance-ms", "inf"], "--allowance-ms"),
        (["--cert", "/c.pem", "--key", "/k.pem"], "--cert needs --ca (TLS is on with --ca)"),
        (["--server-name", "triton.internal"], "--server-name needs --ca (TLS is on with --ca)"),
        (["--ca", "/nonexistent/ca.pem"], "cannot read --ca '/nonexistent/ca.pem': "),
    ],
)
def test_check_cancel_bad_arguments_fail_before_the_run(extra: list[str], needle: str) -> None:
    """Bad check-cancel arguments: one line, exit 2, before any connection (the target is not even up)."""
    args = ["check-cancel", "--target", f"127.0.0.1:{free_port()}", "--model", "m", *extra]
    proc = _tap(*args)
    assert proc.returncode == 2, proc.stderr
    line = _one_line(proc)
    assert needle in line and "unreachable" not in line


def test_check_cancel_server_refusing_metadata_is_not_unreachable() -> None:
    """A reachable gRPC server that does not implement Triton's ServerMetadata is not called unreachable;
    it is still the target's failure, not the user's input: exit 1 (docs/exit-codes.md)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        proc = _tap("check-cancel", "--target", f"127.0.0.1:{port}", "--model", "m")
    finally:
        server.stop(None)
    assert proc.returncode == 1
    line = _one_line(proc)
    assert "refused" in line and "UNIMPLEMENTED" in line and "unreachable" not in line


def test_check_cancel_over_tls_reaches_a_tls_server_and_plaintext_is_told_why_not(tmp_path: Path,
                                                                                  bg: BackgroundLoop) -> None:  # fmt: skip
    """A gRPC server that serves TLS (the fake Triton, which has no ServerMetadata: the real TLS Triton runs
    in tests/e2e/test_check_cancel_tls_e2e.py): without --ca the one line names TLS and --ca; with --ca
    the server is reached and answers (UNIMPLEMENTED, its own refusal, not "unreachable"); with another
    CA the handshake fails. Exit 1 each, in one line."""
    pki = make_pki(tmp_path / "pki")
    server, port = bg.run(start_fake(0, tls=pki))
    try:
        plain = _tap("check-cancel", "--target", f"127.0.0.1:{port}", "--model", "m")
        tls = _tap("check-cancel", "--target", f"127.0.0.1:{port}", "--model", "m", "--ca", str(pki.ca),
                   "--server-name", "triton.staging.test")  # fmt: skip
        other = _tap("check-cancel", "--target", f"127.0.0.1:{port}", "--model", "m", "--ca", str(pki.other_ca))
    finally:
        bg.run(server.stop(None))
    assert plain.returncode == 1, plain.stderr
    line = _one_line(plain)
    assert line.startswith(f"triton-tap: error: Triton at 127.0.0.1:{port} is unreachable: ") and "Socket closed" in line
    assert line.endswith("; the port speaks TLS: give --ca PEM (the CA that signed its certificate)"), line
    assert tls.returncode == 1, tls.stderr
    line = _one_line(tls)
    assert "refused Triton's ServerMetadata (UNIMPLEMENTED)" in line and "unreachable" not in line, line
    # A CA that did not sign the server's certificate: the handshake's reason, in the one line (grpc's
    # C core logs its own line for it unless told not to).
    assert other.returncode == 1, other.stderr
    line = _one_line(other)
    assert "is unreachable: " in line and "CERTIFICATE_VERIFY_FAILED" in line and "give --ca" not in line, line


# -- health ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [["--timeout", "-1"], ["--timeout", "0"], ["--timeout", "nan"], ["--timeout", "inf"],
     ["--target", "127.0.0.1:99999"], ["--target", ""], ["--target", "127.0.0.1:"]],
)  # fmt: skip
def test_health_bad_arguments_are_usage_errors(extra: list[str]) -> None:
    """health: a non-finite/non-positive timeout or a bad target is one line (no grpc C-core line), exit 2."""
    proc = _tap("health", *extra)
    assert proc.returncode == 2, proc.stderr
    _one_line(proc)


def test_health_help_documents_exit_codes() -> None:
    """health --help describes the check and its exit codes."""
    text = " ".join(_tap("health", "--help").stdout.split())
    assert "Exit 0" in text and "2: bad arguments" in text


# -- serve ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("listen", ["127.0.0.1:99999", "127.0.0.1:", ":8001"])
def test_serve_rejects_bad_listen(listen: str) -> None:
    """serve --listen with an out-of-range, empty port or empty host: one line, exit 2 (not a wrapped port)."""
    proc = _tap("serve", str(DATA / "stream_cancel.jsonl"), "--listen", listen, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "--listen must be HOST:PORT" in _one_line(proc)


def test_serve_on_a_busy_port_is_one_line() -> None:
    """serve on a port another socket listens on: one line saying the address is in use, exit 2."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        port = busy.getsockname()[1]
        proc = _tap("serve", str(DATA / "stream_cancel.jsonl"), "--listen", f"127.0.0.1:{port}", timeout=60)
    finally:
        busy.close()
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "WARNING" not in ln and " INFO " not in ln]
    assert len(lines) == 1 and lines[0].endswith(f"cannot listen on 127.0.0.1:{port}: address already in use"), proc.stderr


def test_second_serve_on_the_same_port_fails() -> None:
    """A second serve on the port of a running one fails instead of sharing it (grpc.so_reuseport off)."""
    port = free_port()
    first = subprocess.Popen([str(TRITON_TAP), "serve", str(DATA / "stream_cancel.jsonl"), "--listen",
                              f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        def up() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for(up, 30, "first serve listening")
        proc = _tap("serve", str(DATA / "stream_cancel.jsonl"), "--listen", f"127.0.0.1:{port}", timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert "address already in use" in proc.stderr
    finally:
        first.terminate()
        first.wait(30)

"""Operating the proxy: structured logs (JSON off a TTY, console on one), the TOML config, metrics start-up.

The proxy runs as a real `triton-tap record` process in front of the fake Triton (tests/support/
fake_triton.py, a subprocess): the fake is used because these tests pin the proxy's own output,
not Triton's behaviour; the metrics under real traffic are pinned in tests/e2e/test_operating_e2e.py.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from proxy.cli import add_record_arguments, build_parser
from proxy.ops.config import config_keys, load_config
from replay.errors import UserError
from tests.support.paths import ROOT
from tests.support.triton_client import StreamSession, echo_inputs, wait_for

TRITON_TAP = Path(sys.executable).parent / "triton-tap"


@pytest.fixture
def fake_process() -> Iterator[int]:
    """The fake Triton in its own process; yields its port."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.fake_triton", "0"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        proc.terminate()
        proc.wait(10)


def _record(upstream: int, tmp_path: Path, stderr: Any, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(TRITON_TAP), "record", "--listen", "127.0.0.1:0", "--upstream", f"127.0.0.1:{upstream}",
         "--capture-dir", str(tmp_path / "cap"), *extra],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr,
    )  # fmt: skip


def _traffic(port: int) -> None:
    """One unary call and one stream with two requests of 3 responses each."""
    with grpcclient.InferenceServerClient(f"127.0.0.1:{port}") as client:
        client.infer("echo", echo_inputs(np.arange(3, dtype=np.uint8)))
    s = StreamSession(f"127.0.0.1:{port}")
    s.send("tokens", echo_inputs(np.arange(2, dtype=np.uint8)), "a")
    s.send("tokens", echo_inputs(np.arange(2, dtype=np.uint8)), "b")
    s.take(6)
    s.close()


def _recorded_then_stopped(upstream: int, tmp_path: Path, before_stop: Callable[[], object] = lambda: None) -> int:
    """A `record` process (its stderr in tmp_path/stderr.log), :func:`_traffic` through it, ``before_stop``, then
    SIGTERM: its exit code."""
    log = tmp_path / "stderr.log"
    with open(log, "wb") as err:
        proc = _record(upstream, tmp_path, err)
        try:
            wait_for(lambda: b'"recording"' in log.read_bytes(), 30, "the proxy to start")
            port = int(json.loads(log.read_text().splitlines()[0])["listen"].rsplit(":", 1)[1])
            _traffic(port)
            wait_for(lambda: log.read_text().count('"call_end"') >= 2, 30, "two call_end lines")
            before_stop()
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(30)
    return code


def test_json_logs_off_a_tty_one_line_per_call_end(fake_process: int, tmp_path: Path) -> None:
    """stderr not a TTY: every line is JSON; exactly one info `call_end` per call; nothing per message."""
    log = tmp_path / "stderr.log"
    assert _recorded_then_stopped(fake_process, tmp_path) == 0
    lines = [json.loads(line) for line in log.read_text().splitlines()]  # raises if any line is not JSON
    ends = [e for e in lines if e["event"] == "call_end"]
    assert sorted((e["method"], e["cause"], e["status"]) for e in ends) == [
        ("ModelInfer", "ok", "OK"), ("ModelStreamInfer", "ok", "OK")
    ]  # fmt: skip
    stream_end = next(e for e in ends if e["method"] == "ModelStreamInfer")
    assert stream_end["messages_c2s"] == 2 and stream_end["messages_s2c"] == 6
    assert all(e["level"] == "info" for e in ends)
    assert {e["event"] for e in lines} == {"recording", "call_end", "shutting_down", "capture_closed"}


def test_a_stop_after_the_capture_directory_was_removed_exits_1_saying_what_was_lost(
    fake_process: int, tmp_path: Path
) -> None:
    """The capture directory removed under a recording proxy, then SIGTERM: its file and the capture_end are in
    no file. The proxy exits 1 with one error line saying so, and no `capture_closed` naming the deleted file.
    (It exited 0, `capture_closed` listing the file that was gone, as after a clean stop.)"""
    import shutil

    code = _recorded_then_stopped(fake_process, tmp_path, lambda: shutil.rmtree(tmp_path / "cap"))
    text = (tmp_path / "stderr.log").read_text().splitlines()
    assert code == 1, text
    assert text[-1].startswith(f"triton-tap: error: the capture '{tmp_path / 'cap'}/capture-") and (
        "was not closed:" in text[-1] and "its capture_end among them, could not be written" in text[-1]), text[-1]
    events = [json.loads(line)["event"] for line in text[:-1]]
    assert "capture_not_closed" in events and "capture_closed" not in events


def test_console_logs_on_a_tty(fake_process: int, tmp_path: Path) -> None:
    """stderr a TTY: console rendering (not JSON), still one call_end line per call."""
    master, slave = pty.openpty()
    proc = _record(fake_process, tmp_path, slave)
    os.close(slave)
    out = b""

    def read() -> str:
        nonlocal out
        while select.select([master], [], [], 0.05)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        return out.decode(errors="replace")

    try:
        wait_for(lambda: "recording" in read(), 30, "the proxy to start")
        listen = next(w for w in read().split() if w.startswith("listen="))
        _traffic(int(listen.rsplit(":", 1)[1].strip("'")))
        wait_for(lambda: read().count("call_end") >= 2, 30, "two call_end lines")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        read()  # the pty keeps what the process wrote before it exited
        os.close(master)
    text = out.decode(errors="replace")
    lines = [ln for ln in text.splitlines() if "call_end" in ln]
    assert len(lines) == 2
    assert not any(ln.lstrip().startswith("{") for ln in text.splitlines() if ln.strip())
    assert all("[info" in ln for ln in lines)


# -- config file ---------------------------------------------------------------------------------------


def _record_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_record_arguments(p)
    return p


def test_every_record_flag_has_a_config_key(tmp_path: Path) -> None:
    """Each `record` flag (except --help/--config) can be set from the TOML file, and is."""
    parser = _record_parser()
    flags = {o[2:] for a in parser._actions for o in a.option_strings if o.startswith("--")} - {"help", "config"}
    assert flags == set(config_keys(parser))
    cfg = tmp_path / "all.toml"
    cfg.write_text(
        'listen = "0.0.0.0:9011"\nupstream = "triton:8001"\ncapture-dir = "/captures"\npayload = "full"\n'
        "payload-cap = 4096\nrotate-mb = 64\ngzip-rotated = true\ndrain-timeout = 25\n"
        'redact = ["x-team-key"]\nmetrics = "0.0.0.0:9090"\nlog_level = "warning"\n'
        'evidence = "metrics=http://triton:8002/metrics"\nevidence-window = 3\n'
        'redact-input = ["prompt"]\nredact-salt = "s"\ntls-cert = "/c.pem"\ntls-key = "/k.pem"\n'
        'upstream-tls = true\nupstream-ca = "/ca.pem"\nupstream-cert = "/uc.pem"\nupstream-key = "/uk.pem"\n'
        'upstream-server-name = "triton.internal"\nadmin = "127.0.0.1:8090"\n'
        'tls-client-ca = "/clients.pem"\ntls-watch = 0\nmax-total-mb = 100\nmin-free-mb = 0\ncompress = "none"\nworkers = 2\n'
        'event-loop = "asyncio"\npayload-store = "inline"\nready-file = "/run/tap.ready"\n'
        'http-listen = "0.0.0.0:9000"\nhttp-upstream = "triton:8000"\nhttp-upstream-tls = true\n'
    )
    values = load_config(cfg, parser)
    assert {a.dest for a in parser._actions if a.dest in values} == {config_keys(parser)[f].dest for f in flags}
    assert values == {
        "listen": "0.0.0.0:9011", "upstream": "triton:8001", "http_listen": "0.0.0.0:9000",
        "http_upstream": "triton:8000", "capture_dir": Path("/captures"), "payload": "full",
        "payload_cap": 4096, "payload_store": "inline", "workers": 2, "event_loop": "asyncio", "rotate_mb": 64.0, "gzip_rotated": True, "drain_timeout": 25.0,
        "redact": ["x-team-key"], "metrics": "0.0.0.0:9090", "log_level": "warning",
        "evidence": "metrics=http://triton:8002/metrics", "evidence_window": 3.0,
        "redact_input": ["prompt"], "redact_salt": "s", "tls_cert": Path("/c.pem"), "tls_key": Path("/k.pem"),
        "upstream_tls": True, "upstream_ca": Path("/ca.pem"), "upstream_cert": Path("/uc.pem"), "admin": "127.0.0.1:8090",
        "upstream_key": Path("/uk.pem"), "upstream_server_name": "triton.internal",
        "tls_client_ca": Path("/clients.pem"), "tls_watch": 0.0, "max_total_mb": 100.0, "min_free_mb": 0.0, "compress": "none",
        "ready_file": Path("/run/tap.ready"), "http_upstream_tls": True,
    }  # fmt: skip


def test_flags_override_the_config_file(tmp_path: Path) -> None:
    """A flag on the command line wins over the file; what the flag does not set comes from the file."""
    from proxy.cli import _parse

    cfg = tmp_path / "c.toml"
    cfg.write_text('listen = "0.0.0.0:9011"\npayload = "none"\n')
    parser = build_parser()
    args = _parse(parser, parser.get_default("record_parser"), ["record", "--config", str(cfg), "--payload", "full"])
    assert args.payload == "full" and args.listen == "0.0.0.0:9011"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('listen = "x:1"\nbogus = 1\n', "unknown key 'bogus'"),
        ('payload = "all"\n', "must be one of none, meta, full"),
        ("drain-timeout = -1\n", "must be a number > 0"),
        ("rotate-mb = nan\n", "key 'rotate-mb'"),
        ("rotate-mb = inf\n", "key 'rotate-mb'"),
        ("payload-cap = 99999999999999999999\n", "key 'payload-cap'"),
        ('evidence = "log=/nonexistent"\n', "key 'evidence'"),
        ('listen = "127.0.0.1:99999"\n', "key 'listen'"),
        ('gzip-rotated = "yes"\n', "must be true or false"),
        ("listen = [1\n", "is not valid TOML"),
        ("rotate_mb = 10\nrotate-mb = 20\n", "keys 'rotate_mb' and 'rotate-mb' set the same setting"),
        ("min-free-mb = -1\n", "key 'min-free-mb': must be a number >= 0 "),  # (0 is valid: never "must be > 0")
    ],
)
def test_bad_config_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    """Unknown keys, bad values and broken TOML: one line on stderr naming the file, exit 2."""
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(UserError, match=message):
        load_config(cfg, _record_parser())
    proc = subprocess.run([str(TRITON_TAP), "record", "--config", str(cfg)], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and str(cfg) in lines[0], proc.stderr


def test_non_utf8_config_is_one_line(tmp_path: Path) -> None:
    """A config file that is not UTF-8: one line naming the file, exit 2 (no UnicodeDecodeError traceback)."""
    cfg = tmp_path / "latin1.toml"
    cfg.write_bytes('payload = "m\xe9ta"\n'.encode("latin-1"))
    proc = subprocess.run([str(TRITON_TAP), "record", "--config", str(cfg)], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not UTF-8" in lines[0] and str(cfg) in lines[0], proc.stderr


def test_config_file_drives_a_real_record_run(fake_process: int, tmp_path: Path) -> None:
    """`record --config` alone starts the proxy with the file's settings (capture dir, payload)."""
    cfg = tmp_path / "proxy.toml"
    cap = tmp_path / "from-config"
    cfg.write_text(f'listen = "127.0.0.1:0"\nupstream = "127.0.0.1:{fake_process}"\ncapture-dir = "{cap}"\n'
                   'payload = "none"\n')  # fmt: skip
    log = tmp_path / "stderr.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([str(TRITON_TAP), "record", "--config", str(cfg)], stderr=err, stdout=subprocess.DEVNULL)
        try:
            wait_for(lambda: b'"recording"' in log.read_bytes(), 30, "the proxy to start")
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
    first = json.loads(log.read_text().splitlines()[0])
    assert first["payload"] == "none" and first["capture"].startswith(str(cap))


def test_busy_metrics_port_is_one_line(fake_process: int, tmp_path: Path) -> None:
    """--metrics on a port in use: one line naming it, exit 2, no capture file left behind."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    busy = s.getsockname()[1]
    try:
        proc = subprocess.run(
            [str(TRITON_TAP), "record", "--listen", "127.0.0.1:0", "--upstream", f"127.0.0.1:{fake_process}",
             "--capture-dir", str(tmp_path / "cap"), "--metrics", f"127.0.0.1:{busy}"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        s.close()
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot serve metrics on 127.0.0.1:{busy}" in lines[0], proc.stderr
    assert list((tmp_path / "cap").glob("capture-*")) == []


def test_sighup_reopens_the_capture_and_keeps_the_open_stream(fake_process: int, tmp_path: Path) -> None:
    """A real SIGHUP to the record process: a stream open across it goes on; the capture continues in a
    second file (capture_end reopen -> next_file) and reads as one capture with no hole."""
    from replay.capture import events as ev
    from replay.capture.reader import read_capture

    log = tmp_path / "stderr.log"
    with open(log, "wb") as err:
        proc = _record(fake_process, tmp_path, err)
        try:
            wait_for(lambda: b'"recording"' in log.read_bytes(), 30, "the proxy to start")
            port = int(json.loads(log.read_text().splitlines()[0])["listen"].rsplit(":", 1)[1])
            s = StreamSession(f"127.0.0.1:{port}")
            s.send("tokens", echo_inputs(np.arange(2, dtype=np.uint8)), "a")
            s.take(3)
            proc.send_signal(signal.SIGHUP)
            wait_for(lambda: len(list((tmp_path / "cap").glob("capture-*"))) == 2, 30, "a second capture file")
            s.send("tokens", echo_inputs(np.arange(2, dtype=np.uint8)), "b")
            s.take(3)
            s.close()
            wait_for(lambda: '"call_end"' in log.read_text(), 30, "the stream's call_end")
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
    reader = read_capture(tmp_path / "cap")
    recs = [r for _, r in reader]
    assert reader.gaps == []
    assert [e.reason for e in recs if isinstance(e, ev.CaptureEnded)] == ["reopen", "shutdown"]
    (end,) = [r for r in recs if isinstance(r, ev.CallEnded)]
    assert end.cause == "ok" and end.messages_c2s == 2 and end.messages_s2c == 6

"""Processes of the benchmark: start, wait for, measure (/proc) and always stop.

Each process is started in its own session (so a Ctrl-C in the terminal reaches only the
harness, which then stops them in order) with a parent-death signal (so even a SIGKILLed harness
leaves nothing behind on Linux). CPU time and RSS come from /proc, whole process (all threads)
and, for nginx, the master plus its workers.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
_TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float, proc: subprocess.Popen[Any] | None = None) -> None:
    """Until 127.0.0.1:port accepts a connection; raises if ``proc`` dies or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s") from None
            time.sleep(0.05)


def _pdeathsig() -> None:  # runs in the child between fork and exec
    os.setsid()
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


# -- /proc -----------------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += _children(p)
    return seen


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of these processes (all their threads), in seconds."""
    user, system = user_system_seconds(pids)
    return user + system


def user_system_seconds(pids: list[int]) -> tuple[float, float]:
    """(utime, stime) of these processes (all their threads), in seconds; a process gone counts nothing."""
    user = system = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            u, s = int(fields[11]), int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
        user, system = user + u, system + s
    return user / _TICK, system / _TICK


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of one process in MB."""
    rss = hwm = 0.0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) / 1024
    except OSError:
        pass
    return rss, hwm


# -- managed processes -----------------------------------------------------------------------------


class Proc:
    """One child process the harness owns."""

    def __init__(self, name: str, argv: list[str], *, cwd: Path = REPO, log: Path | None = None,
                 stdin: bool = False, stdout_pipe: bool = False, stop_signal: int = signal.SIGTERM) -> None:  # fmt: skip
        self.name = name
        self.argv = argv
        self.stop_signal = stop_signal
        self.log_path = log
        self._log = open(log, "wb") if log is not None else subprocess.DEVNULL
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.p: subprocess.Popen[bytes] = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout_pipe else self._log,
            stderr=self._log,
            preexec_fn=_pdeathsig,
        )

    @property
    def pid(self) -> int:
        return self.p.pid

    def cpu(self) -> float:
        return cpu_seconds(tree(self.pid))

    def user_system(self) -> tuple[float, float]:
        return user_system_seconds(tree(self.pid))

    def alive(self) -> bool:
        return self.p.poll() is None

    def log_tail(self, n: int = 2000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_bytes()[-n:].decode("utf-8", "replace")

    def stop(self, timeout: float = 15.0) -> int | None:
        """Signal, wait, and kill if it does not go; returns the exit code."""
        if self.p.poll() is None:
            try:
                if self.p.stdin is not None:
                    self.p.stdin.close()
            except OSError:
                pass
            try:
                self.p.send_signal(self.stop_signal)
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)
            except ProcessLookupError:
                pass
        if self._log is not subprocess.DEVNULL:
            self._log.close()  # type: ignore[union-attr]
        return self.p.returncode


class Worker(Proc):
    """The load generator: JSON line commands on stdin, JSON line answers on stdout."""

    def __init__(self, log: Path) -> None:
        super().__init__("loadgen", [PY, "-m", "bench.harness.loadgen"], log=log, stdin=True, stdout_pipe=True)

    def send(self, cmd: dict[str, Any]) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write((json.dumps(cmd) + "\n").encode())
        self.p.stdin.flush()

    def read(self, timeout: float) -> dict[str, Any]:
        assert self.p.stdout is not None
        r, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not r:
            raise TimeoutError(f"load generator gave no answer in {timeout:.0f} s")
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"load generator exited ({self.p.poll()}): {self.log_tail()}")
        return json.loads(line)  # type: ignore[no-any-return]

    def call(self, cmd: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.send(cmd)
        while True:
            msg = self.read(timeout + 15)
            if "event" in msg:
                continue
            if "error" in msg:
                raise RuntimeError(f"load generator: {msg['error']}")
            return msg["result"]  # type: ignore[no-any-return]


def _start_upstream(workdir: Path) -> tuple[Proc, int]:
    port = free_port()
    proc = Proc("upstream", [PY, "-m", "bench.harness.fake_upstream", "--port", str(port)], log=workdir / "upstream.log")
    _wait(proc, port, 20)
    return proc, port


def _start_proxy(workdir: Path, upstream_port: int, payload: str, *, profile: str | None = None,
                module: str = "proxy", name: str | None = None, flags: tuple[str, ...] = ()) -> tuple[Proc, int]:  # fmt: skip
    """``python -m proxy`` (optionally under ``python -m cProfile -o PROFILE``; ``module`` replaces
    ``proxy`` to A/B a patched proxy that takes the same flags)."""
    port = free_port()
    name = name or f"proxy-{payload}"
    cap = workdir / f"capture-{name}-{port}"
    args = ["--listen", f"127.0.0.1:{port}", "--upstream", f"127.0.0.1:{upstream_port}",
            "--capture-dir", str(cap), "--payload", payload, "--log-level", "warning", *flags]  # fmt: skip
    argv = [PY, "-m", "cProfile", "-o", profile, "-m", module, *args] if profile else [PY, "-m", module, *args]
    proc = Proc(name, argv, log=workdir / f"{name}-{port}.log")
    _wait(proc, port, 20)
    return proc, port


def _retry(start: Callable[[], tuple[Proc, int]], attempts: int = 3) -> tuple[Proc, int]:
    """Start, and on a start-up failure (typically: the free port was taken meanwhile) try again
    on a new port; the failed process is stopped."""
    for attempt in range(attempts):
        try:
            return start()
        except _StartFailed as e:
            e.proc.stop()
            if attempt == attempts - 1:
                raise RuntimeError(f"{e.proc.name} did not start: {e}; log: {e.proc.log_tail(800)}") from None
    raise AssertionError("unreachable")


class _StartFailed(RuntimeError):
    def __init__(self, proc: Proc, why: str) -> None:
        super().__init__(why)
        self.proc = proc


def _wait(proc: Proc, port: int, timeout: float) -> None:
    try:
        wait_port(port, timeout, proc.p)
    except RuntimeError as e:
        raise _StartFailed(proc, str(e)) from None


def start_upstream(workdir: Path) -> tuple[Proc, int]:
    """The fake Triton (``bench.harness.fake_upstream``) on a free loopback port."""
    return _retry(lambda: _start_upstream(workdir))


def start_proxy(workdir: Path, upstream_port: int, payload: str, *, profile: str | None = None,
                module: str = "proxy", name: str | None = None, flags: tuple[str, ...] = ()) -> tuple[Proc, int]:  # fmt: skip
    """``python -m proxy`` (optionally under ``python -m cProfile -o PROFILE``; ``module`` replaces
    ``proxy`` to A/B a patched proxy that takes the same flags; ``flags``: more of them)."""
    return _retry(lambda: _start_proxy(workdir, upstream_port, payload, profile=profile, module=module, name=name,
                                       flags=flags))  # fmt: skip


def _start_http_upstream(workdir: Path) -> tuple[Proc, int]:
    port = free_port()
    proc = Proc("http-upstream", [PY, "-m", "bench.harness.fake_http_upstream", "--port", str(port)],
                log=workdir / "http-upstream.log")  # fmt: skip
    _wait(proc, port, 20)
    return proc, port


def start_http_upstream(workdir: Path) -> tuple[Proc, int]:
    """The fake Triton HTTP port (``bench.harness.fake_http_upstream``) on a free loopback port."""
    return _retry(lambda: _start_http_upstream(workdir))


def proxy_has_http(module: str = "proxy") -> bool:
    """Whether ``python -m MODULE`` (``triton-tap record``'s flags) takes ``--http-listen``."""
    r = subprocess.run([PY, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")))  # fmt: skip
    return "--http-listen" in r.stdout


def _start_http_proxy(workdir: Path, upstream_port: int, payload: str, name: str) -> tuple[Proc, int]:
    port = free_port()
    cap = workdir / f"capture-{name}-{port}"
    argv = [PY, "-m", "proxy", "--http-listen", f"127.0.0.1:{port}", "--http-upstream", f"127.0.0.1:{upstream_port}",
            "--capture-dir", str(cap), "--payload", payload, "--log-level", "warning"]  # fmt: skip
    proc = Proc(name, argv, log=workdir / f"{name}-{port}.log")
    _wait(proc, port, 20)
    return proc, port


def start_http_proxy(workdir: Path, upstream_port: int, payload: str, name: str) -> tuple[Proc, int]:
    """``python -m proxy`` relaying HTTP/1.1 only (``--http-listen``/``--http-upstream``)."""
    return _retry(lambda: _start_http_proxy(workdir, upstream_port, payload, name))


def start_nginx(workdir: Path, upstream_port: int) -> tuple[Proc, int]:
    """nginx ``grpc_pass`` to the upstream, with a generated config in ``workdir/nginx``."""
    return _retry(lambda: _start_nginx(workdir, upstream_port))


#: What both nginx configurations share: one worker in the foreground, files under the run's directory.
_NGINX_HEAD = """\
{user}worker_processes 1;
daemon off;
master_process on;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
worker_rlimit_nofile 16384;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  client_body_temp_path {d}/client_body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
"""

NGINX_CONF = _NGINX_HEAD + """\
  upstream triton {{
    server 127.0.0.1:{upstream};
    keepalive 1024;
  }}
  server {{
    listen 127.0.0.1:{port} http2;
    http2_max_concurrent_streams 4096;
    keepalive_requests 1000000;
    keepalive_timeout 3600s;
    client_max_body_size 0;
    client_body_timeout 3600s;
    location / {{
      grpc_pass grpc://triton;
      grpc_read_timeout 3600s;
      grpc_send_timeout 3600s;
      grpc_socket_keepalive on;
    }}
  }}
}}
"""


#: nginx as an HTTP/1.1 reverse proxy in front of Triton's HTTP port: what a team would put there.
NGINX_HTTP_CONF = _NGINX_HEAD + """\
  upstream triton_http {{
    server 127.0.0.1:{upstream};
    # Idle upstream connections kept open: without it nginx opens one per request.
    keepalive 1024;
  }}
  server {{
    listen 127.0.0.1:{port};
    keepalive_requests 1000000;
    keepalive_timeout 3600s;
    client_max_body_size 0;
    client_body_timeout 3600s;
    location / {{
      proxy_pass http://triton_http;
      # Upstream keep-alive needs HTTP/1.1 (nginx speaks 1.0 to upstreams by default) and no
      # "Connection: close", which nginx otherwise sends on every upstream request.
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      # generate_stream is server-sent events: with buffering on, nginx holds events in its
      # buffers until they fill or the body ends, so a client would see them late and in bursts.
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 3600s;
      proxy_send_timeout 3600s;
    }}
  }}
}}
"""


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)


def start_nginx_http(workdir: Path, upstream_port: int, subdir: str = "nginx-http") -> tuple[Proc, int]:
    """nginx ``proxy_pass`` (HTTP/1.1, keep-alive, unbuffered) to the upstream, config in ``workdir/SUBDIR``."""
    return _retry(lambda: _start_nginx(workdir, upstream_port, NGINX_HTTP_CONF, subdir))


def _start_nginx(workdir: Path, upstream_port: int, template: str = NGINX_CONF,
                 subdir: str = "nginx") -> tuple[Proc, int]:  # fmt: skip
    binary = nginx_binary()
    assert binary is not None
    d = workdir / subdir
    d.mkdir(exist_ok=True)
    port = free_port()
    user = "user root;\n" if os.geteuid() == 0 else ""
    conf = d / "nginx.conf"
    conf.write_text(template.format(user=user, d=d, upstream=upstream_port, port=port))
    # SIGTERM = nginx "fast shutdown" of master and workers.
    proc = Proc("nginx", [binary, "-p", str(d), "-e", str(d / "error.log"), "-c", str(conf)],
                log=d / "stderr.log")  # fmt: skip
    _wait(proc, port, 10)
    return proc, port


def stop_all(started: list[Any], errors: list[str]) -> None:
    """Stop ``started`` processes (last first) and empty the list; a proxy that exited non-zero, or a
    process that would not stop, is an entry in ``errors`` (a benchmark of a crashed proxy is no figure)."""
    for p in reversed(started):
        try:
            code = p.stop()
            if p.name.startswith("proxy") and code not in (0, None):
                errors.append(f"{p.name} exited with {code}: {p.log_tail(500)}")
        except Exception as e:
            errors.append(f"stopping {p.name}: {e}")
    started.clear()

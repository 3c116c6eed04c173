"""A real Triton Inference Server (2.51, CPU only, Python backend) from the nvidia-pytriton wheel, no Docker.

The proxy is tested against the genuine server rather than a fake so that streaming, cancellation
and error semantics are the ones a deployment sees; ``triton-tap lab triton`` (:mod:`proxy.lab.command`)
runs the same server for users.

What it needs: ``nvidia-pytriton==0.7.0`` installed in this interpreter (the ``demo`` extra; a
manylinux_2_35 wheel: Linux x86-64 with glibc 2.35 or newer). Inside its package the wheel carries
the ``tritonserver`` binary (Triton 2.51.0), the Python backend (``libtriton_python.so``,
``triton_python_backend_utils.py``), one backend stub per Python version and the shared libraries
it links (``nvidia_pytriton.libs``). Only Python-backend models (``config.pbtxt`` + ``1/model.py``)
can be served. No GPU is needed; on a CPU-only machine Triton logs harmless NVML, DCGM, CUDA driver
and pinned-memory warnings.

What it does to run the binary directly on a model repository:

- a private backend directory in ``workdir`` holds the Python backend's two files plus the stub of
  the running interpreter (the backend looks for its stub beside ``libtriton_python.so``; without
  it: "triton_python_backend_stub is not found");
- ``LD_LIBRARY_PATH`` starts with this interpreter's own library directory, then the wheel's
  libraries: otherwise the stub may link the system's libpython under this interpreter's standard
  library (every model then fails to load), or not find ``libcudart``;
- ``PATH`` starts with this interpreter's ``bin/``: the stub's embedded Python takes its prefix
  and packages (numpy 1.26, as nvidia-pytriton pins it) from the first ``python3`` on ``PATH``;
- every endpoint (gRPC, HTTP, metrics) is bound to 127.0.0.1, on the ports asked for or free ones;
  readiness is HTTP ``GET /v2/health/ready`` (a Python model takes a few seconds to load);
- the server runs in a session of its own; stopping it is SIGTERM (it waits up to 5 s for
  in-flight work, ``--exit-timeout-secs``), then SIGKILL for whatever is left of its process group,
  so no backend stub outlives it, and the shared-memory regions of this launch are removed.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "TritonNotAvailable",
    "TritonServer",
    "TritonStartupError",
    "free_port",
    "group_alive",
    "model_repository",
]

LOG_FILE_NAME = "tritonserver.log"
_POLL_INTERVAL_S = 0.1
_LOG_TAIL_LINES = 30
_GROUP_EXIT_TIMEOUT_S = 10.0
# Never route loopback through an http_proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def group_alive(pgid: int) -> bool:
    """Some process of group ``pgid`` is still running (zombies, which a container's init may
    never reap, do not count: they hold no memory or shared-memory mappings)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after its ')'.
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def _new_shm_prefix() -> str:
    return f"triton_tap_{os.getpid()}_{uuid.uuid4().hex[:8]}_"

# No shm-default-byte-size / shm-growth-byte-size override on purpose: the Python
# backend's shared-memory pool (1 MiB by default) grows on demand, and with the defaults
# a 64 MiB uint8 tensor round-trips through `echo` on Triton 2.51 (about as fast as with a
# 64 MiB pool), so the test server keeps the settings a default deployment has. Message
# size is not a limit either: the same 64 MiB call passes Triton's gRPC server and
# tritonclient's channel, which both raise gRPC's 4 MiB receive default.


class TritonNotAvailable(RuntimeError):
    """The nvidia-pytriton wheel (server binary, Python backend or stub) is missing."""


class TritonStartupError(RuntimeError):
    """The server exited early or did not become ready; the message holds the log tail."""


#: Launches tried when ports chosen free are taken before Triton binds them.
_PORT_ATTEMPTS = 3
#: The line the launcher writes into the server's log before each launch.
_LAUNCH_MARK = "=== triton-tap: starting "


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    return _free_ports(1)[0]


def _free_ports(count: int) -> list[int]:
    # Hold all sockets open until every port is chosen: binding them one after another
    # and closing each immediately can hand the same port out twice.
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def model_repository() -> Path:
    """Path of the packaged model repository (``proxy/lab/models``)."""
    return Path(__file__).resolve().parent / "models"


@dataclass(frozen=True)
class _Distribution:
    binary: Path
    backend_files: tuple[Path, ...]
    stub: Path
    libs_dir: Path


def _locate_distribution() -> _Distribution:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TritonNotAvailable(
            "nvidia-pytriton is not installed in this interpreter "
            f"({sys.executable}); pip install nvidia-pytriton==0.7.0"
        )
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    server_dir = package_dir / "tritonserver"
    binary = server_dir / "bin" / "tritonserver"
    backend_src = server_dir / "backends" / "python"
    backend_files = (
        backend_src / "libtriton_python.so",
        backend_src / "triton_python_backend_utils.py",
    )
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = server_dir / "python_backend_stubs" / version / "triton_python_backend_stub"
    libs_dir = package_dir.parent / "nvidia_pytriton.libs"
    for required in (binary, *backend_files, stub, libs_dir):
        if not required.exists():
            raise TritonNotAvailable(
                f"nvidia-pytriton at {package_dir} lacks {required} "
                f"(Python {version}); reinstall nvidia-pytriton==0.7.0"
            )
    return _Distribution(binary, backend_files, stub, libs_dir)


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"


@dataclass
class TritonServer:
    """A tritonserver process bound to loopback, serving ``model_repository``.

    ``grpc_port``, ``http_port``, ``metrics_port``: where it listens; 0 (the default) is a free port
    chosen at each :meth:`start`.
    """

    model_repository: Path
    workdir: Path
    log_verbose: int = 1
    extra_args: Sequence[str] = ()
    grpc_port: int = 0
    http_port: int = 0
    metrics_port: int = 0
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _ports: tuple[int, int, int] | None = field(default=None, init=False, repr=False)
    # A per-launch prefix lets stop()/kill() delete exactly this server's shared-memory regions,
    # which a SIGKILLed server cannot clean up itself, and keeps a restarted server from ever
    # meeting a region (and its interprocess mutexes) of the killed one.
    _shm_prefix: str = field(default_factory=lambda: _new_shm_prefix(), init=False, repr=False)

    # -- properties -----------------------------------------------------------------

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self._require_ports()[0]}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self._require_ports()[1]}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self._require_ports()[2]}/metrics"

    @property
    def log_path(self) -> Path:
        return self.workdir / LOG_FILE_NAME

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- lifecycle ------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> None:
        """Start on the configured ports (free ones for those at 0) and block until the server and all
        models are ready."""
        if self.running:
            raise RuntimeError(f"tritonserver already running (pid {self.pid})")
        asked = (self.grpc_port, self.http_port, self.metrics_port)
        for attempt in range(_PORT_ATTEMPTS):
            free = iter(_free_ports(asked.count(0)))
            grpc_port, http_port, metrics_port = (port or next(free) for port in asked)
            self._ports = (grpc_port, http_port, metrics_port)
            try:
                self._launch(timeout)
                return
            except TritonStartupError:
                # A port chosen free was taken by another process before Triton bound it (a busy
                # machine starting servers in parallel): choose again. Ports the caller named are theirs.
                if 0 not in asked or attempt == _PORT_ATTEMPTS - 1 or not self._port_taken():
                    raise

    def _port_taken(self) -> bool:
        """Whether the last launch's log says a socket was already in use (Triton: ``failed to start
        HTTP service: Unavailable - Socket '127.0.0.1:P' already in use``)."""
        text = self.log_path.read_text(errors="replace")
        return "already in use" in text[text.rfind(_LAUNCH_MARK) :]

    def wait(self) -> int:
        """Block until the server exits by itself (or is stopped from another thread); its exit code."""
        process = self._process
        if process is None:
            raise RuntimeError("tritonserver is not running")
        code = process.wait()
        self._reap(process)
        return code

    def restart(self, timeout: float = 120.0) -> None:
        """Start again on the ports of the first start, e.g. after kill() or stop()."""
        if self._ports is None:
            raise RuntimeError("restart() before start(): no ports to reuse")
        self.stop()
        self._launch(timeout)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL. Safe to call repeatedly."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._kill_group(process)
                process.wait()
        self._reap(process)

    def kill(self) -> None:
        """SIGKILL immediately, as an upstream crash would look to the proxy."""
        process = self._process
        if process is None:
            return
        # Kill the whole session, not just the server: orphaned Python stubs would otherwise
        # linger until their parent-health check notices, holding CPU and shared memory.
        self._kill_group(process)
        process.wait()
        self._reap(process)

    def __enter__(self) -> TritonServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the server's log."""
        return _tail(self.log_path, lines)

    def server_version(self) -> str:
        """The version the running server reports (HTTP ``GET /v2``)."""
        return str(self._http_json("GET", "/v2")["version"])

    def ready_models(self) -> list[str]:
        """Names of the models the running server reports READY (HTTP repository index), sorted."""
        index = self._http_json("POST", "/v2/repository/index", {"ready": True})
        return sorted({str(m["name"]) for m in index if m.get("state") == "READY"})

    # -- internals ------------------------------------------------------------------

    def _http_json(self, method: str, path: str, body: object = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.http_url}{path}", data=data, method=method)
        with _OPENER.open(request, timeout=10.0) as response:
            return json.loads(response.read())

    def _require_ports(self) -> tuple[int, int, int]:
        if self._ports is None:
            raise RuntimeError("tritonserver has not been started: no ports yet")
        return self._ports

    def _prepare_backends(self, dist: _Distribution) -> Path:
        backends = self.workdir / "backends"
        python_dir = backends / "python"
        python_dir.mkdir(parents=True, exist_ok=True)
        # The Python backend looks for its stub next to libtriton_python.so, but the wheel
        # keeps stubs in a per-Python-version directory, hence a private backend dir.
        for source in (*dist.backend_files, dist.stub):
            target = python_dir / source.name
            if not target.exists() or target.stat().st_size != source.stat().st_size:
                shutil.copy2(source, target)
        return backends

    def _environment(self, dist: _Distribution) -> dict[str, str]:
        env = dict(os.environ)
        libdir = sysconfig.get_config_var("LIBDIR")
        # The interpreter's own libpython must win over the system one, or the stub runs
        # a different libpython under this interpreter's stdlib and every model fails.
        ld_path = [str(libdir)] if libdir else []
        ld_path.append(str(dist.libs_dir))
        if env.get("LD_LIBRARY_PATH"):
            ld_path.append(env["LD_LIBRARY_PATH"])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(ld_path)
        # The stub takes sys.prefix from the first python3 on PATH, so this interpreter's
        # bin dir must come first for models to see the same packages (numpy 1.26).
        env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), *filter(None, [env.get("PATH")])])
        return env

    def _command(self, dist: _Distribution, backends: Path) -> list[str]:
        grpc_port, http_port, metrics_port = self._require_ports()
        return [
            str(dist.binary),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backends}",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={grpc_port}",
            "--http-address=127.0.0.1",
            f"--http-port={http_port}",
            "--metrics-address=127.0.0.1",
            f"--metrics-port={metrics_port}",
            f"--log-verbose={self.log_verbose}",
            # Keep shutdown bounded when a model ignores cancellation and keeps computing.
            "--exit-timeout-secs=5",
            f"--backend-config=python,shm-region-prefix-name={self._shm_prefix}",
            *self.extra_args,
        ]

    def _launch(self, timeout: float) -> None:
        self._shm_prefix = _new_shm_prefix()
        dist = _locate_distribution()
        self.workdir.mkdir(parents=True, exist_ok=True)
        backends = self._prepare_backends(dist)
        command = self._command(dist, backends)
        # Append so that a restart keeps the log of the run that crashed.
        with self.log_path.open("ab") as log:
            log.write(f"{_LAUNCH_MARK}{' '.join(command)}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._environment(dist),
                # Own session so a Ctrl-C on the test run does not hit the server first and
                # so kill() can take the backend stubs down with it.
                start_new_session=True,
            )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        process = self._process
        assert process is not None
        url = f"{self.http_url}/v2/health/ready"
        deadline = time.monotonic() + timeout
        while True:
            code = process.poll()
            if code is not None:
                self._reap(process)
                raise TritonStartupError(
                    f"tritonserver exited with code {code} before becoming ready; "
                    f"last log lines of {self.log_path}:\n{_tail(self.log_path)}"
                )
            try:
                with _OPENER.open(url, timeout=2.0) as response:
                    if response.status == 200:
                        return
            except (OSError, http.client.HTTPException):
                pass  # not listening yet, or 400 while models are still loading
            if time.monotonic() >= deadline:
                self.kill()
                raise TritonStartupError(
                    f"tritonserver not ready after {timeout:.0f}s; "
                    f"last log lines of {self.log_path}:\n{_tail(self.log_path)}"
                )
            time.sleep(_POLL_INTERVAL_S)

    @staticmethod
    def _kill_group(process: subprocess.Popen[bytes]) -> None:
        # start_new_session=True made the server its session/group leader (pgid == pid).
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                process.kill()

    def _reap(self, process: subprocess.Popen[bytes]) -> None:
        # Stubs normally exit with the server; anything left in its group is stale. Wait until
        # the group is gone: a restart while killed stubs still hold the backend's shared memory
        # crashed the new server's stub loading (boost::interprocess::lock_exception) under load.
        deadline = time.monotonic() + _GROUP_EXIT_TIMEOUT_S
        while group_alive(process.pid) and time.monotonic() < deadline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            time.sleep(_POLL_INTERVAL_S / 10)
        for region in Path("/dev/shm").glob(f"{self._shm_prefix}*"):
            with contextlib.suppress(OSError):
                region.unlink()
        self._process = None

"""``triton-tap lab triton``: a real CPU Triton to try the proxy against, without Docker.

It runs :class:`proxy.lab.tritonserver.TritonServer` in the foreground: prints the addresses once the
server and every model are ready, then waits until Ctrl-C or SIGTERM and stops the server (and its
backend stubs) before exiting. Registering the command imports nothing but argparse.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from replay.errors import EXIT_OK, UpstreamError, UserError
from replay.hostport import cannot_listen

if TYPE_CHECKING:
    from proxy.lab.tritonserver import TritonServer

#: Triton's own defaults, which clients and docs assume.
DEFAULT_PORTS = {"grpc": 8001, "http": 8000, "metrics": 8002}
READY_TIMEOUT_S = 300.0


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535 (0: a free one), got {port}")
    return port


def add_lab_commands(sub: Any) -> None:
    """``triton-tap lab triton``."""
    lab = sub.add_parser("lab", help="things to try triton-tap with (a real CPU Triton)")
    lab_sub = lab.add_subparsers(dest="lab_command", required=True, parser_class=type(lab))
    t = lab_sub.add_parser(
        "triton",
        help="run a real CPU Triton (from the nvidia-pytriton wheel, no Docker) until Ctrl-C",
        description="Run Triton Inference Server 2.51 (CPU, Python backend; from the nvidia-pytriton wheel of "
        "triton-tap's demo extra) on 127.0.0.1, serving --models, and print its gRPC, HTTP and metrics addresses "
        "once every model is ready; Ctrl-C or SIGTERM stops it. Exit 0: stopped by Ctrl-C or SIGTERM; 1: "
        "tritonserver did not become ready or exited by itself; 2: bad flag, busy port, no model repository, "
        "nvidia-pytriton not installed.",
    )
    t.add_argument("--grpc-port", type=_port, default=DEFAULT_PORTS["grpc"], metavar="P",
                   help="gRPC port (default %(default)s; 0: a free one)")
    t.add_argument("--http-port", type=_port, default=DEFAULT_PORTS["http"], metavar="P",
                   help="HTTP port (default %(default)s; 0: a free one)")
    t.add_argument("--metrics-port", type=_port, default=DEFAULT_PORTS["metrics"], metavar="P",
                   help="Prometheus metrics port (default %(default)s; 0: a free one)")
    t.add_argument("--models", type=Path, default=None, metavar="DIR",
                   help="model repository of Python-backend models (default: triton-tap's example models, "
                   "proxy/lab/models)")
    t.add_argument("--workdir", type=Path, default=None, metavar="DIR",
                   help="keep the server's log and backend directory here (default: a temporary directory, "
                   "removed on exit)")
    t.set_defaults(func=run_lab_triton)


def _check_ports(ports: dict[str, int]) -> None:
    """Busy or repeated ports are the user's to fix: said before anything starts."""
    given = [(name, port) for name, port in ports.items() if port]
    for i, (name, port) in enumerate(given):
        for other, other_port in given[:i]:
            if port == other_port:
                raise UserError(f"--{other}-port and --{name}-port are both {port}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            # As a server binds: connections of a server just stopped (killed, for a restart drill) that wait out
            # TIME_WAIT do not keep tritonserver off the port, and must not keep this check from passing either.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError as e:
                raise UserError(f"--{name}-port {port}: {cannot_listen(f'127.0.0.1:{port}', e)}") from None


def interrupt(signum: int, frame: FrameType | None) -> None:
    """A signal handler stopping a synchronous command the way Ctrl-C does (its ``finally`` blocks run)."""
    raise KeyboardInterrupt


def run_lab_triton(args: argparse.Namespace) -> int:
    """Start, print the addresses, wait for Ctrl-C/SIGTERM, stop."""
    from proxy.lab.tritonserver import TritonNotAvailable, TritonServer, TritonStartupError, model_repository

    models: Path = (args.models or model_repository()).resolve()
    if not models.is_dir():
        raise UserError(f"--models {str(models)!r} is not a directory")
    ports = {"grpc": args.grpc_port, "http": args.http_port, "metrics": args.metrics_port}
    _check_ports(ports)
    workdir = args.workdir if args.workdir is not None else Path(tempfile.mkdtemp(prefix="triton-tap-lab-"))
    # Verbose log level 1: the lines `check-cancel --log` reads as evidence.
    server = TritonServer(models, workdir=workdir, log_verbose=1, grpc_port=ports["grpc"], http_port=ports["http"],
                          metrics_port=ports["metrics"])  # fmt: skip
    # SIGTERM stops it the way Ctrl-C does, also while it is still starting; SIGINT is set too, as a shell
    # starts a background job with SIGINT ignored.
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    keep_log = False  # a server that failed leaves its log, even in a temporary directory
    try:
        print(f"starting tritonserver on 127.0.0.1, models from {models} ...", file=sys.stderr, flush=True)
        try:
            server.start(READY_TIMEOUT_S)
        except TritonNotAvailable as e:
            raise UserError(f"{e} (it comes with pip install 'triton-tap[demo]')") from None
        except TritonStartupError as e:
            keep_log = True
            raise UpstreamError(str(e)) from None
        _print_ready(server)
        code = server.wait()
        keep_log = True
        raise UpstreamError(f"tritonserver exited by itself with code {code}; last lines of {server.log_path}:\n"
                            f"{server.log_tail()}")  # fmt: skip
    except KeyboardInterrupt:
        print("stopping tritonserver ...", file=sys.stderr, flush=True)
        return EXIT_OK
    finally:
        _stop(server)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if args.workdir is None and not keep_log:
            shutil.rmtree(workdir, ignore_errors=True)


def _print_ready(server: TritonServer) -> None:
    """What the running server itself reports, then where it listens."""
    models = server.ready_models()
    print(f"tritonserver {server.server_version()} ready (pid {server.pid}); Ctrl-C or SIGTERM stops it", flush=True)
    print(f"  grpc     {server.grpc_url}")
    print(f"  http     {server.http_url}")
    print(f"  metrics  {server.metrics_url}")
    print(f"  models   {', '.join(models) or '(none ready)'}")
    print(f"  log      {server.log_path}", flush=True)


def _stop(server: TritonServer) -> None:
    """Stop gracefully; a second Ctrl-C or SIGTERM kills at once (never an orphan server)."""
    try:
        server.stop()
    except KeyboardInterrupt:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        server.kill()

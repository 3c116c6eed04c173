"""``python -m proxy.lab.firstcall``: what the first call through a fresh proxy costs, against the real tritonserver.

Each run starts ``python -m proxy`` (as ``triton-tap record``) in front of the server, waits for its
``recording`` log line, then times with tritonclient: the first unary calls through the fresh proxy,
the first call of a new connection through the now warm proxy, and the first calls of a new
connection made directly. Every client has a connection of its own (a local gRPC subchannel pool),
so each "first call" includes the HTTP/2 connection set-up, as a new client's does. The model has run
before the first run: a fresh server's first call of a Python model costs it 20-90 ms, which is the
model's, not the proxy's.

Usage: ``python -m proxy.lab.firstcall [--runs N] [--upstream HOST:PORT] [-- RECORD FLAGS...]``
(without ``--upstream`` it starts its own server).
"""

from __future__ import annotations

import argparse
import json
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

ECHO_CALLS = 6  # the first call and five later ones on each connection
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
SETTLE_S = 0.5  # the same idle pause before every first call, proxy and client alike


def _calls(url: str, n: int) -> list[float]:
    """Milliseconds of ``n`` unary ``echo`` calls on one new connection."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url, channel_args=OWN_CONNECTION)
    data = grpcclient.InferInput("INPUT", [4], "UINT8")
    data.set_data_from_numpy(np.arange(4, dtype=np.uint8))
    took = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            client.infer("echo", [data])
            took.append((time.perf_counter() - t0) * 1e3)
    finally:
        client.close()
    return took


def _start_proxy(upstream: str, capture_dir: Path, record_args: Sequence[str]) -> tuple[subprocess.Popen[str], str]:
    """``python -m proxy`` on a free port; returns it and its address once its ``recording`` line is out."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy", "--listen", "127.0.0.1:0", "--upstream", upstream,
         "--capture-dir", str(capture_dir), *record_args],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:  # read to the end, so the log never fills the pipe
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="firstcall-proxy-log", daemon=True).start()
    deadline = time.monotonic() + 60
    while (line := lines.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
        if '"recording"' in line:
            return proc, str(json.loads(line)["listen"])
    proc.wait()
    raise RuntimeError(f"python -m proxy exited with code {proc.returncode} before it listened")


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure(upstream: str, runs: int, record_args: Sequence[str], out: Path) -> str:
    """Run ``runs`` fresh proxies in front of ``upstream``; print one line per run, return the summary."""
    _calls(upstream, 3)  # the model's own first execution is not the proxy's
    fresh, warm, later, direct, direct_later = [], [], [], [], []
    for i in range(runs):
        proc, url = _start_proxy(upstream, out / f"capture-{i}", record_args)
        try:
            time.sleep(SETTLE_S)
            through = _calls(url, ECHO_CALLS)
            time.sleep(SETTLE_S)
            (again,) = _calls(url, 1)
            time.sleep(SETTLE_S)
            plain = _calls(upstream, ECHO_CALLS)
        finally:
            _stop(proc)
        fresh.append(through[0])
        later += through[1:]
        warm.append(again)
        direct.append(plain[0])
        direct_later += plain[1:]
        print(f"run {i + 1}: first call through a fresh proxy {through[0]:.2f} ms (later "
              f"{statistics.median(through[1:]):.2f}); new connection through the warm proxy {again:.2f}; "
              f"direct first {plain[0]:.2f} (later {statistics.median(plain[1:]):.2f})", flush=True)  # fmt: skip
    med = statistics.median
    return (f"median of {runs} fresh proxies: first call {med(fresh):.2f} ms, a new connection through the warm "
            f"proxy {med(warm):.2f} ms, later calls {med(later):.2f} ms; direct: first call {med(direct):.2f} ms, "
            f"later calls {med(direct_later):.2f} ms")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proxy.lab.firstcall", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=11, help="fresh proxies to start (default %(default)s)")
    parser.add_argument("--upstream", default=None, metavar="HOST:PORT",
                        help="a running Triton serving proxy/lab/models (default: start one)")
    parser.add_argument("record_args", nargs="*", metavar="RECORD FLAGS", help="more `record` flags, after --")
    args = parser.parse_args(argv)
    from proxy.lab.tritonserver import TritonServer, model_repository

    with tempfile.TemporaryDirectory(prefix="triton-tap-firstcall-") as tmp:
        if args.upstream is not None:
            print(measure(args.upstream, args.runs, args.record_args, Path(tmp)))
            return 0
        with TritonServer(model_repository(), workdir=Path(tmp) / "triton", log_verbose=0) as server:
            print(measure(server.grpc_url, args.runs, args.record_args, Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

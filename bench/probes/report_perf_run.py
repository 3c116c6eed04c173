"""A real perf_analyzer capture for the report's screenshot: tritonserver <- triton-tap <- perf_analyzer.

    python -m bench.probes.report_perf_run --perf-analyzer /path/to/venv/bin/perf_analyzer --out DIR

Starts the CPU tritonserver from the nvidia-pytriton wheel (``proxy.lab.tritonserver``) on our
`tokens` model, the proxy (``python -m proxy``, ``--payload meta``) in front of it, and runs
perf_analyzer through the proxy once per concurrency (default 2, 4, 8: three runs),
then stops everything and writes ``DIR/report.html`` of the capture. perf_analyzer lives in its
own virtual environment (tritonclient 2.51's wheel, see /work/shared/perf-analyzer.md); give its
path. Every process started here is stopped here.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from proxy.lab.tritonserver import TritonServer, free_port, model_repository


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the proxy exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def _perf_env(perf: Path) -> dict[str, str]:
    env = dict(os.environ)
    site = next((perf.parent.parent / "lib").glob("python3*/site-packages"))
    env["LD_LIBRARY_PATH"] = f"{site}/nvidia/cuda_runtime/lib:" + env.get("LD_LIBRARY_PATH", "")
    return env


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.probes.report_perf_run", description=__doc__.split("\n\n")[0])
    p.add_argument("--perf-analyzer", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--concurrency", default="2,4,8")
    p.add_argument("--tokens", type=int, default=20, help="MAX_TOKENS per request")
    p.add_argument("--delay-ms", type=int, default=2, help="DELAY_MS between a request's responses")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    captures = a.out / "captures"
    captures.mkdir(exist_ok=True)
    data = a.out / "input.json"
    data.write_text(json.dumps({"data": [{"PROMPT": ["hi"], "MAX_TOKENS": [a.tokens], "DELAY_MS": [a.delay_ms]}]}))
    with TritonServer(model_repository(), a.out / "triton") as triton:
        port = free_port()
        proxy = subprocess.Popen([sys.executable, "-m", "proxy", "--listen", f"127.0.0.1:{port}", "--upstream",
                                  triton.grpc_url, "--capture-dir", str(captures), "--payload", "meta"])  # fmt: skip
        try:
            _wait_port(port, proxy)
            for c in a.concurrency.split(","):
                cmd = [str(a.perf_analyzer), "-m", "tokens", "-i", "grpc", "-u", f"127.0.0.1:{port}", "--streaming",
                       "--input-data", str(data), "--concurrency-range", c, "--measurement-interval", "3000"]  # fmt: skip
                print("$", " ".join(cmd), file=sys.stderr)
                # On a busy machine perf_analyzer may give up on a stable measurement (exit 2): the
                # traffic it sent is still real traffic, which is all the report needs.
                rc = subprocess.run(cmd, check=False, env=_perf_env(a.perf_analyzer), timeout=600).returncode
                if rc != 0:
                    print(f"perf_analyzer exited with {rc} (concurrency {c}); its traffic is in the capture", file=sys.stderr)
        finally:
            proxy.send_signal(signal.SIGTERM)
            try:
                proxy.wait(30)
            except subprocess.TimeoutExpired:
                proxy.kill()
                proxy.wait(10)
    report = a.out / "report.html"
    subprocess.run([sys.executable, "-m", "replay", "report", str(captures), "-o", str(report),
                    "--title", "perf_analyzer, tokens model, concurrency " + a.concurrency], check=True)  # fmt: skip
    print(f"report: {report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Memory of ``serve``, ``diff`` and ``report`` on synthetic captures of N records.

``python -m bench.probes.serve_index [--records 1000000,2000000] [--compress none,zstd] [--tool serve,diff,report]
[--dir DIR]`` generates each capture with :mod:`bench.captures` (its ``steady`` shape) (in ``DIR`` when given and kept there
for the next run, else in a temporary directory deleted afterwards) and runs the tool on it as a child
process:

* ``serve``: ``python -m replay serve CAPTURE --listen 127.0.0.1:0``; once it logs that it is serving,
  its resident memory (VmRSS), peak (VmHWM) and CPU time so far (the load), then SIGTERM.
* ``diff``: ``python -m replay diff --json CAPTURE CAPTURE`` (the capture against itself: both sides
  N records); peak RSS and CPU time of that child alone (``wait4``).
* ``report``: ``python -m replay report CAPTURE -o OUT.html``; peak RSS and CPU time.

CPU seconds are the figure to compare (the machine is shared; wall time is printed too).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.captures import write

#: How long a tool may take before the benchmark gives up on it.
TIMEOUT_S = 3600.0


def _status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM of a live process, in KiB."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0])
    return out


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve(path: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "replay", "serve", str(path), "--listen", "127.0.0.1:0", "--timing", "fast"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ready = threading.Event()
    lines: list[str] = []

    def watch() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if " serving " in line:
                ready.set()
        ready.set()  # the child ended (or closed stderr): wake the waiter either way

    reader = threading.Thread(target=watch, name="serve-stderr", daemon=True)
    reader.start()
    try:
        if not ready.wait(TIMEOUT_S) or proc.poll() is not None:
            raise RuntimeError("serve did not start: " + "".join(lines[-5:]).strip())
        wall = time.perf_counter() - t0
        mem, cpu = _status(proc.pid), _cpu_s(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(10)
    return {"rss_mb": mem["VmRSS"] / 1024, "peak_mb": mem["VmHWM"] / 1024, "cpu_s": cpu, "wall_s": wall}


def _child(cmd: list[str]) -> dict[str, float]:
    """Run ``cmd``; its own peak RSS and CPU time (``wait4``: not the max over earlier children)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd[2:4])} failed: {err.decode(errors='replace').strip()[-500:]}")
    peak = usage.ru_maxrss / 1024
    return {"rss_mb": peak, "peak_mb": peak, "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall}


def measure(tool: str, path: Path, scratch: Path) -> dict[str, float]:
    """One tool on one capture."""
    if tool == "serve":
        return _serve(path)
    if tool == "diff":
        return _child([sys.executable, "-m", "replay", "diff", "--json", str(path), str(path)])
    if tool == "report":
        return _child([sys.executable, "-m", "replay", "report", str(path), "-o", str(scratch / "report.html")])
    raise ValueError(f"unknown tool {tool!r}")


@contextmanager
def _workdir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="triton-tap-bench-serve-") as d:
        yield Path(d)


def _capture(root: Path, n: int, compress: str) -> Path:
    """The capture of ``n`` records in ``root`` (generated once, reused when ``root`` is kept)."""
    out = root / f"{n}-{compress}"
    found = sorted(out.glob("capture-*")) if out.is_dir() else []
    return found[0] if found else write(out, n, compress)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.probes.serve_index", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", default="1000000,2000000", help="comma-separated capture sizes")
    p.add_argument("--compress", default="none,zstd", help="comma-separated --compress modes")
    p.add_argument("--tool", default="serve,diff,report", help="comma-separated: serve, diff, report")
    p.add_argument("--dir", type=Path, default=None, help="keep the generated captures here (reused next run)")
    args = p.parse_args(argv)
    print("| tool | records | compress | RSS | peak RSS | CPU s | wall s |")
    print("|---|---|---|---|---|---|---|")
    with _workdir(args.dir) as root:
        for n in (int(x) for x in args.records.split(",")):
            for compress in args.compress.split(","):
                path = _capture(root, n, compress)
                for tool in args.tool.split(","):
                    m = measure(tool, path, root)
                    print(f"| {tool} | {n:,} | {compress} | {m['rss_mb']:.0f} MB | {m['peak_mb']:.0f} MB | "
                          f"{m['cpu_s']:.1f} | {m['wall_s']:.1f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

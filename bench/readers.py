"""Reader benchmark: ``replay check --json`` records/s and peak RSS on synthetic captures of N records.

``python -m bench.readers [--records 1000000,10000000] [--compress none,zstd]`` generates each
capture with :mod:`bench.gencapture` in a temporary directory (deleted afterwards: 10M records are
~1.5 GB plain), runs ``python -m replay check --json`` on it as a child process and prints records/s
(wall and CPU, the child's user + system time, interpreter start-up included) and that child's own
peak RSS (``wait4``), plus bytes per record raw (uncompressed JSONL) and on disk.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.gencapture import write


def _raw_bytes(path: Path) -> int:
    """Uncompressed size of a capture file."""
    if not path.name.endswith(".zst"):
        return path.stat().st_size
    import zstandard

    total = 0
    with open(path, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True) as z:
        while chunk := z.read(1 << 22):
            total += len(chunk)
    return total


def measure(n: int, compress: str) -> dict[str, float]:
    """Generate, check, measure one capture."""
    with tempfile.TemporaryDirectory(prefix="triton-tap-bench-readers-") as d:
        path = write(Path(d), n, compress)
        stored, raw = path.stat().st_size, _raw_bytes(path)
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "replay", "check", "--json", str(path)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        stderr = proc.stderr.read() if proc.stderr is not None else b""
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU and peak RSS
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"replay check failed: {stderr.decode(errors='replace').strip()}")
        cpu = usage.ru_utime + usage.ru_stime
        return {"records": n, "wall_rps": n / wall, "cpu_rps": n / cpu, "rss_mb": usage.ru_maxrss / 1024,
                "raw_bytes_per_record": raw / n, "stored_bytes_per_record": stored / n}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.readers", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", default="1000000,10000000", help="comma-separated capture sizes")
    p.add_argument("--compress", default="none,zstd", help="comma-separated --compress modes")
    args = p.parse_args(argv)
    print(f"load (1/5/15 min): {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print("| records | compress | records/s (wall) | records/s (CPU) | peak RSS | bytes/record raw | bytes/record on disk |")
    print("|---|---|---|---|---|---|---|")
    for n in (int(x) for x in args.records.split(",")):
        for compress in args.compress.split(","):
            m = measure(n, compress)
            print(f"| {n:,} | {compress} | {m['wall_rps']:,.0f} | {m['cpu_rps']:,.0f} | {m['rss_mb']:.0f} MB | "
                  f"{m['raw_bytes_per_record']:.1f} | {m['stored_bytes_per_record']:.1f} |", flush=True)  # fmt: skip
    print(f"load (1/5/15 min): {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

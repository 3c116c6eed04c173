"""Reader benchmark: ``replay check --json`` records/s and peak RSS on synthetic captures of N records.

``python -m bench.readers [--records 1000000,10000000] [--compress none,zstd]`` generates each
capture with :mod:`bench.gencapture` in a temporary directory (deleted afterwards: 10M records are
~1.5 GB plain), runs ``python -m replay check --json`` on it as a child process and prints records/s
(wall and CPU) and the child's peak RSS, plus bytes per record raw and on disk.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.gencapture import write


def measure(n: int, compress: str) -> dict[str, float]:
    """Generate, check, measure one capture."""
    with tempfile.TemporaryDirectory(prefix="triton-tap-bench-readers-") as d:
        path = write(Path(d), n, compress)
        stored = path.stat().st_size
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "replay", "check", "--json", str(path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"replay check failed: {proc.stderr.strip()}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return {"records": n, "wall_rps": n / wall, "cpu_rps": n / cpu, "rss_mb": after.ru_maxrss / 1024,
                "stored_bytes_per_record": stored / n}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.readers", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", default="1000000,10000000", help="comma-separated capture sizes")
    p.add_argument("--compress", default="none,zstd", help="comma-separated --compress modes")
    args = p.parse_args(argv)
    print("| records | compress | records/s (wall) | records/s (CPU) | peak RSS (max so far) | bytes/record on disk |")
    print("|---|---|---|---|---|---|")
    for n in (int(x) for x in args.records.split(",")):
        for compress in args.compress.split(","):
            m = measure(n, compress)
            print(f"| {n:,} | {compress} | {m['wall_rps']:,.0f} | {m['cpu_rps']:,.0f} | {m['rss_mb']:.0f} MB | "
                  f"{m['stored_bytes_per_record']:.1f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Reader benchmark: ``replay check`` records/s and peak RSS on synthetic captures of N records.

``python -m bench.probes.readers [--records 1000000,10000000] [--compress none,zstd] [--mode json,table]
[--decoder compiled,pure]``
generates each capture with :mod:`bench.captures` (its ``steady`` shape) in a temporary directory (deleted afterwards:
10M records are ~1.5 GB plain), runs ``python -m replay check`` on it as a child process once per
mode (``json``: ``--json``; ``table``: the default human table) and prints records/s (wall and CPU,
the child's user + system time, interpreter start-up included) and that child's own peak RSS
(``wait4``), plus bytes per record raw (uncompressed JSONL) and on disk. ``--decoder pure`` runs the
same check with ``TRITON_TAP_PURE=1`` (the line decoder uncompiled, replay/capture/schema.py) beside the
compiled one, interleaved, so the two compare within one run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.captures import write
from replay.compiled import PURE_ENV


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


#: ``--mode`` -> the ``replay check`` options it runs with.
MODES = {"json": ["--json"], "table": []}
#: ``--decoder`` -> the environment of the check (the compiled line decoder, or the Python path alone).
DECODERS = {"compiled": {PURE_ENV: ""}, "pure": {PURE_ENV: "1"}}


def _check(path: Path, mode: str, decoder: str = "compiled") -> tuple[float, float, float]:
    """``(wall s, CPU s, peak RSS MB)`` of one ``replay check`` child on ``path``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "replay", "check", *MODES[mode], str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, **DECODERS[decoder]})  # fmt: skip
    stderr = proc.stderr.read() if proc.stderr is not None else b""
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU and peak RSS
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"replay check failed: {stderr.decode(errors='replace').strip()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure(
    n: int, compress: str, modes: list[str], decoders: tuple[str, ...] = ("compiled",)
) -> list[dict[str, float | str]]:
    """Generate one capture, check it once per mode and decoder, measure each check."""
    rows: list[dict[str, float | str]] = []
    with tempfile.TemporaryDirectory(prefix="triton-tap-bench-readers-") as d:
        path = write(Path(d), n, compress)
        stored, raw = path.stat().st_size, _raw_bytes(path)
        for mode in modes:
            for decoder in decoders:
                wall, cpu, rss = _check(path, mode, decoder)
                rows.append({"mode": mode, "decoder": decoder, "records": n, "wall_rps": n / wall,
                             "cpu_rps": n / cpu, "rss_mb": rss, "raw_bytes_per_record": raw / n,
                             "stored_bytes_per_record": stored / n})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.probes.readers", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", default="1000000,10000000", help="comma-separated capture sizes")
    p.add_argument("--compress", default="none,zstd", help="comma-separated --compress modes")
    p.add_argument("--mode", default="json,table", help="comma-separated: json (check --json), table (the default)")
    p.add_argument("--decoder", default="compiled", help="comma-separated: compiled, pure (TRITON_TAP_PURE=1)")
    args = p.parse_args(argv)
    modes, decoders = args.mode.split(","), args.decoder.split(",")
    if unknown := [m for m in modes if m not in MODES]:
        p.error(f"--mode: unknown {', '.join(unknown)} (known: {', '.join(MODES)})")
    if unknown := [d for d in decoders if d not in DECODERS]:
        p.error(f"--decoder: unknown {', '.join(unknown)} (known: {', '.join(DECODERS)})")
    print(f"load (1/5/15 min): {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print("| records | compress | mode | decoder | records/s (wall) | records/s (CPU) | peak RSS | bytes/record raw | "
          "bytes/record on disk |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for n in (int(x) for x in args.records.split(",")):
        for compress in args.compress.split(","):
            for m in measure(n, compress, modes, tuple(decoders)):
                print(f"| {n:,} | {compress} | {m['mode']} | {m['decoder']} | {m['wall_rps']:,.0f} | {m['cpu_rps']:,.0f} | "
                      f"{m['rss_mb']:.0f} MB | {m['raw_bytes_per_record']:.1f} | {m['stored_bytes_per_record']:.1f} |",
                      flush=True)  # fmt: skip
    print(f"load (1/5/15 min): {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m bench --profile --profiler perf``: where a relay's CPU goes in the machine, the proxy beside the floor.

py-spy and cProfile see Python frames: they cannot say how much of a response's cost is the kernel's
loopback TCP, the interpreter itself, uvloop, or our compiled modules. Linux ``perf record -e cpu-clock``
samples the whole process, kernel included, on a CPU-time clock, so samples / rate is CPU time, and each
sample's shared object says which part of the process it was in. Run for the proxy and for the floor
(``bench/harness/floor.py``, a Python relay that records nothing) in the same scenario, the table says what
recording costs beyond what any relay written in Python pays, part by part, and on which thread.

Needs ``perf`` (Debian: ``apt-get install -y linux-perf``) and a kernel that lets it attach
(``kernel.perf_event_paranoid`` <= 1, or root). Software clock only: no hardware counters needed.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Samples per second of CPU time, per thread.
RATE = 2000

#: The parts of a process, in the table's order, and how a sample's shared object names them (first match).
PARTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("kernel (syscalls, loopback TCP, scheduling)", re.compile(r"^\[kernel")),
    ("interpreter (libpython)", re.compile(r"libpython")),
    ("event loop (uvloop)", re.compile(r"/uvloop/")),
    ("C library", re.compile(r"/lib(c|m|pthread)[.-]|/ld-linux|^\[vdso\]")),
    # the hand-written C modules, and the library holding the code mypyc compiled (setup.py's group)
    ("triton-tap compiled modules", re.compile(r"/(proxy|replay)/[^ ]*\.so$|/triton_tap__mypyc\.[^ /]*\.so$")),
    ("compression (zstd, zlib)", re.compile(r"/zstandard/|libz\.so")),
    ("protobuf", re.compile(r"/google/")),
    ("orjson", re.compile(r"/orjson")),
)
OTHER = "other libraries"
UNKNOWN = "no symbol ([unknown])"
LOOP, OTHER_THREADS = "loop thread", "other threads"

_LINE = re.compile(r"^\s*(\d+)\s+[0-9a-f]+\s+\((.*)\)\s*$")


def part_of(dso: str) -> str:
    """The part of the process a shared object (as ``perf script`` names it) belongs to."""
    if dso == "[unknown]":
        return UNKNOWN
    for name, pattern in PARTS:
        if pattern.search(dso):
            return name
    return OTHER


def tally(script: str, main_tid: int) -> dict[str, dict[str, int]]:
    """Samples by thread (the loop thread is the process's main thread) and part, from the lines of
    ``perf script -F tid,ip,dso`` of a recording made without call graphs (one line per sample)."""
    out: dict[str, dict[str, int]] = {LOOP: {}, OTHER_THREADS: {}}
    for line in script.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        parts = out[LOOP if int(m.group(1)) == main_tid else OTHER_THREADS]
        part = part_of(m.group(2))
        parts[part] = parts.get(part, 0) + 1
    return out


def per_response(samples: dict[str, dict[str, int]], responses: int, rate: int = RATE) -> dict[str, dict[str, float]]:
    """Samples as microseconds of CPU per response."""
    scale = 1e6 / rate / max(1, responses)
    return {thread: {part: n * scale for part, n in parts.items()} for thread, parts in samples.items()}


def perf_binary() -> str | None:
    """``perf``, if installed."""
    return shutil.which("perf")


class Recording:
    """``perf record`` attached to one process (every thread) until :meth:`stop`."""

    def __init__(self, pid: int, out: Path) -> None:
        perf = perf_binary()
        assert perf is not None
        self.pid, self.out, self.log = pid, out, out.with_suffix(".log")
        with open(self.log, "wb") as err:  # the child keeps its own copy of the descriptor
            self.p = subprocess.Popen(
                [perf, "record", "-e", "cpu-clock", "-F", str(RATE), "-p", str(pid), "-o", str(out)],
                stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip
        # perf says nothing when it has attached; the data file exists once it has (its header is
        # written at the start). A condition with a timeout, then a short grace for the first samples.
        deadline = time.monotonic() + 10
        while not out.exists() and time.monotonic() < deadline and self.p.poll() is None:
            time.sleep(0.02)
        if self.p.poll() is not None:
            raise RuntimeError(f"perf record failed: {self.log.read_text(errors='replace')[-400:]}")

    def stop(self) -> dict[str, dict[str, int]]:
        """Stop recording; the samples by thread and part."""
        self.p.send_signal(signal.SIGINT)  # perf writes its file and exits
        self.p.wait(60)
        perf = perf_binary()
        assert perf is not None
        script = subprocess.run([perf, "script", "-i", str(self.out), "-F", "tid,ip,dso"], capture_output=True,
                                text=True, check=False, timeout=300)  # fmt: skip
        return tally(script.stdout, self.pid)

    def kill(self) -> None:
        """Stop without reading (a failed run)."""
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def profile_paths(
    paths: dict[str, int], run: Callable[[str], tuple[int, float]], workdir: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    """Record each path's process (``paths``: name -> pid) while ``run(name)`` drives its load and returns
    (responses, the process's CPU seconds as the benchmark measures them)."""
    out: dict[str, Any] = {}
    for name, pid in paths.items():
        rec = Recording(pid, workdir / f"perf-{name}.data")
        try:
            responses, cpu_s = run(name)
        except BaseException:
            rec.kill()
            raise
        samples = rec.stop()
        out[name] = {"responses": responses, "cpu_us_per_resp": cpu_s / max(1, responses) * 1e6,
                     "samples": samples, "us_per_resp": per_response(samples, responses)}  # fmt: skip
        log(f"  {name}: {responses} responses, {sum(sum(p.values()) for p in samples.values())} samples")
    return out


def table(p: dict[str, Any]) -> str:
    """The parts side by side: each path's loop thread and other threads, and the proxy's excess over the floor."""
    paths: dict[str, Any] = p["paths"]
    names = list(paths)
    parts = [name for name, _ in PARTS] + [OTHER, UNKNOWN]
    head = ["part"]
    for n in names:
        head += [f"{n}: {LOOP}", f"{n}: {OTHER_THREADS}", f"{n}: all"]
    diff = len(names) == 2
    if diff:
        head.append(f"{names[0]} - {names[1]}")
    lines = [
        f"### where the CPU goes (perf cpu-clock at {RATE}/s, {p['scenario']}, --payload {p['payload']}; "
        "us of CPU per response)",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]

    def row(label: str, value: Callable[[dict[str, Any], str], float]) -> str:
        cells = [label]
        alls = []
        for n in names:
            d = paths[n]
            loop, other = value(d, LOOP), value(d, OTHER_THREADS)
            cells += [f"{loop:.1f}", f"{other:.1f}", f"{loop + other:.1f}"]
            alls.append(loop + other)
        if diff:
            cells.append(f"{alls[0] - alls[1]:+.1f}")
        return "| " + " | ".join(cells) + " |"

    def of_part(part: str) -> Callable[[dict[str, Any], str], float]:
        return lambda d, t: float(d["us_per_resp"][t].get(part, 0.0))

    for part in parts:
        if any(part in paths[n]["us_per_resp"][t] for n in names for t in (LOOP, OTHER_THREADS)):
            lines.append(row(part, of_part(part)))
    lines.append(row("**total (perf)**", lambda d, t: float(sum(d["us_per_resp"][t].values()))))
    check = ["total as the benchmark measures it (/proc)"]
    for n in names:
        check += ["", "", f"{paths[n]['cpu_us_per_resp']:.1f}"]
    if diff:
        check.append(f"{paths[names[0]]['cpu_us_per_resp'] - paths[names[1]]['cpu_us_per_resp']:+.1f}")
    lines.append("| " + " | ".join(check) + " |")
    return "\n".join(lines)

"""``--profiler perf``'s pure parts (bench/probes/nativeprof.py): which part of a process a sample was in, the
tally by thread, the scaling to microseconds per response and the table; and its one-line refusal
without ``perf``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.probes import nativeprof as np
from tests.support.paths import ROOT

# Shared objects as `perf script -F tid,ip,dso` names them on this machine kind (a proxy under unary load).
VENV = "/work/main/.venv/lib/python3.11/site-packages"
SEEN = {
    "[kernel.kallsyms]": "kernel (syscalls, loopback TCP, scheduling)",
    "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0": "interpreter (libpython)",
    f"{VENV}/uvloop/loop.cpython-311-x86_64-linux-gnu.so": "event loop (uvloop)",
    "/usr/lib/x86_64-linux-gnu/libc.so.6": "C library",
    "/usr/lib/x86_64-linux-gnu/libm.so.6": "C library",
    "[vdso]": "C library",
    "/work/main/triton_tap__mypyc.cpython-311-x86_64-linux-gnu.so": "triton-tap compiled modules",
    "/work/main/replay/_frozen.cpython-311-x86_64-linux-gnu.so": "triton-tap compiled modules",
    f"{VENV}/replay/_frozen.cpython-311-x86_64-linux-gnu.so": "triton-tap compiled modules",  # a non-editable install
    f"{VENV}/triton_tap__mypyc.cpython-311-x86_64-linux-gnu.so": "triton-tap compiled modules",
    f"{VENV}/zstandard/backend_c.cpython-311-x86_64-linux-gnu.so": "compression (zstd, zlib)",
    "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13": "compression (zstd, zlib)",
    f"{VENV}/google/_upb/_message.abi3.so": "protobuf",
    f"{VENV}/orjson/orjson.cpython-311-x86_64-linux-gnu.so": "orjson",
    "/root/.pyenv/versions/3.11.7/lib/python3.11/lib-dynload/_asyncio.cpython-311-x86_64-linux-gnu.so": np.OTHER,
    "[unknown]": np.UNKNOWN,
}


@pytest.mark.parametrize(("dso", "part"), SEEN.items())
def test_each_shared_object_lands_in_its_part(dso: str, part: str) -> None:
    assert np.part_of(dso) == part


def test_every_part_is_named_once() -> None:
    names = [name for name, _ in np.PARTS] + [np.OTHER, np.UNKNOWN]
    assert len(names) == len(set(names))


def test_tally_splits_the_loop_thread_from_the_others() -> None:
    """The loop thread is the process's main thread (tid == pid); anything else (the writer) is "other"."""
    script = "\n".join(
        [
            "  4242  2169a2 (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)",
            "  4242  ffffffff81000000 ([kernel.kallsyms])",
            "  4242  2169a2 (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)",
            f"  4250  7f00 ({VENV}/zstandard/backend_c.cpython-311-x86_64-linux-gnu.so)",
            "  4250  7f01 ([unknown])",
            "",
            "not a sample line",  # perf's own warnings are skipped
        ]
    )
    assert np.tally(script, 4242) == {
        np.LOOP: {"interpreter (libpython)": 2, "kernel (syscalls, loopback TCP, scheduling)": 1},
        np.OTHER_THREADS: {"compression (zstd, zlib)": 1, np.UNKNOWN: 1},
    }


def test_samples_become_microseconds_per_response() -> None:
    # 2000 samples at 2000/s are one CPU second; over 1000 responses, 1000 us each.
    got = np.per_response({np.LOOP: {"k": 2000}, np.OTHER_THREADS: {"z": 20}}, 1000, rate=2000)
    assert got == {np.LOOP: {"k": 1000.0}, np.OTHER_THREADS: {"z": 10.0}}


def _path(loop: dict[str, float], other: dict[str, float], cpu: float) -> dict[str, object]:
    return {"responses": 100, "cpu_us_per_resp": cpu, "us_per_resp": {np.LOOP: loop, np.OTHER_THREADS: other}}


def test_table_puts_the_proxy_beside_the_floor_with_the_difference() -> None:
    kernel, interp = "kernel (syscalls, loopback TCP, scheduling)", "interpreter (libpython)"
    p = {
        "scenario": "unary",
        "payload": "meta",
        "paths": {
            "proxy-meta": _path({kernel: 70.0, interp: 140.0}, {interp: 20.0}, 240.0),
            "floor": _path({kernel: 60.0, interp: 10.0}, {}, 75.0),
        },
    }
    text = np.table(p)
    assert "unary, --payload meta" in text
    assert f"| {interp} | 140.0 | 20.0 | 160.0 | 10.0 | 0.0 | 10.0 | +150.0 |" in text
    assert f"| {kernel} | 70.0 | 0.0 | 70.0 | 60.0 | 0.0 | 60.0 | +10.0 |" in text
    assert "| **total (perf)** | 210.0 | 20.0 | 230.0 | 70.0 | 0.0 | 70.0 | +160.0 |" in text
    assert "| total as the benchmark measures it (/proc) |  |  | 240.0 |  |  | 75.0 | +165.0 |" in text
    # Parts no path had are left out.
    assert "orjson" not in text


def test_table_of_one_path_has_no_difference_column() -> None:
    p = {"scenario": "streaming", "payload": "full", "paths": {"floor": _path({"C library": 1.0}, {}, 1.0)}}
    assert " - " not in np.table(p).splitlines()[1]


def test_profiler_perf_without_perf_says_so_in_one_line() -> None:
    """No ``perf`` on PATH: exit 2 and one line naming the package, before anything is started."""
    env = {**os.environ, "PATH": "/nonexistent"}
    out = subprocess.run([sys.executable, "-m", "bench", "--profile", "--profiler", "perf", "--scenarios", "unary"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "python -m bench: --profiler perf needs Linux perf (apt-get install -y linux-perf)"
    ]

"""The benchmark's perf_analyzer probe (bench/probes/perfa.py) against the real CPU tritonserver: each
relay's CPU per response, split into user and system time, and what perf stat counts in its processes.

One short interleaved round (direct, the proxy, the Python floor) through the session's tritonserver,
as ``python -m bench --scenarios perf_analyzer`` runs it; skipped without perf_analyzer (docs/testing.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.harness.config import MODULE_PATHS
from bench.probes import perfa
from proxy.lab.tritonserver import TritonServer


def test_each_relays_cpu_is_split_and_its_kernel_work_counted(triton: TritonServer, tmp_path: Path) -> None:
    pa = perfa.find_perf_analyzer()
    if pa is None:
        pytest.skip(f"perf_analyzer not found ({perfa.PA_WHERE}): docs/testing.md says how to install it")
    bench = perfa.PaBench(pa, perfa.PaConfig(rounds=1, measurement_ms=1000), tmp_path, lambda _: None)
    bench.use_triton(triton)
    try:
        bench.add_proxy("proxy")
        bench.add_proxy("floor", module=MODULE_PATHS["floor"])
        raw = bench.interleaved("perf_analyzer", ["direct", "proxy", "floor"], 2, None)
    finally:
        bench.stop()
    assert triton.pid is not None and not bench.errors, bench.errors  # the session's server is left running
    s = perfa.summarise(raw)
    assert s["direct"]["user_us_per_resp"] is None and s["direct"]["syscalls_per_resp"] is None
    for path in ("proxy", "floor"):
        v = s[path]
        assert v["user_us_per_resp"] > 0 and v["sys_us_per_resp"] > 0, v
        # One reading of /proc for both: the total is the split's sum.
        assert v["user_us_per_resp"] + v["sys_us_per_resp"] == pytest.approx(v["proxy_cpu_us_per_resp"])
        if perfa.perf_counts():
            # Each response is read and written by the relay (several may share a read): an idle process, or
            # perf attached to another one, makes a few hundredths of a call per response.
            assert v["syscalls_per_resp"] >= 0.2 and v["switches_per_resp"] > 0 and v["futex_per_resp"] >= 0, v
        else:
            assert v["syscalls_per_resp"] is None, v

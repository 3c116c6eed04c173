"""The overview aggregates (replay/tools/report/overview.py), the packed ticks and the vendored uPlot."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.captures import runs_records as perf_like_records
from replay.tools.report import overview
from replay.tools.report.model import ReportBuilder, percentile
from replay.tools.report.page import pack_ticks, render_html, vendored
from tests.support.paths import ROOT

VENDOR = ROOT / "replay" / "tools" / "report" / "vendor"
MANIFEST = json.loads((VENDOR / "uplot.json").read_text())


def model_of_records(n: int, **kw: Any) -> dict[str, Any]:
    b = ReportBuilder()
    for seq, rec in enumerate(perf_like_records(n, **kw)):
        b.feed(seq, rec)
    return b.finish()


def test_bin_width_is_1_2_5_and_keeps_under_the_cap() -> None:
    """Adaptive bins: 1 s over 400 bins -> 5 ms; tiny spans -> 1 µs; never more than MAX_BINS."""
    assert overview.bin_width_us(1_000_000, 400) == 5_000
    assert overview.bin_width_us(3, 400) == 1
    for span in (1, 999, 123_456, 10**9, 7 * 10**10):
        w = overview.bin_width_us(span)
        assert -(-span // w) <= overview.MAX_BINS
        assert str(w).lstrip("125").strip("0") == ""


def sketch_quantile(values: list[float], q: float) -> float:
    """A quantile read back from the sketch the way the page reads it."""
    k = overview.buckets(np.asarray(values, dtype=np.float64))
    counts = np.bincount(k)
    need = max(1, int(np.ceil(q * len(values))))
    b = int(np.searchsorted(np.cumsum(counts), need))
    e, po = overview.EXACT, overview.PER_OCTAVE
    return float(b if b < e else e * 2 ** ((b - e + 0.5) / po))


def test_sketch_quantiles_are_within_a_few_percent() -> None:
    """Log buckets of 16 per octave: p50/p99 of a wide distribution within 2.5% of the exact ones."""
    rng = np.random.default_rng(1)
    values = list(rng.lognormal(8, 1.5, 20_000))
    for q in (50, 99):
        exact = percentile(values, q)
        assert exact is not None
        assert abs(sketch_quantile(values, q / 100) - exact) / exact < 0.025
    assert list(overview.buckets(np.array([0.0, 5.0, 31.9, -3.0]))) == [0, 5, 31, 0]


def test_series_count_every_request_response_and_cancel_once() -> None:
    """Per-group series add up to the model's requests, ticks, finals, errors and cancels."""
    m = model_of_records(8_000, runs=2, concurrency=2)
    ov, lanes, ticks = m["overview"], m["lanes"], m["ticks"]
    assert sum(ov["started"]) == sum(1 for r in lanes["rid"] if r is not None)
    assert sum(ov["responses"]) == len(ticks["t"])
    assert sum(ov["finals"]) == sum(1 for f in ticks["flags"] if f & 2)
    assert sum(ov["errors"]) == sum(1 for f in ticks["flags"] if f & 4)
    assert sum(ov["cancels"]) == len(m["cancels"])
    groups = list(zip(ov["groups"]["model"], ov["groups"]["method"], ov["groups"]["outcome"], strict=True))
    assert ("tokens", "ModelStreamInfer", "completed") in groups and ("echo", "ModelInfer", "completed") in groups
    ttfr = ov["sketch"]["ttfr_us"]
    assert sum(ttfr[3::4]) == sum(1 for v in lanes["ttfr_ms"] if v is not None)
    gaps = sum(max(0, n - 1) for n in np.bincount(ticks["lane"]))
    assert sum(ov["sketch"]["gap_us"][3::4]) == gaps


def test_in_flight_is_the_time_weighted_mean_per_bin() -> None:
    """One request over bins 0..1.5 and one over 1..2: means 1, 1.5 (bin 1: 1 + 0.5)... exactly."""
    g = np.array([0, 0], dtype=np.int64)
    start, end = np.array([0, 100], dtype=np.int64), np.array([150, 200], dtype=np.int64)
    assert overview._in_flight(g, start, end, 1, 2, 100) == [1.0, 1.5]


def test_a_call_level_ending_names_only_the_lanes_in_flight() -> None:
    """The generator's client_disconnects come after every request completed: they cut no lane."""
    m = model_of_records(8_000, runs=2, concurrency=2)
    disconnects = [c for c in m["cancels"] if c["cause"] == "client_disconnect"]
    assert len(disconnects) == 4 and all(c["lanes"] == [] for c in disconnects)


def test_packed_ticks_round_trip() -> None:
    """Per-lane counts + first tick + int32 deltas give back every tick's lane and time."""
    ticks = {"lane": [0, 0, 2, 2, 2], "t": [10, 15, 7, 9, 4_000_000_000], "flags": [1, 3, 0, 4, 2], "ri": [1, 2, 3, 4, 5]}
    p = pack_ticks(ticks, 4, with_ri=True)

    def arr(key: str, dtype: str) -> list[int]:
        out: list[int] = np.frombuffer(base64.b64decode(p[key]), dtype=dtype).tolist()
        return out

    counts, base, dt = arr("counts", "<i4"), arr("base", "<f8"), arr("dt", "<i4")
    assert counts == [2, 0, 3, 0]
    lanes = [i for i, n in enumerate(counts) for _ in range(n)]
    assert lanes == ticks["lane"]
    assert [int(base[ln] + d) for ln, d in zip(lanes, dt, strict=True)][:4] == ticks["t"][:4]
    assert dt[-1] == 2**31 - 1  # more than ~35 min after the lane's first tick: clamped
    assert arr("flags", "u1") == ticks["flags"] and arr("ri", "<i4") == ticks["ri"]
    assert pack_ticks(ticks, 4, with_ri=False)["ri"] is None


def test_vendored_uplot_is_the_manifests_and_is_inlined_verbatim() -> None:
    """Each vendored file has the hash its manifest records; the page carries JS and CSS unchanged."""
    for name, meta in MANIFEST["files"].items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == meta["sha256"], name
        assert vendored(name) == (VENDOR / name).read_text(encoding="utf-8")
    js = vendored("uPlot.iife.min.js")
    assert js.startswith(f"/*! https://github.com/leeoniya/uPlot (v{MANIFEST['version']}) */")
    assert "</script" not in js.lower() and "<!--" not in js  # safe inside a <script> element
    page = render_html(model_of_records(300, runs=1, concurrency=1)).decode()
    assert js in page and vendored("uPlot.min.css") in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page.replace(
        "https://github.com/leeoniya/uPlot", ""
    )  # nothing fetched from the network


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_vendored_uplot_equals_the_npm_package(tmp_path: Path) -> None:
    """The package from npm's cache (offline: skipped when not cached) has the manifest's integrity, and
    the vendored files equal its files byte for byte."""
    spec = f"{MANIFEST['package']}@{MANIFEST['version']}"
    proc = subprocess.run(["npm", "pack", spec, "--offline", "--silent", "--pack-destination", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"{spec} is not in npm's cache (npm pack {spec} once to fill it)")
    (tgz,) = tmp_path.glob("*.tgz")
    algo, digest = MANIFEST["integrity"].split("-", 1)
    assert base64.b64encode(hashlib.new(algo, tgz.read_bytes()).digest()).decode() == digest
    with tarfile.open(tgz) as tar:
        for name, meta in MANIFEST["files"].items():
            member = tar.extractfile(meta["from"])
            assert member is not None
            assert member.read() == (VENDOR / name).read_bytes(), name

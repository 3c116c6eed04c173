"""The report model is exactly what the builder made before its speed-up (issue 19): stored JSON.

Every golden capture and a seeded ~18k-record synthetic perf_analyzer-like capture; a lost or
moved tick, a lane in another order or a percentile computed differently changes the JSON.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from replay.tools.report.stats import group_percentiles, percentile, r3
from tests.replay.tools import report_golden as g


def _diff(path: str, want: Any, got: Any) -> list[str]:
    """Where ``got`` differs from ``want`` (first few paths), for a readable failure."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{path}.{k}: missing or extra" for k in sorted(set(want) ^ set(got))]
        for k in sorted(set(want) & set(got)):
            out += _diff(f"{path}.{k}", want[k], got[k])
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        out = []
        for i, (a, b) in enumerate(zip(want, got, strict=True)):
            out += _diff(f"{path}[{i}]", a, b)
            if len(out) > 5:
                break
        return out
    return [] if want == got and type(want) is type(got) else [f"{path}: {str(want)[:80]} != {str(got)[:80]}"]


@pytest.fixture(scope="module")
def stored() -> dict[str, Any]:
    return g.stored()


@pytest.mark.parametrize("name", g.golden_names())
def test_golden_capture_model_is_unchanged(stored: dict[str, Any], name: str) -> None:
    """The model of each golden capture equals the stored one, key by key."""
    assert name in stored, "a new golden capture: regenerate with python -m tests.replay.tools.report_golden"
    assert _diff(name, stored[name], g.golden_model(name)) == []


def test_synthetic_capture_model_is_unchanged(stored: dict[str, Any]) -> None:
    """~18k records, ~9k response ticks, per-lane and per-model percentiles, a deadline cut: unchanged."""
    want = stored["synthetic"]
    assert len(want["ticks"]["t"]) > 5000 and any(c["cause"] == "deadline" for c in want["cancels"])
    assert sum(p is not None for p in want["lanes"]["inter_p99_ms"]) > 100
    assert _diff("synthetic", want, g.synthetic_model()) == []


def test_the_comparison_sees_a_changed_percentile_and_a_lost_tick(stored: dict[str, Any]) -> None:
    """The check itself can fail: one percentile off by a microsecond, one tick gone."""
    got = g.synthetic_model()
    lane = next(i for i, p in enumerate(got["lanes"]["inter_p50_ms"]) if p is not None)
    got["lanes"]["inter_p50_ms"][lane] += 0.001
    assert _diff("synthetic", stored["synthetic"], got) != []
    got = g.synthetic_model()
    for col in got["ticks"].values():
        col.pop()
    assert _diff("synthetic", stored["synthetic"], got) != []


@pytest.mark.parametrize("spread", [1_000, 2**61], ids=["one-key-sort", "lexsort-fallback"])
def test_group_percentiles_equal_the_nearest_rank_percentile_of_each_group(spread: int) -> None:
    """Both sorting paths give, per group, exactly ``r3(percentile([v / 1e3 ...], q))`` (negatives too)."""
    rng = np.random.default_rng(19)
    n_groups = 40
    group = rng.integers(0, n_groups - 3, 3000)  # the last groups stay empty: None
    values = rng.integers(-spread // 10, spread, 3000)
    got = group_percentiles(group, values, n_groups, (50, 99, 0.1))
    for q, col in zip((50, 99, 0.1), got, strict=True):
        want = [r3(percentile([int(v) / 1e3 for v in values[group == g]], q)) for g in range(n_groups)]
        assert col == want

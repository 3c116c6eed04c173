"""The report's statistics: nearest-rank percentiles, per group at once in numpy, and the per-model rows.

Split from :mod:`replay.tools.report.model` (which lays out lanes and ticks); pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from replay.machine.outcomes import RequestOutcome

IntArray = npt.NDArray[np.int64]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``, or None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def r3(value: float | None) -> float | None:
    """``value`` rounded to 3 decimals (ms to the µs); None stays None."""
    return None if value is None else round(value, 3)


def group_percentiles(group: IntArray, values: IntArray, n_groups: int,
                       qs: Sequence[float]) -> list[list[float | None]]:  # fmt: skip
    """Nearest-rank percentiles of ``values`` (µs) per group, in ms rounded like :func:`r3`.

    The same numbers as :func:`percentile` over each group's ``value / 1e3`` list (int µs to float
    and one division are exact the same way in numpy), for every group at once: one sort by
    (group, value) instead of a Python ``sorted`` per lane.
    """
    counts = np.bincount(group, minlength=n_groups)
    lo = int(np.min(values)) if len(values) else 0
    width = int(np.max(values)) - lo + 1 if len(values) else 1
    if n_groups * width < 2**62:
        # One int64 key per value, sorted in place of a two-key lexsort (several times faster at 1M).
        keys = np.sort(group * width + (values - lo))
        ordered = keys - (keys // width) * width + lo
    else:
        ordered = values[np.lexsort((values, group))]
    first = np.cumsum(counts) - counts
    has = counts > 0
    out: list[list[float | None]] = []
    for q in qs:
        col: list[float | None] = [None] * n_groups
        rank = np.maximum(1, np.ceil(q / 100 * counts[has])).astype(np.int64)
        picked = (ordered[first[has] + rank - 1] / 1e3).tolist()
        for g, v in zip(np.flatnonzero(has).tolist(), picked, strict=True):
            col[g] = round(v, 3)
        out.append(col)
    return out


class ModelStats:
    """Per-model counts and latency samples, summarised as one row per model."""

    def __init__(self) -> None:
        self._samples: dict[str, dict[str, list[float]]] = {}
        self._counts: dict[str, dict[str, Any]] = {}
        self._inter: dict[str, tuple[float | None, float | None]] = {}

    def add(self, r: RequestOutcome) -> None:
        """One request's outcome."""
        model = r.model or "(none)"
        agg = self._samples.setdefault(model, {"ttfr": [], "duration": []})
        if r.first_response_ms is not None:
            agg["ttfr"].append(r.first_response_ms)
        if r.duration_ms is not None:
            agg["duration"].append(r.duration_ms)
        mc = self._counts.setdefault(model, {"requests": 0, "responses": 0, "text": 0, "outcomes": {}, "violations": 0})
        mc["requests"] += 1
        mc["responses"] += r.responses
        mc["text"] += r.text_responses
        g = r.group
        if g is not None and r.seq == g.first_seq:
            # An id group's responses, which no one request of it can be given: once, on its first
            # request's model (a group is one id on one call; its requests' models are most often one).
            mc["responses"] += g.responses
            mc["text"] += g.text_responses
        mc["outcomes"][r.outcome] = mc["outcomes"].get(r.outcome, 0) + 1
        mc["violations"] += len(r.violations)

    def set_inter(self, model: str, p50: float | None, p99: float | None) -> None:
        """p50/p99 (ms) of the inter-response gaps of every request of ``model`` (computed in :func:`_gaps`)."""
        self._inter[model] = (p50, p99)

    def rows(self) -> list[dict[str, Any]]:
        """One row per model, by name: counts and p50/p99 of time to first response, gaps, durations."""
        rows = []
        for name in sorted(self._counts):
            agg = self._samples[name]
            row: dict[str, Any] = {"model": name, **self._counts[name]}
            for what in ("ttfr", "inter", "duration"):
                if what == "inter":
                    row["inter_p50_ms"], row["inter_p99_ms"] = self._inter.get(name, (None, None))
                    continue
                row[f"{what}_p50_ms"] = r3(percentile(agg[what], 50))
                row[f"{what}_p99_ms"] = r3(percentile(agg[what], 99))
            rows.append(row)
        return rows



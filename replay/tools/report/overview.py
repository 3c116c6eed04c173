"""The report's overview: time-series in adaptive bins and latency sketches, computed here, not in the page.

Why in Python: at 1M records the page cannot afford to carry every record and aggregate it in
JavaScript on load; it gets per-bin counts and mergeable sketches instead (a few hundred kB), and
only merges the sketches of the groups a filter selects.

Groups: every request lane belongs to one group (model, method, outcome); counts and sketches are
kept per group and bin, so the page can filter by any combination of the three and still get exact
counts and percentiles of exactly the selected requests. Cancels are call-level: their groups are
(model, method, cause), the model being that of the call's requests.

Sketch: a value ``v`` (µs, or a response count) falls in bucket ``int(v)`` below :data:`EXACT`,
else in ``EXACT + floor(PER_OCTAVE * log2(v / EXACT))`` (16 per octave: a bucket is 4.4% wide, so
a percentile read from it is within ~2.2% of the exact one). Sketches of different groups and bins
merge by adding counts. Each sketch is shipped as flat ``[group, bin, bucket, count, ...]``
quadruples of its non-zero cells.

Bins: the span is cut into at most :data:`MAX_BINS` bins of a 1-2-5 width in µs; every series is a
flat ``group * nbins + bin`` list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

# A response tick's flags (bits; the page has the same numbers).
TEXT = 1  # the response carries outputs (text), else it is empty
FINAL = 2  # raw triton_final_response = true
ERROR = 4  # in-band error_message
UNATTRIBUTED = 8  # the tracker could not give it to a request
#: Bytes of an event no client got as one (the connection's end cut it, or no blank line ended it): drawn where
#: they came, counted as no response.
CUT = 16

MAX_BINS = 240
EXACT = 32
PER_OCTAVE = 16

IntArray = npt.NDArray[np.int64]


def bin_width_us(span_us: int, max_bins: int = MAX_BINS) -> int:
    """The smallest 1-2-5 width (µs) that cuts ``span_us`` into at most ``max_bins`` bins."""
    need = max(1, -(-max(span_us, 1) // max_bins))
    step = 1
    while True:
        for m in (1, 2, 5):
            if step * m >= need:
                return step * m
        step *= 10


def buckets(values: npt.NDArray[np.float64]) -> IntArray:
    """Sketch bucket of each value (see the module docstring); negative values count as 0."""
    v = np.maximum(values, 0.0)
    small = v < EXACT
    out = np.empty(v.shape, dtype=np.int64)
    out[small] = v[small].astype(np.int64)
    big = ~small
    out[big] = EXACT + np.floor(PER_OCTAVE * np.log2(v[big] / EXACT)).astype(np.int64)
    return out


def _sketch(group: IntArray, bins: IntArray, values: npt.NDArray[np.float64], keep: npt.NDArray[np.bool_]) -> list[int]:
    """Non-zero ``(group, bin, bucket, count)`` cells of the values where ``keep``, flattened."""
    g, b, v = group[keep], bins[keep], values[keep]
    if not len(v):
        return []
    k = buckets(v)
    # One sortable key per cell; np.unique counts them without a dense G x B x buckets array.
    nb = int(np.max(k)) + 1
    nbins = int(np.max(b)) + 1
    key = (g * nbins + b) * nb + k
    cells, counts = np.unique(key, return_counts=True)
    out = np.empty((len(cells), 4), dtype=np.int64)
    out[:, 0] = cells // (nbins * nb)
    out[:, 1] = (cells // nb) % nbins
    out[:, 2] = cells % nb
    out[:, 3] = counts
    flat: list[int] = out.ravel().tolist()
    return flat


def _per_bin(group: IntArray, bins: IntArray, n_groups: int, nbins: int, keep: Any = None) -> list[int]:
    if keep is not None:
        group, bins = group[keep], bins[keep]
    counts: list[int] = np.bincount(group * nbins + bins, minlength=n_groups * nbins).tolist()
    return counts


def _in_flight(group: IntArray, start: IntArray, end: IntArray, n_groups: int, nbins: int, width: int) -> list[float]:
    """Mean number of requests in flight in each bin (time-weighted), per group.

    The integral of the in-flight count up to ``x`` is sum(x - s for s <= x) - sum(x - e for e <= x);
    with sorted starts and ends and their running sums that is two searchsorted per bin edge.
    """
    edges = np.arange(nbins + 1, dtype=np.int64) * width
    out = np.zeros((n_groups, nbins))
    for g in range(n_groups):
        sel = group == g
        if not sel.any():
            continue
        integral = np.zeros(nbins + 1)
        for points, sign in ((np.sort(start[sel]), 1.0), (np.sort(end[sel]), -1.0)):
            csum = np.concatenate(([0], np.cumsum(points)))
            n = np.searchsorted(points, edges, side="right")
            integral += sign * (n * edges.astype(np.float64) - csum[n])
        out[g] = np.diff(integral) / width
    flat: list[float] = np.round(out, 2).ravel().tolist()
    return flat


def _group_ids(keys: Sequence[tuple[str, str, str]]) -> tuple[IntArray, list[tuple[str, str, str]]]:
    index: dict[tuple[str, str, str], int] = {}
    ids = np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64, count=len(keys))
    return ids, list(index)


def build_overview(*, span_us: int, lanes: dict[str, list[Any]], lane_method: Sequence[str],
                   ticks: dict[str, list[int]] | dict[str, IntArray],
                   cancels: Sequence[tuple[int, str | None, str, str]]) -> dict[str, Any]:  # fmt: skip
    """The overview of a report model's lanes and ticks (``cancels``: (t µs, model, method, cause))."""
    width = bin_width_us(span_us)
    nbins = max(1, -(-max(span_us, 1) // width) + (1 if span_us % width == 0 else 0))

    def bin_of(t: IntArray) -> IntArray:
        return np.clip(t // width, 0, nbins - 1)

    n = len(lanes["call"])
    keys = [(lanes["model"][i] or "(none)", lane_method[i], lanes["outcome"][i]) for i in range(n)]
    lane_group, groups = _group_ids(keys)
    G = max(1, len(groups))
    is_req = np.fromiter((r is not None for r in lanes["rid"]), dtype=bool, count=n)
    # Lanes of id groups that got responses together (model.shared): no one request's count or gaps.
    own = is_req & np.fromiter((g is None for g in lanes["group"]), dtype=bool, count=n)
    start = np.array([s if s is not None else 0 for s in lanes["start"]], dtype=np.int64)
    end = np.array([e if e is not None else span_us for e in lanes["end"]], dtype=np.int64)
    start_bin = bin_of(start)

    def column(name: str, scale: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        vals = lanes[name]
        known = np.fromiter((v is not None for v in vals), dtype=bool, count=n) & is_req
        arr = np.fromiter((v if v is not None else 0.0 for v in vals), dtype=np.float64, count=n) * scale
        return arr, known

    ttfr, has_ttfr = column("ttfr_ms", 1000.0)
    duration, has_duration = column("duration_ms", 1000.0)
    nresp, _ = column("responses", 1.0)

    # Ticks of bytes no client got as a response (a cut event) are drawn, but are no response here.
    t_flags = np.asarray(ticks["flags"], dtype=np.int64)
    whole = (t_flags & CUT) == 0
    t_flags = t_flags[whole]
    t_lane = np.asarray(ticks["lane"], dtype=np.int64)[whole]
    t_t = np.asarray(ticks["t"], dtype=np.int64)[whole]
    t_group = lane_group[t_lane] if len(t_lane) else np.zeros(0, dtype=np.int64)
    t_bin = bin_of(t_t)
    # Inter-response gaps: ticks are grouped by lane in time order, so a gap is a difference of
    # neighbours on the same lane, counted in the bin of the later response.
    same = (t_lane[1:] == t_lane[:-1]) & own[t_lane[1:]] if len(t_lane) else np.zeros(0, dtype=bool)
    gap_vals = (t_t[1:] - t_t[:-1]).astype(np.float64)

    c_keys = [(m or "(none)", meth, cause) for _, m, meth, cause in cancels]
    c_group, c_groups = _group_ids(c_keys)
    c_bin = bin_of(np.array([t for t, _, _, _ in cancels], dtype=np.int64))
    return {
        "bin_us": width,
        "nbins": nbins,
        "groups": {"model": [g[0] for g in groups], "method": [g[1] for g in groups], "outcome": [g[2] for g in groups]},
        "started": _per_bin(lane_group, start_bin, G, nbins, is_req),
        "responses": _per_bin(t_group, t_bin, G, nbins),
        "finals": _per_bin(t_group, t_bin, G, nbins, (t_flags & FINAL) != 0),
        "errors": _per_bin(t_group, t_bin, G, nbins, (t_flags & ERROR) != 0),
        "in_flight": _in_flight(lane_group[is_req], start[is_req], end[is_req], G, nbins, width),
        "cancel_groups": {"model": [g[0] for g in c_groups], "method": [g[1] for g in c_groups],
                          "cause": [g[2] for g in c_groups]},
        "cancels": _per_bin(c_group, c_bin, max(1, len(c_groups)), nbins),
        "sketch": {
            "exact": EXACT,
            "per_octave": PER_OCTAVE,
            "ttfr_us": _sketch(lane_group, start_bin, ttfr, has_ttfr),
            "duration_us": _sketch(lane_group, start_bin, duration, has_duration),
            "responses": _sketch(lane_group, start_bin, nresp, own),
            "gap_us": _sketch(t_group[1:], t_bin[1:], gap_vals, same),
        },
    }  # fmt: skip

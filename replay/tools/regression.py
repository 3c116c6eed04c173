"""Per-model regression view of a diff: what a "does it still behave on the new build?" check reads.

Pure, over a :class:`~replay.tools.diff.DiffResult`'s pairs and unpaired requests: per model (A's
name; ``--model-map`` pairs a renamed model with its old name), how many requests each side has,
which outcomes changed (``completed -> error`` x2), how many pairs changed their response count,
final flag or error, and the time-to-first-response and duration percentiles side by side, each
flagged when it moved by more than the :class:`Tolerance`, with its direction: ``slower`` (B's time is
longer) or ``faster``. Either is a difference between the captures (``diff`` compares, it does not
judge); they are named and counted apart so that a faster build is never reported as a slower one.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from replay.machine.outcomes import RequestOutcome

PERCENTILES: tuple[int, ...] = (50, 95, 99)
SLOWER = "slower"
FASTER = "faster"


@dataclass(frozen=True, kw_only=True, slots=True)
class Tolerance:
    """How far a time may move and still be the same: more than both ``ms`` and ``pct`` % of A's is a change."""

    ms: float = 100.0
    pct: float = 0.0

    def exceeded(self, a: float, b: float) -> bool:
        """Whether ``b`` moved away from ``a`` by more than the tolerance."""
        return abs(b - a) > max(self.ms, self.pct / 100.0 * abs(a))

    def direction(self, a: float, b: float) -> str | None:
        """:data:`SLOWER` or :data:`FASTER` when ``b`` moved beyond the tolerance, else None."""
        if not self.exceeded(a, b):
            return None
        return SLOWER if b > a else FASTER

    def describe(self) -> str:
        """``100 ms`` or ``100 ms or 20 %`` (whichever is larger)."""
        return f"{self.ms:g} ms" + (f" or {self.pct:g} % (the larger)" if self.pct else "")

    def to_json(self) -> dict[str, float]:
        """``{"ms", "pct"}``."""
        return {"ms": self.ms, "pct": self.pct}


def parse_tolerance(text: str) -> Tolerance:
    """``200`` (ms), ``20%``, ``200,20%``; raises ValueError."""
    ms, pct = None, None
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part.endswith("%"):
            value = float(part[:-1])
            pct = value if pct is None else math.nan
        else:
            value = float(part.removesuffix("ms"))
            ms = value if ms is None else math.nan
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(text)
    if (ms is None and pct is None) or (ms is not None and math.isnan(ms)) or (pct is not None and math.isnan(pct)):
        raise ValueError(text)
    return Tolerance(ms=ms if ms is not None else 0.0, pct=pct if pct is not None else 0.0)


def percentile(values: Sequence[float], p: int) -> float | None:
    """Nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@dataclass(frozen=True, kw_only=True, slots=True)
class Timing:
    """One percentile of one timing, A and B side by side."""

    name: str  # "first_response_ms p95"
    a: float | None
    b: float | None
    #: :data:`SLOWER` or :data:`FASTER` when B's moved beyond the tolerance; None within it (or one side has none).
    direction: str | None = None

    @property
    def beyond_tolerance(self) -> bool:
        """Moved beyond the tolerance, either way."""
        return self.direction is not None

    def to_json(self) -> dict[str, Any]:
        """``{"name", "a", "b", "beyond_tolerance", "direction"}``."""
        return {"name": self.name, "a": self.a, "b": self.b, "beyond_tolerance": self.beyond_tolerance,
                "direction": self.direction}  # fmt: skip


@dataclass(kw_only=True)
class ModelRegression:
    """Everything that moved for one model."""

    model: str
    requests_a: int = 0
    requests_b: int = 0
    only_a: int = 0
    only_b: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)  # "completed -> error": pairs
    responses_changed: int = 0
    final_changed: int = 0
    error_changed: int = 0
    timings: list[Timing] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Any change of behaviour, or a timing beyond tolerance."""
        return bool(self.only_a or self.only_b or self.outcomes or self.responses_changed or self.final_changed
                    or self.error_changed or any(t.beyond_tolerance for t in self.timings))  # fmt: skip

    def moved(self, direction: str) -> bool:
        """Whether a timing percentile moved beyond tolerance in ``direction`` (:data:`SLOWER`, :data:`FASTER`)."""
        return any(t.direction == direction for t in self.timings)

    def to_json(self) -> dict[str, Any]:
        """The entry of ``diff --json``'s ``models``."""
        return {
            "model": self.model, "requests_a": self.requests_a, "requests_b": self.requests_b,
            "only_a": self.only_a, "only_b": self.only_b, "outcome_changes": dict(self.outcomes),
            "responses_changed": self.responses_changed, "final_changed": self.final_changed,
            "error_changed": self.error_changed, "timings": [t.to_json() for t in self.timings],
            "changed": self.changed,
        }  # fmt: skip


def _model(r: RequestOutcome) -> str:
    return r.model or "?"


def per_model(
    pairs: Iterable[tuple[RequestOutcome, RequestOutcome, Collection[str]]], only_a: Iterable[RequestOutcome],
    only_b: Iterable[RequestOutcome], tolerance: Tolerance, b_to_a: dict[str, str] | None = None,
) -> list[ModelRegression]:  # fmt: skip
    """One :class:`ModelRegression` per model, sorted by name (B's model names mapped back by ``b_to_a``).

    ``pairs``: A's request, B's, and the fields :func:`replay.tools.diff.compare` found changed.
    """
    back = b_to_a or {}
    out: dict[str, ModelRegression] = {}
    ta: dict[str, dict[str, list[float]]] = {}
    tb: dict[str, dict[str, list[float]]] = {}

    def entry(name: str) -> ModelRegression:
        return out.setdefault(name, ModelRegression(model=name))

    def note(side: dict[str, dict[str, list[float]]], name: str, r: RequestOutcome) -> None:
        for f in ("first_response_ms", "duration_ms"):
            v = getattr(r, f)
            if v is not None:
                side.setdefault(name, {}).setdefault(f, []).append(v)

    for a, b, fields in pairs:
        m = entry(_model(a))
        m.requests_a += 1
        m.requests_b += 1
        if "outcome" in fields:
            m.outcomes[f"{a.as_recorded} -> {b.as_recorded}"] += 1
        m.responses_changed += "responses" in fields or "text_responses" in fields
        m.final_changed += "final" in fields
        m.error_changed += "error" in fields
        note(ta, m.model, a)
        note(tb, m.model, b)
    for r in only_a:
        m = entry(_model(r))
        m.requests_a += 1
        m.only_a += 1
        note(ta, m.model, r)
    for r in only_b:
        name = back.get(_model(r), _model(r))
        m = entry(name)
        m.requests_b += 1
        m.only_b += 1
        note(tb, name, r)
    for name, m in out.items():
        for f in ("first_response_ms", "duration_ms"):
            va, vb = ta.get(name, {}).get(f, []), tb.get(name, {}).get(f, [])
            for p in PERCENTILES:
                pa, pb = percentile(va, p), percentile(vb, p)
                moved = tolerance.direction(pa, pb) if pa is not None and pb is not None else None
                m.timings.append(Timing(name=f"{f} p{p}", a=pa, b=pb, direction=moved))
    return [out[k] for k in sorted(out)]

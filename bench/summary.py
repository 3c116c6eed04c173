"""Medians of a scenario's runs, paired with the direct path's runs of the same round."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any


def _med(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _paired(
    raw: dict[str, list[dict[str, Any] | None]], path: str, f: Callable[[dict[str, Any], dict[str, Any]], float]
) -> float | None:
    base = raw.get("direct", [])
    vals = [f(a, b) for a, b in zip(raw[path], base, strict=False) if a is not None and b is not None]
    return _med(vals)


def summarise_throughput(raw: dict[str, list[dict[str, Any] | None]], key: str = "rate") -> dict[str, Any]:
    def value(r: dict[str, Any]) -> float:
        return float(r[key]) if key != "rate" else r["responses"] / r["wall_s"]

    out: dict[str, Any] = {}
    for path, runs in raw.items():
        ok = [r for r in runs if r is not None]
        out[path] = {
            "value": _med([value(r) for r in ok]),
            "ratio": _paired(raw, path, lambda a, b: value(a) / value(b)) if "direct" in raw else None,
            "proxy_cpu_us_per_resp": _med([r["proxy_cpu_s"] / r["responses"] * 1e6 for r in ok if r["responses"]]),
            "upstream_cpu_us_per_resp": _med(
                [r["upstream_cpu_s"] / r["responses"] * 1e6 for r in ok if r["responses"]]
            ),
            "loadgen_cpu_us_per_resp": _med([r["loadgen_cpu_s"] / r["responses"] * 1e6 for r in ok if r["responses"]]),
            "runs": len(ok),
        }
    return out


def summarise_latency(raw: dict[str, list[dict[str, Any] | None]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, runs in raw.items():
        ok = [r for r in runs if r is not None]
        out[path] = {
            "p50_us": _med([r["p50_us"] for r in ok]),
            "p99_us": _med([r["p99_us"] for r in ok]),
            "added_p50_us": _paired(raw, path, lambda a, b: a["p50_us"] - b["p50_us"]) if "direct" in raw else None,
            "added_p99_us": _paired(raw, path, lambda a, b: a["p99_us"] - b["p99_us"]) if "direct" in raw else None,
            "rate_per_s": _med([r.get("rate_per_s") or r["responses"] / r["wall_s"] for r in ok]),
            "proxy_cpu_us_per_resp": _med([r["proxy_cpu_s"] / r["responses"] * 1e6 for r in ok if r["responses"]]),
            "runs": len(ok),
        }
    return out

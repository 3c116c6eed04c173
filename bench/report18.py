"""Issue 18's targets against the fake upstream, each beside what nginx and the Python floor measured in the same run.

nginx (C, records nothing) is what the targets were set from; ``floor`` (:mod:`bench.floor`, a relay in
Python that only passes reads on) is what no change to the proxy's per-message work can get under on
this machine: its loop callbacks and syscalls are the proxy's too. A target below the floor says
the remaining cost is the process model, not the recording.
"""

from __future__ import annotations

from typing import Any

#: (target, scenario, proxy path, summary key, scale, bound, "<=" or ">=", format). Ratios with three
#: decimals: 0.9489 printed as "0.95x" beside "NO" read as a mistake.
ROWS: tuple[tuple[str, str, str, str, float, float, str, str], ...] = (
    ("proxy CPU per streamed response <= 15 us", "streaming", "proxy-meta", "proxy_cpu_us_per_resp", 1, 15, "<=", "{:.1f} us"),
    ("proxy CPU per unary call <= 100 us", "unary", "proxy-meta", "proxy_cpu_us_per_resp", 1, 100, "<=", "{:.0f} us"),
    ("unary added p99 <= 0.3 ms", "unary", "proxy-meta", "added_p99_us", 1e-3, 0.3, "<=", "{:+.3f} ms"),
    ("paced added p50 <= 0.06 ms", "paced", "proxy-meta", "added_p50_us", 1e-3, 0.06, "<=", "{:+.3f} ms"),
    ("--payload full streaming >= 0.95x direct", "streaming", "proxy-full", "ratio", 1, 0.95, ">=", "{:.3f}x"),
    ("--payload full 100 MB tensor >= 0.8x direct", "large", "proxy-full", "ratio", 1, 0.8, ">=", "{:.3f}x"),
)  # fmt: skip


def _value(sc: dict[str, Any], scenario: str, path: str, key: str, scale: float) -> float | None:
    v = sc.get(scenario, {}).get("summary", {}).get(path, {}).get(key)
    return None if v is None else v * scale


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target: the proxy's value, nginx's and the floor's (None = not measured), met or not."""
    sc = results["scenarios"]
    out = []
    for name, scenario, path, key, scale, bound, op, fmt in ROWS:
        v = _value(sc, scenario, path, key, scale)
        met = None if v is None else (v <= bound if op == "<=" else v >= bound)
        shown = {p: (None if x is None else fmt.format(x))
                 for p, x in (("proxy", v), ("nginx", _value(sc, scenario, "nginx", key, scale)),
                              ("floor", _value(sc, scenario, "floor", key, scale)))}  # fmt: skip
        out.append({"target": name, "path": path, "value": v, "met": met, "shown": shown})
    return out


def table(ts: list[dict[str, Any]]) -> str:
    """The markdown table of :func:`targets`, or "" when none of them was measured."""
    if all(t["value"] is None for t in ts):
        return ""
    lines = ["### targets (issue 18; the same run's nginx and Python floor beside them)",
             "| target | proxy | nginx | floor | met |", "|---|---|---|---|---|"]  # fmt: skip
    for t in ts:
        s = t["shown"]
        met = {True: "yes", False: "NO", None: "n/a"}[t["met"]]
        lines.append(
            f"| {t['target']} ({t['path']}) | {s['proxy'] or '-'} | {s['nginx'] or '-'} | {s['floor'] or '-'} | {met} |"
        )
    return "\n".join(lines) + "\n"

"""What a run's figures say: medians of a scenario's runs (paired with the direct path's runs of the same
round), and the targets each measurement is judged by, with nginx and the Python floor beside the proxy.

nginx (C, records nothing) is what the targets were set from; ``floor`` (:mod:`bench.harness.floor`, a
relay in Python that only passes reads on) is what no change to the proxy's per-message work can get
under on the same machine: its loop callbacks and syscalls are the proxy's too. A target below the
floor says the remaining cost is the process model, not the recording.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def median(xs: list[float]) -> float | None:
    """The median of the values that are not None (None when there are none)."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _paired(
    raw: dict[str, list[dict[str, Any] | None]], path: str, f: Callable[[dict[str, Any], dict[str, Any]], float]
) -> float | None:
    base = raw.get("direct", [])
    vals = [f(a, b) for a, b in zip(raw[path], base, strict=False) if a is not None and b is not None]
    return median(vals)


def summarise_throughput(raw: dict[str, list[dict[str, Any] | None]], key: str = "rate") -> dict[str, Any]:
    def value(r: dict[str, Any]) -> float:
        return float(r[key]) if key != "rate" else r["responses"] / r["wall_s"]

    out: dict[str, Any] = {}
    for path, runs in raw.items():
        ok = [r for r in runs if r is not None]
        out[path] = {
            "value": median([value(r) for r in ok]),
            "ratio": _paired(raw, path, lambda a, b: value(a) / value(b)) if "direct" in raw else None,
            "proxy_cpu_us_per_resp": median([r["proxy_cpu_s"] / r["responses"] * 1e6 for r in ok if r["responses"]]),
            "upstream_cpu_us_per_resp": median(
                [r["upstream_cpu_s"] / r["responses"] * 1e6 for r in ok if r["responses"]]
            ),
            "loadgen_cpu_us_per_resp": median([r["loadgen_cpu_s"] / r["responses"] * 1e6 for r in ok if r["responses"]]),
            "runs": len(ok),
        }
    return out


def summarise_latency(raw: dict[str, list[dict[str, Any] | None]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, runs in raw.items():
        ok = [r for r in runs if r is not None]
        out[path] = {
            "p50_us": median([r["p50_us"] for r in ok]),
            "p99_us": median([r["p99_us"] for r in ok]),
            "added_p50_us": _paired(raw, path, lambda a, b: a["p50_us"] - b["p50_us"]) if "direct" in raw else None,
            "added_p99_us": _paired(raw, path, lambda a, b: a["p99_us"] - b["p99_us"]) if "direct" in raw else None,
            "rate_per_s": median([r.get("rate_per_s") or r["responses"] / r["wall_s"] for r in ok]),
            "proxy_cpu_us_per_resp": median([r["proxy_cpu_s"] / r["responses"] * 1e6 for r in ok if r["responses"]]),
            "runs": len(ok),
        }
    return out


# -- targets ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One measurement of a run and the bound it is judged by (``bound`` None: shown, not judged)."""

    measurement: str
    scenario: str
    path: str  # the proxy path judged; nginx and the floor are read from the same scenario and key
    key: str
    bound: float | None = None
    op: str = "<="  # or ">="
    scale: float = 1.0  # the summary's unit to the shown one (us -> ms: 1e-3)
    fmt: str = "{:.2f}x"
    #: a row only in runs that measured its scenario (runs from before it existed render as they did)
    only_if_run: bool = False
    #: the fewest rounds the figure is judged on (fewer: shown, not judged; the summary's ``runs``)
    min_rounds: int = 0
    #: a row only in runs whose proxy path has the figure (runs from before it existed render as they did)
    only_if_measured: bool = False

    @property
    def bound_text(self) -> str:
        if self.bound is None:
            return "shown"
        return f"{self.op} {self.bound:g}{self.fmt.split('}', 1)[1]}"  # the bound as written, in the figure's unit


#: The targets of a full run, one row per measurement. Bounds: the project's targets for the proxy
#: against the fast fake upstream (and, for perf_analyzer, the real tritonserver); where a figure had
#: two targets over time, the later, tighter one. Ratios to direct with three decimals where the bound
#: is 0.95: 0.9489 printed as "0.95x" beside "no" reads as a mistake.
TARGETS: tuple[Target, ...] = (
    Target("streaming throughput vs direct (meta)", "streaming", "proxy-meta", "ratio", 0.85, ">=", fmt="{:.2f}x"),
    Target("streaming throughput vs direct (`--payload full`)", "streaming", "proxy-full", "ratio", 0.95, ">=", fmt="{:.3f}x"),
    Target("proxy CPU per streamed response (meta)", "streaming", "proxy-meta", "proxy_cpu_us_per_resp", 15, fmt="{:.1f} us"),
    Target("proxy CPU per unary call (meta)", "unary", "proxy-meta", "proxy_cpu_us_per_resp", 100, fmt="{:.0f} us"),
    Target("unary added latency p50", "unary", "proxy-meta", "added_p50_us", 0.3, scale=1e-3, fmt="{:+.3f} ms"),
    Target("unary added latency p99", "unary", "proxy-meta", "added_p99_us", 0.3, scale=1e-3, fmt="{:+.3f} ms"),
    Target("paced 1.5k responses/s, added latency p50", "paced", "proxy-meta", "added_p50_us", 0.06, scale=1e-3, fmt="{:+.3f} ms"),
    Target("paced 1.5k responses/s, added latency p99", "paced", "proxy-meta", "added_p99_us", 1.0, scale=1e-3, fmt="{:+.3f} ms"),
    Target("100 MB tensor vs direct (meta)", "large", "proxy-meta", "ratio", 0.8, ">=", fmt="{:.2f}x"),
    Target("100 MB tensor vs direct (`--payload full`)", "large", "proxy-full", "ratio", 0.8, ">=", fmt="{:.2f}x"),
    Target("RSS peak, a client stops reading while the upstream streams 1 GiB", "memory", "1 stream", "rss_peak_mb", 100, "<", fmt="{:.1f} MB"),
    Target("scaling 1 / 10 / 100 / 1000 streams vs direct (each)", "scaling", "proxy-meta", "ratio", 0.5, ">=", fmt="{:.2f}x"),
    # One round's ratio moves by +-0.1 on these VMs, twice the margin: the median of 5 at least.
    Target("perf_analyzer, real tritonserver, vs direct", "perf_analyzer", "proxy", "ratio", 0.95, ">=", fmt="{:.2f}x",
           min_rounds=5),
    # Per response: user + system CPU (us), then system calls, context switches and futex calls (perf stat).
    Target("perf_analyzer, per response: user + system CPU; syscalls, context switches, futex calls", "perf_analyzer",
           "proxy", "user_us_per_resp", fmt="{:.1f}", only_if_measured=True),
    Target("perf_analyzer, `--workers 1` / `2`, responses/s", "pa_workers", "proxy-w1", "responses_per_s", fmt="{:.0f}/s"),
    # HTTP/1.1 beside nginx proxy_pass: no bound was set for these, so they are shown.
    Target("HTTP generate_stream events/s vs direct (meta)", "http_stream", "proxy-meta", "ratio", fmt="{:.2f}x", only_if_run=True),
    Target("proxy CPU per SSE event (meta)", "http_stream", "proxy-meta", "proxy_cpu_us_per_resp", fmt="{:.1f} us", only_if_run=True),
    Target("HTTP infer added latency p50", "http_unary", "proxy-meta", "added_p50_us", scale=1e-3, fmt="{:+.3f} ms", only_if_run=True),
    Target("HTTP infer added latency p99", "http_unary", "proxy-meta", "added_p99_us", scale=1e-3, fmt="{:+.3f} ms", only_if_run=True),
    Target("HTTP generate_stream, real tritonserver, vs direct", "http_triton_stream", "proxy-meta", "ratio", fmt="{:.2f}x", only_if_run=True),
    Target("HTTP infer, real tritonserver, added latency p50", "http_triton_unary", "proxy-meta", "added_p50_us", scale=1e-3, fmt="{:+.3f} ms", only_if_run=True),
)  # fmt: skip


def _met(t: Target, values: list[float]) -> bool | None:
    if t.bound is None or not values:
        return None
    bound = t.bound
    ops = {">=": lambda v: v >= bound, "<=": lambda v: v <= bound, "<": lambda v: v < bound}
    return all(ops[t.op](v) for v in values)


def _scaled(t: Target, v: Any) -> float | None:
    return None if v is None else float(v) * t.scale


def _cell(t: Target, scenario: dict[str, Any], path: str) -> tuple[list[float], str | None]:
    """The values of ``path`` this target is judged on, and how they are shown (None: not measured)."""
    summary = scenario.get("summary", {})
    if t.scenario == "scaling":  # one value per stream count
        vals = [_scaled(t, s.get("summary", {}).get(path, {}).get(t.key)) for s in scenario.values()]
        got = [v for v in vals if v is not None]
        return got, " / ".join("-" if v is None else t.fmt.format(v) for v in vals) if got else None
    if t.scenario == "memory":  # one fresh proxy, no nginx or floor beside it
        m = scenario.get(t.path, {}) if path == t.path else {}
        v = _scaled(t, m.get(t.key))
        if v is None:
            return [], None
        return [v], t.fmt.format(v) + (" (INCOMPLETE)" if m.get("complete") is False else "")
    if t.scenario == "pa_workers":  # shown: each worker count's rate and its ratio to direct
        rows = [(p, v) for p, v in summary.items() if p.startswith("proxy-w")] if path == t.path else []
        if not rows:
            return [], None
        direct = summary.get("direct", {}).get("responses_per_s")
        shown = ", ".join(f"{p.removeprefix('proxy-')} {_fmt(t.fmt, v.get('responses_per_s'))} ({_fmt('{:.2f}x', v.get('ratio'))})"
                          for p, v in rows)  # fmt: skip
        return [], shown + (f" of direct's {direct:.0f}/s" if direct is not None else "")
    v = _scaled(t, summary.get(path, {}).get(t.key))
    if v is None:
        return [], None
    shown = t.fmt.format(v)
    if t.key == "user_us_per_resp":  # shown: where the CPU goes, and what the kernel was asked for
        p = summary[path]
        shown = f"{_fmt('{:.1f}', v)} + {_fmt('{:.1f}', p.get('sys_us_per_resp'))} us; " + ", ".join(
            _fmt("{:.2f}", p.get(f"{k}_per_resp")) for k in ("syscalls", "switches", "futex"))
        return [], shown
    if t.scenario == "perf_analyzer":
        p = summary[path]
        if p.get("ratio_range"):
            low, high = p["ratio_range"]
            # Judged on the median; the range says whether the rounds agree (a sign test of 3 rounds is weak).
            straddle = t.bound is not None and low < t.bound <= high
            shown += f" (rounds {low:.2f}-{high:.2f}{': they straddle the bound' if straddle else ''})"
        if p.get("proxy_cpu_us_per_resp") is not None:
            shown += f", {p['proxy_cpu_us_per_resp']:.1f} us per response"
    runs = summary.get(path, {}).get("runs")
    if t.min_rounds and (runs is None or runs < t.min_rounds):
        return [], shown + f"; {runs if runs is not None else 'unknown'} rounds, judged on {t.min_rounds} or more"
    return [v], shown


def _fmt(fmt: str, v: Any) -> str:
    return "-" if v is None else fmt.format(v)


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with the proxy's figure, nginx's and the floor's in the same run (None = not
    measured), and whether the proxy's meets it (None = not measured, or shown without a bound)."""
    sc = results.get("scenarios", {})
    out = []
    for t in TARGETS:
        if t.only_if_run and t.scenario not in sc:
            continue
        if t.only_if_measured and sc.get(t.scenario, {}).get("summary", {}).get(t.path, {}).get(t.key) is None:
            continue
        scenario = sc.get(t.scenario, {})
        values, proxy = _cell(t, scenario, t.path)
        shown = {"proxy": proxy, "nginx": _cell(t, scenario, "nginx")[1], "floor": _cell(t, scenario, "floor")[1]}
        met = _met(t, values)
        if met and t.scenario == "memory" and scenario.get(t.path, {}).get("complete") is False:
            met = False  # bytes went missing: a low peak proves nothing
        out.append({"measurement": t.measurement, "target": t.bound_text, "path": t.path,
                    "value": values[0] if len(values) == 1 else (values or None), "met": met, "shown": shown})  # fmt: skip
    return out

"""The result tables (markdown) and the issue-6 targets, each measured value met or not."""

from __future__ import annotations

from typing import Any

from bench.config import MB


def _f(x: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def ms(us: float | None) -> float | None:
    return None if us is None else us / 1000


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / MB:.0f} MiB"


def table(results: dict[str, Any]) -> str:
    lines: list[str] = []
    add = lines.append
    sc = results["scenarios"]
    if "streaming" in sc:
        s = sc["streaming"]
        add(f"### streaming ({s['shape']}; medians of {results['config']['reps']} interleaved reps)")
        add(
            "| path | responses/s | ratio to direct | proxy CPU us/response | upstream CPU us/resp | loadgen CPU us/resp |"
        )
        add("|---|---|---|---|---|---|")
        for p, v in s["summary"].items():
            add(f"| {p} | {_f(v['value'])} | {_f(v['ratio'], '{:.2f}')} | {_f(v['proxy_cpu_us_per_resp'], '{:.1f}') if p != 'direct' else '-'} "
                f"| {_f(v['upstream_cpu_us_per_resp'], '{:.1f}')} | {_f(v['loadgen_cpu_us_per_resp'], '{:.1f}')} |")  # fmt: skip
        add("")
    if "scaling" in sc:
        add("### scaling (concurrent streams on one connection; ~constant responses per measurement)")
        add("| streams | shape | path | responses/s | ratio to direct | proxy CPU us/response |")
        add("|---|---|---|---|---|---|")
        for n, s in sc["scaling"].items():
            for p, v in s["summary"].items():
                add(f"| {n} | {s['shape']} | {p} | {_f(v['value'])} | {_f(v['ratio'], '{:.2f}')} | "
                    f"{_f(v['proxy_cpu_us_per_resp'], '{:.1f}') if p != 'direct' else '-'} |")  # fmt: skip
        add("")
    for name in ("unary", "paced"):
        if name in sc:
            s = sc[name]
            add(f"### {name} latency ({s['shape']})")
            add("| path | p50 ms | p99 ms | added p50 ms | added p99 ms | rate/s | proxy CPU us/response |")
            add("|---|---|---|---|---|---|---|")
            for p, v in s["summary"].items():
                add(f"| {p} | {_f(ms(v['p50_us']), '{:.3f}')} | {_f(ms(v['p99_us']), '{:.3f}')} | "
                    f"{_f(ms(v['added_p50_us']), '{:+.3f}') if p != 'direct' else '-'} | "
                    f"{_f(ms(v['added_p99_us']), '{:+.3f}') if p != 'direct' else '-'} | {_f(v['rate_per_s'])} | "
                    f"{_f(v['proxy_cpu_us_per_resp'], '{:.1f}') if p != 'direct' else '-'} |")  # fmt: skip
            add("")
    if "large" in sc:
        s = sc["large"]
        add(f"### large tensor ({s['shape']})")
        add("| path | MB/s (tensor bytes each way) | ratio to direct | proxy CPU ms/call |")
        add("|---|---|---|---|")
        for p, v in s["summary"].items():
            add(f"| {p} | {_f(v['value'], '{:.1f}')} | {_f(v['ratio'], '{:.2f}')} | "
                f"{_f(None if p == 'direct' or v['proxy_cpu_us_per_resp'] is None else v['proxy_cpu_us_per_resp'] / 1000, '{:.0f}')} |")  # fmt: skip
        add("")
    if "memory" in sc:
        add("### memory (proxy --payload meta, fresh process; raw h2 client stops reading, then drains)")
        add(
            "| stalled client streams | upstream sends | RSS before MB | RSS max while stalled MB | RSS max while draining MB | VmHWM MB | delivered | drain MB/s |"
        )
        add("|---|---|---|---|---|---|---|---|")
        for label, m in sc["memory"].items():
            add(f"| {label} | {_size(m['requested_bytes'])} | {_f(m['rss_base_mb'], '{:.1f}')} | {_f(m['rss_stall_max_mb'], '{:.1f}')} | "
                f"{_f(m['rss_drain_max_mb'], '{:.1f}')} | {_f(m['rss_hwm_mb'], '{:.1f}')} | "
                f"{_size(m['received_bytes'])}{'' if m['complete'] else ' (INCOMPLETE)'} | {_f(m['drain_mb_per_s'], '{:.0f}')} |")  # fmt: skip
        add("")
    return "\n".join(lines)


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue-6 targets, each with the measured value and met/not met (None = not measured)."""
    sc = results["scenarios"]
    out: list[dict[str, Any]] = []

    def t(name: str, value: Any, met: bool | None, shown: str) -> None:
        out.append({"target": name, "value": value, "met": met, "shown": shown})

    def get(*keys: str) -> Any:
        cur: Any = sc
        for k in keys:
            if not isinstance(cur, dict) or k not in cur:
                return None
            cur = cur[k]
        return cur

    r = get("streaming", "summary", "proxy-meta", "ratio")
    t("streaming meta >= 0.85x direct", r, None if r is None else r >= 0.85, _f(r, "{:.2f}x"))
    rn = get("streaming", "summary", "nginx", "ratio")
    t("streaming meta not worse than nginx", [r, rn], None if r is None or rn is None else r >= rn,
      f"meta {_f(r, '{:.2f}')} vs nginx {_f(rn, '{:.2f}')}")  # fmt: skip
    cpu = get("streaming", "summary", "proxy-meta", "proxy_cpu_us_per_resp")
    t("proxy CPU <= 50 us per streamed response (meta)", cpu, None if cpu is None else cpu <= 50, _f(cpu, "{:.1f} us"))
    a50 = get("paced", "summary", "proxy-meta", "added_p50_us")
    a99 = get("paced", "summary", "proxy-meta", "added_p99_us")
    t(
        "added latency p50 <= 0.2 ms at ~1.5k resp/s",
        a50,
        None if a50 is None else a50 <= 200,
        _f(None if a50 is None else a50 / 1000, "{:+.3f} ms"),
    )
    t(
        "added latency p99 <= 1 ms at ~1.5k resp/s",
        a99,
        None if a99 is None else a99 <= 1000,
        _f(None if a99 is None else a99 / 1000, "{:+.3f} ms"),
    )
    u50 = get("unary", "summary", "proxy-meta", "added_p50_us")
    t(
        "unary ModelInfer added p50 <= 0.3 ms",
        u50,
        None if u50 is None else u50 <= 300,
        _f(None if u50 is None else u50 / 1000, "{:+.3f} ms"),
    )
    lr = get("large", "summary", "proxy-meta", "ratio")
    t("100 MB tensor >= 0.8x direct", lr, None if lr is None else lr >= 0.8, _f(lr, "{:.2f}x"))
    mem = get("memory", "1 stream")
    if mem:
        peak = max(x for x in (mem["rss_stall_max_mb"], mem["rss_drain_max_mb"], mem["rss_hwm_mb"]) if x is not None)
        ok = peak < 100 and mem["complete"]
        t(f"RSS < 100 MB, non-reading client, upstream streams {_size(mem['requested_bytes'])}", peak, ok,
          f"peak {peak:.1f} MB (idle {mem['rss_base_mb']:.1f} MB)")  # fmt: skip
    else:
        t("RSS < 100 MB with a non-reading client", None, None, "-")
    multi = [(k, v) for k, v in (get("memory") or {}).items() if k != "1 stream"]
    if multi and mem:
        k, m = multi[0]
        per = (m["rss_stall_max_mb"] - m["rss_base_mb"]) / m["streams"] if m["rss_stall_max_mb"] else None
        t(
            "RSS grows at most linearly with stalled streams",
            per,
            None,
            f"{k}: +{_f(per, '{:.1f}')} MB per stalled stream",
        )
    scal = get("scaling") or {}
    if scal:
        ratios = {n: s["summary"].get("proxy-meta", {}).get("ratio") for n, s in scal.items()}
        cpus = {n: s["summary"].get("proxy-meta", {}).get("proxy_cpu_us_per_resp") for n, s in scal.items()}
        vals = [v for v in ratios.values() if v is not None]
        ok = bool(vals) and min(vals) >= 0.5
        shown = ", ".join(f"{n}: {_f(ratios[n], '{:.2f}x')}/{_f(cpus[n], '{:.0f}us')}" for n in ratios)
        t("scaling 1..1000 streams without collapse (ratio >= 0.5 everywhere)", ratios, ok, shown)
    return out


def targets_table(ts: list[dict[str, Any]]) -> str:
    lines = ["### targets (issue 6)", "| target | measured | met |", "|---|---|---|"]
    for x in ts:
        met = {True: "yes", False: "NO", None: "n/a"}[x["met"]]
        lines.append(f"| {x['target']} | {x['shown']} | {met} |")
    return "\n".join(lines)

"""A run's results as markdown: the targets table (the one docs/benchmarks.md opens with) and the
tables of every scenario. Everything here reads a results dict (``python -m bench --json``), so a
results file renders the same tables long after its run (``python -m bench --render FILE``)."""

from __future__ import annotations

from typing import Any

from bench.harness.config import MB, SCENARIOS
from bench.harness.summary import median, targets


def _f(x: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def ms(us: float | None) -> float | None:
    return None if us is None else us / 1000


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / MB:.0f} MiB"


def _per_piece(runs: list[dict[str, Any] | None]) -> float | None:
    """Events per body piece the client read (1.0: one chunk per event, as Triton sends them; more: a
    relay merged chunks, and the load generator parsed fewer of them)."""
    return median([r["responses"] / r["body_pieces"] for r in runs if r is not None and r.get("body_pieces")])


def table(results: dict[str, Any]) -> str:
    """The tables of the fake-upstream scenarios in ``results`` (every path, medians)."""
    lines: list[str] = []
    add = lines.append
    sc = results["scenarios"]
    if "streaming" in sc:
        s = sc["streaming"]
        add(f"### streaming ({s.get('shape', '?')}; medians of {results.get('config', {}).get('reps', '?')} interleaved reps)")
        add(
            "| path | responses/s | ratio to direct | proxy CPU us/response | upstream CPU us/resp | loadgen CPU us/resp |"
        )
        add("|---|---|---|---|---|---|")
        for p, v in s["summary"].items():
            add(f"| {p} | {_f(v.get('value'))} | {_f(v.get('ratio'), '{:.2f}')} | {_f(v.get('proxy_cpu_us_per_resp'), '{:.1f}') if p != 'direct' else '-'} "
                f"| {_f(v.get('upstream_cpu_us_per_resp'), '{:.1f}')} | {_f(v.get('loadgen_cpu_us_per_resp'), '{:.1f}')} |")  # fmt: skip
        add("")
    for name in ("http_stream", "http_triton_stream"):
        if name not in sc:
            continue
        s = sc[name]
        add(f"### HTTP generate_stream ({s.get('shape', '?')}; medians of {results.get('config', {}).get('reps', '?')} interleaved reps; nginx: proxy_pass)")
        add("| path | events/s | ratio to direct | proxy CPU us/event | upstream CPU us/event | loadgen CPU us/event | events per body piece |")  # fmt: skip
        add("|---|---|---|---|---|---|---|")
        for p, v in s["summary"].items():
            add(f"| {p} | {_f(v.get('value'))} | {_f(v.get('ratio'), '{:.2f}')} | {_f(v.get('proxy_cpu_us_per_resp'), '{:.1f}') if p != 'direct' else '-'} "
                f"| {_f(v.get('upstream_cpu_us_per_resp'), '{:.1f}')} | {_f(v.get('loadgen_cpu_us_per_resp'), '{:.1f}')} "
                f"| {_f(_per_piece(s.get('raw', {}).get(p, [])), '{:.1f}')} |")  # fmt: skip
        add("")
    if "scaling" in sc:
        add("### scaling (concurrent streams on one connection; ~constant responses per measurement)")
        add("| streams | shape | path | responses/s | ratio to direct | proxy CPU us/response |")
        add("|---|---|---|---|---|---|")
        for n, s in sc["scaling"].items():
            for p, v in s["summary"].items():
                add(f"| {n} | {s.get('shape', '?')} | {p} | {_f(v.get('value'))} | {_f(v.get('ratio'), '{:.2f}')} | "
                    f"{_f(v.get('proxy_cpu_us_per_resp'), '{:.1f}') if p != 'direct' else '-'} |")  # fmt: skip
        add("")
    for name in ("unary", "paced", "http_unary", "http_triton_unary"):
        if name in sc:
            s = sc[name]
            add(f"### {'HTTP infer' if name.startswith('http_') else name} latency ({s.get('shape', '?')})")
            add("| path | p50 ms | p99 ms | added p50 ms | added p99 ms | rate/s | proxy CPU us/response |"
                if not name.startswith("http_") else "| path | p50 ms | p99 ms | added p50 ms | added p99 ms | rate/s | proxy CPU us/call |")
            add("|---|---|---|---|---|---|---|")
            for p, v in s["summary"].items():
                add(f"| {p} | {_f(ms(v.get('p50_us')), '{:.3f}')} | {_f(ms(v.get('p99_us')), '{:.3f}')} | "
                    f"{_f(ms(v.get('added_p50_us')), '{:+.3f}') if p != 'direct' else '-'} | "
                    f"{_f(ms(v.get('added_p99_us')), '{:+.3f}') if p != 'direct' else '-'} | {_f(v.get('rate_per_s'))} | "
                    f"{_f(v.get('proxy_cpu_us_per_resp'), '{:.1f}') if p != 'direct' else '-'} |")  # fmt: skip
            add("")
    if "large" in sc:
        s = sc["large"]
        add(f"### large tensor ({s.get('shape', '?')})")
        add("| path | MB/s (tensor bytes each way) | ratio to direct | proxy CPU ms/call |")
        add("|---|---|---|---|")
        for p, v in s["summary"].items():
            add(f"| {p} | {_f(v.get('value'), '{:.1f}')} | {_f(v.get('ratio'), '{:.2f}')} | "
                f"{_f(None if p == 'direct' or v.get('proxy_cpu_us_per_resp') is None else v['proxy_cpu_us_per_resp'] / 1000, '{:.0f}')} |")  # fmt: skip
        add("")
    if "memory" in sc:
        add("### memory (proxy --payload meta, fresh process; raw h2 client stops reading, then drains)")
        add(
            "| stalled client streams | upstream sends | RSS before MB | RSS max while stalled MB | RSS max while draining MB | VmHWM MB | delivered | drain MB/s |"
        )
        add("|---|---|---|---|---|---|---|---|")
        for label, m in sc["memory"].items():
            sent, got = m.get("requested_bytes"), m.get("received_bytes")
            add(f"| {label} | {'-' if sent is None else _size(sent)} | {_f(m.get('rss_base_mb'), '{:.1f}')} | "
                f"{_f(m.get('rss_stall_max_mb'), '{:.1f}')} | {_f(m.get('rss_drain_max_mb'), '{:.1f}')} | "
                f"{_f(m.get('rss_hwm_mb'), '{:.1f}')} | {'-' if got is None else _size(got)}"
                f"{' (INCOMPLETE)' if m.get('complete') is False else ''} | {_f(m.get('drain_mb_per_s'), '{:.0f}')} |")  # fmt: skip
        add("")
    return "\n".join(lines)


def pa_table(sc: dict[str, Any]) -> str:
    """The tables of the perf_analyzer scenarios present in ``sc``."""
    lines: list[str] = []
    add = lines.append
    for name, title in (("perf_analyzer", "perf_analyzer, real tritonserver"),
                        ("pa_workers", "record --workers, perf_analyzer, real tritonserver")):  # fmt: skip
        if name not in sc:
            continue
        s = sc[name]
        add(f"### {title} ({s.get('shape', '?')}; medians of interleaved rounds)")
        # Where a relay's CPU goes, when the run measured it (runs from before it render as they did).
        split = any(v.get("user_us_per_resp") is not None for v in s["summary"].values())
        more = " user + system us/resp | syscalls / switches / futex per resp |" if split else ""
        add("| path | responses/s | ratio to direct | proxy CPU us/response | Triton CPU us/resp | perf_analyzer CPU us/resp | unstable runs |" + more)  # fmt: skip
        add("|---|---|---|---|---|---|---|" + ("---|---|" if split else ""))
        for p, v in s["summary"].items():
            cells = (f" {_f(v.get('user_us_per_resp'), '{:.1f}')} + {_f(v.get('sys_us_per_resp'), '{:.1f}')} | "
                     + " / ".join(_f(v.get(f"{k}_per_resp"), "{:.2f}") for k in ("syscalls", "switches", "futex")) + " |"
                     if split else "")  # fmt: skip
            add(f"| {p} | {_f(v.get('responses_per_s'))} | {_f(v.get('ratio'), '{:.2f}')} | {_f(v.get('proxy_cpu_us_per_resp'), '{:.1f}')} "
                f"| {_f(v.get('triton_cpu_us_per_resp'), '{:.1f}')} | {_f(v.get('pa_cpu_us_per_resp'), '{:.1f}')} | {v.get('unstable', '-')}/{v.get('runs', '-')} |{cells}")  # fmt: skip
        if s.get("calls_per_worker_file"):
            add("--workers 2, all runs (warm-up included): " + ", ".join(
                f"{k}: {v['connections']} connections, {v['calls']} calls" for k, v in s["calls_per_worker_file"].items()))  # fmt: skip
        add("")
    return "\n".join(lines)


def targets_table(ts: list[dict[str, Any]]) -> str:
    """The markdown table of :func:`bench.harness.summary.targets`: the proxy beside nginx and the floor."""
    lines = ["| measurement | target | proxy | nginx | floor | met |", "|---|---|---|---|---|---|"]
    for t in ts:
        s = t["shown"]
        met = {True: "yes", False: "no", None: "shown" if t["target"] == "shown" else "-"}[t["met"]]
        lines.append(f"| {t['measurement']} | {t['target']} | {s['proxy'] or '-'} | {s['nginx'] or '-'} | "
                     f"{s['floor'] or '-'} | {met} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def heading(results: dict[str, Any]) -> str:
    """One line saying which run the figures are from: when, on what, how loaded, which code."""
    env = results.get("environment", {})
    load = env.get("loadavg") or [None]
    parts = [f"`python -m bench` of {results.get('started', 'an unknown time')}"]
    if results.get("commit"):
        parts.append(f"the proxy at {results['commit']}")
    if env.get("cpus"):
        parts.append(f"{env['cpus']} CPUs")
    if load[0] is not None:
        parts.append(f"load average {load[0]:.2f} at the start")
    mode = results.get("mode", "?")
    ran = list(results.get("scenarios", {}))
    if mode == "full" and not set(SCENARIOS) <= set(ran):
        # "full" is the size of each scenario: a run of a few of them is not the full run the page shows.
        return ", ".join(parts) + f" (full-size run of {', '.join(ran) or 'no scenario'} only).\n"
    return ", ".join(parts) + f" ({mode} run).\n"


def render(results: dict[str, Any]) -> str:
    """What ``python -m bench --render FILE`` prints and docs/benchmarks.md holds: the run's heading
    and its targets table (tests/bench/test_docs_table.py keeps the page equal to it)."""
    out = heading(results) + "\n" + targets_table(targets(results))
    if results.get("transcribed"):  # figures a person copied, not a run's own file: say so where they are shown
        out += f"\nTranscribed: {results['transcribed']}\n"
    return out

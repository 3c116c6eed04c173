"""The triton-tap benchmark harness: ``python -m bench`` (see bench/README.md).

Starts a fast fake Triton (``bench.fake_upstream``), the load generator (``bench.loadgen``), one
proxy per payload mode (``python -m proxy``) and nginx ``grpc_pass`` when nginx is installed, each
in its own process; runs every scenario over every path interleaved (rep 1: A B C, rep 2: B C A,
...), measures wall time in the load generator and CPU time of each process from /proc; prints a
table of medians and ratios to direct, checks the issue-6 targets, and writes a JSON result to
``bench/results/``. Every process it starts is stopped on the way out (Ctrl-C included).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import procs

RESULTS = Path(__file__).resolve().parent / "results"
PAYLOADS = ("none", "meta", "full")
ALL_PATHS = ("direct", "proxy-none", "proxy-meta", "proxy-full", "nginx")
SCENARIOS = ("streaming", "unary", "large", "paced", "scaling", "memory")
MB = 1024 * 1024


@dataclass
class Config:
    """Sizes of every scenario (``FULL`` and ``SMOKE`` below)."""

    reps: int = 5
    streams: int = 4
    requests: int = 10
    responses: int = 200
    unary_calls: int = 2000
    large_calls: int = 2
    large_bytes: int = 100 * MB
    large_reps: int = 3
    paced_streams: int = 15
    paced_per_stream: int = 400  # 15 streams x 100/s = 1.5k responses/s for ~4 s
    paced_pace_us: int = 10_000
    scaling: tuple[int, ...] = (1, 10, 100, 1000)
    scaling_total: int = 8000  # responses per measurement, whatever the stream count
    scaling_reps: int = 3
    memory_messages: int = 1024  # x memory_msg_bytes = 1 GB
    memory_msg_bytes: int = MB
    memory_stall_s: float = 3.0
    memory_multi_streams: int = 8
    memory_multi_messages: int = 32
    timeout_s: float = 300.0
    #: extra paths: name -> module run as ``python -m MODULE`` with the proxy's flags (--payload meta)
    extra: dict[str, str] = field(default_factory=dict)
    #: only these paths (empty: all)
    only_paths: tuple[str, ...] = ()
    paths: dict[str, tuple[str, ...]] = field(
        default_factory=lambda: {
            "streaming": ALL_PATHS,
            "unary": ALL_PATHS,
            "large": ("direct", "proxy-none", "proxy-meta", "proxy-full", "nginx"),
            "paced": ("direct", "proxy-meta", "nginx"),
            "scaling": ("direct", "proxy-meta", "nginx"),
        }
    )


FULL = Config()
SMOKE = Config(
    reps=1, streams=2, requests=2, responses=20, unary_calls=50, large_calls=1, large_bytes=4 * MB, large_reps=1,
    paced_streams=3, paced_per_stream=20, paced_pace_us=2000, scaling=(1, 10), scaling_total=200, scaling_reps=1,
    memory_messages=16, memory_stall_s=0.5, memory_multi_streams=2, memory_multi_messages=4, timeout_s=30,
)  # fmt: skip


def _med(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def scaling_shape(streams: int, total: int) -> tuple[int, int]:
    """(requests per stream, responses per request) so that streams x R x N ~= total."""
    per_stream = max(1, total // streams)
    requests = max(1, min(10, per_stream // 20))
    return requests, max(1, per_stream // requests)


class Bench:
    """The processes of one run and the measurements taken through them."""

    def __init__(self, cfg: Config, workdir: Path, want_nginx: bool, log: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.workdir = workdir
        self.log = log
        self.procs: list[procs.Proc] = []
        self.targets: dict[str, tuple[int, procs.Proc | None]] = {}
        self.notes: list[str] = []
        self.errors: list[str] = []
        self.want_nginx = want_nginx

    # -- processes ---------------------------------------------------------------------------------

    def start(self, paths: set[str]) -> None:
        self.upstream, self.uport = procs.start_upstream(self.workdir)
        self.procs.append(self.upstream)
        self.targets["direct"] = (self.uport, None)
        self.worker = procs.Worker(self.workdir / "loadgen.log")
        self.procs.append(self.worker)
        self.worker.call({"op": "ping"}, 30)
        for payload in PAYLOADS:
            if f"proxy-{payload}" in paths:
                proc, port = procs.start_proxy(self.workdir, self.uport, payload)
                self.procs.append(proc)
                self.targets[f"proxy-{payload}"] = (port, proc)
        for name, module in self.cfg.extra.items():
            proc, port = procs.start_proxy(self.workdir, self.uport, "meta", module=module, name=name)
            self.procs.append(proc)
            self.targets[name] = (port, proc)
        if "nginx" in paths:
            if not self.want_nginx:
                self.notes.append("nginx: skipped (--no-nginx)")
            elif procs.nginx_binary() is None:
                self.notes.append("nginx: skipped, not installed (apt-get install -y nginx)")
            else:
                try:
                    proc, port = procs.start_nginx(self.workdir, self.uport)
                    self.procs.append(proc)
                    self.targets["nginx"] = (port, proc)
                except Exception as e:
                    self.notes.append(f"nginx: skipped, failed to start: {e}")
        for n in self.notes:
            self.log(n)

    def stop(self) -> None:
        for p in reversed(self.procs):
            try:
                code = p.stop()
                if p.name.startswith("proxy") and code not in (0, None):
                    self.errors.append(f"{p.name} exited with {code}: {p.log_tail(500)}")
            except Exception as e:
                self.errors.append(f"stopping {p.name}: {e}")
        self.procs.clear()

    def paths(self, scenario: str) -> list[str]:
        names = [*self.cfg.paths.get(scenario, ALL_PATHS), *self.cfg.extra]
        keep = set(self.cfg.only_paths) | set(self.cfg.extra)
        return [p for p in names if p in self.targets and (not self.cfg.only_paths or p in keep)]

    # -- one measurement ---------------------------------------------------------------------------

    def measure(self, path: str, cmd: dict[str, Any]) -> dict[str, Any] | None:
        port, proc = self.targets[path]
        cmd = {**cmd, "target": f"127.0.0.1:{port}", "timeout_s": self.cfg.timeout_s}
        c0 = proc.cpu() if proc else 0.0
        u0, l0 = self.upstream.cpu(), self.worker.cpu()
        try:
            res = self.worker.call(cmd, self.cfg.timeout_s)
        except Exception as e:
            self.errors.append(f"{cmd['op']} via {path}: {e}")
            self.log(f"  ERROR {cmd['op']} via {path}: {e}")
            return None
        res["proxy_cpu_s"] = (proc.cpu() - c0) if proc else 0.0
        res["upstream_cpu_s"] = self.upstream.cpu() - u0
        res["loadgen_cpu_s"] = self.worker.cpu() - l0
        if res.get("n_errors"):
            self.errors.append(f"{cmd['op']} via {path}: {res['n_errors']} errors, e.g. {res.get('errors')}")
        if proc is not None and not proc.alive():
            self.errors.append(f"{path} died: {proc.log_tail(500)}")
        return res

    def interleaved(
        self, name: str, paths: list[str], reps: int, cmd: dict[str, Any]
    ) -> dict[str, list[dict[str, Any] | None]]:
        """``reps`` rounds over ``paths``, the order rotated each round (A B C, B C A, ...)."""
        out: dict[str, list[dict[str, Any] | None]] = {p: [] for p in paths}
        for rep in range(reps):
            order = paths[rep % len(paths) :] + paths[: rep % len(paths)]
            for path in order:
                out[path].append(self.measure(path, dict(cmd)))
            self.log(f"  {name} rep {rep + 1}/{reps} done")
        return out

    # -- scenarios ---------------------------------------------------------------------------------

    def streaming(self) -> dict[str, Any]:
        c = self.cfg
        cmd = {"op": "stream", "streams": c.streams, "requests": c.requests, "n": c.responses}
        raw = self.interleaved("streaming", self.paths("streaming"), c.reps, cmd)
        return {"shape": f"{c.streams} streams x {c.requests} requests x {c.responses} responses", "raw": raw,
                "summary": summarise_throughput(raw)}  # fmt: skip

    def scaling(self) -> dict[str, Any]:
        c = self.cfg
        out: dict[str, Any] = {}
        for s in c.scaling:
            r, n = scaling_shape(s, c.scaling_total)
            cmd = {"op": "stream", "streams": s, "requests": r, "n": n}
            raw = self.interleaved(f"scaling {s}", self.paths("scaling"), c.scaling_reps, cmd)
            out[str(s)] = {"shape": f"{s} streams x {r} requests x {n} responses", "raw": raw,
                           "summary": summarise_throughput(raw)}  # fmt: skip
        return out

    def unary(self) -> dict[str, Any]:
        c = self.cfg
        raw = self.interleaved("unary", self.paths("unary"), c.reps, {"op": "unary", "calls": c.unary_calls})
        return {"shape": f"{c.unary_calls} sequential ModelInfer calls, 64-byte tensor", "raw": raw,
                "summary": summarise_latency(raw)}  # fmt: skip

    def large(self) -> dict[str, Any]:
        c = self.cfg
        cmd = {"op": "large", "calls": c.large_calls, "tensor_bytes": c.large_bytes}
        raw = self.interleaved("large", self.paths("large"), c.large_reps, cmd)
        return {"shape": f"{c.large_calls} sequential ModelInfer calls, {c.large_bytes / MB:.0f} MB tensor echoed",
                "raw": raw, "summary": summarise_throughput(raw, key="mb_per_s")}  # fmt: skip

    def paced(self) -> dict[str, Any]:
        c = self.cfg
        cmd = {"op": "paced", "streams": c.paced_streams, "per_stream": c.paced_per_stream, "pace_us": c.paced_pace_us}
        raw = self.interleaved("paced", self.paths("paced"), c.reps if c.reps < 3 else 3, cmd)
        rate = c.paced_streams * 1e6 / c.paced_pace_us
        return {"shape": f"{c.paced_streams} streams, {rate:.0f} responses/s paced by the upstream", "raw": raw,
                "summary": summarise_latency(raw)}  # fmt: skip

    def memory(self) -> dict[str, Any]:
        """A fresh meta proxy; clients that stop reading while the upstream streams; RSS sampled."""
        c = self.cfg
        out: dict[str, Any] = {}
        runs = [
            ("1 stream", 1, c.memory_messages),
            (f"{c.memory_multi_streams} streams", c.memory_multi_streams, c.memory_multi_messages),
        ]
        for label, streams, messages in runs:
            proc, port = procs.start_proxy(self.workdir, self.uport, "meta")
            self.procs.append(proc)
            try:
                out[label] = self._memory_run(proc, port, streams, messages)
            except Exception as e:
                self.errors.append(f"memory {label}: {e}")
                self.log(f"  ERROR memory {label}: {e}")
            finally:
                proc.stop()
                self.procs.remove(proc)
            self.log(f"  memory {label} done")
        return out

    def _memory_run(self, proc: procs.Proc, port: int, streams: int, messages: int) -> dict[str, Any]:
        c = self.cfg
        time.sleep(0.3)
        base, _ = procs.rss_mb(proc.pid)
        samples: list[tuple[float, float]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append((time.monotonic(), procs.rss_mb(proc.pid)[0]))
                stop.wait(0.05)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        c0 = proc.cpu()
        t0 = time.monotonic()
        t_drain = None
        self.worker.send({"op": "stall", "target": f"127.0.0.1:{port}", "streams": streams, "messages": messages,
                          "msg_bytes": c.memory_msg_bytes, "stall_s": c.memory_stall_s, "drain": True,
                          "timeout_s": c.timeout_s})  # fmt: skip
        try:
            while True:
                msg = self.worker.read(c.timeout_s + c.memory_stall_s + 15)
                if msg.get("event") == "drain_start":
                    t_drain = time.monotonic()
                    continue
                if "error" in msg:
                    raise RuntimeError(msg["error"])
                res: dict[str, Any] = msg["result"]
                break
        finally:
            stop.set()
            th.join()
        t_drain = t_drain or time.monotonic()
        stall = [r for t, r in samples if t0 + 0.2 <= t <= t_drain]
        drain = [r for t, r in samples if t > t_drain]
        _, hwm = procs.rss_mb(proc.pid)
        res.update(
            rss_base_mb=base, rss_stall_max_mb=max(stall, default=None), rss_stall_last_mb=stall[-1] if stall else None,
            rss_drain_max_mb=max(drain, default=None), rss_hwm_mb=hwm, proxy_cpu_s=proc.cpu() - c0,
            samples=len(samples),
        )  # fmt: skip
        if not res["complete"] or res["received_bytes"] < res["requested_bytes"]:
            self.errors.append(f"memory: only {res['received_bytes']} of {res['requested_bytes']} bytes arrived")
        return res


# -- summaries -------------------------------------------------------------------------------------


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


# -- table and targets -----------------------------------------------------------------------------


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


# -- profile mode ------------------------------------------------------------------------------------


def profile_command(cfg: Config, scenario: str) -> dict[str, Any]:
    """The load-generator command a profile run repeats."""
    if scenario == "unary":
        return {"op": "unary", "calls": cfg.unary_calls}
    if scenario == "large":
        return {"op": "large", "calls": cfg.large_calls, "tensor_bytes": cfg.large_bytes}
    if scenario == "paced":
        return {
            "op": "paced",
            "streams": cfg.paced_streams,
            "per_stream": cfg.paced_per_stream,
            "pace_us": cfg.paced_pace_us,
        }
    return {"op": "stream", "streams": cfg.streams, "requests": cfg.requests, "n": cfg.responses}


def profile(cfg: Config, workdir: Path, profiler: str, scenario: str, payload: str, reps: int, top: int,
            log: Callable[[str], None]) -> dict[str, Any]:  # fmt: skip
    """Run one scenario (streaming by default) against one proxy under cProfile or py-spy."""
    bench = Bench(cfg, workdir, want_nginx=False, log=log)
    out: dict[str, Any] = {"profiler": profiler, "scenario": scenario, "payload": payload}
    spy: subprocess.Popen[bytes] | None = None
    try:
        bench.start(set())
        prof = workdir / "proxy.prof"
        raw = workdir / "pyspy.txt"
        module = next(iter(cfg.extra.values()), "proxy")  # --extra-proxy: profile that build instead
        out["module"] = module
        proc, port = procs.start_proxy(
            workdir, bench.uport, payload, profile=str(prof) if profiler == "cprofile" else None, module=module
        )
        bench.procs.append(proc)
        path = f"proxy-{payload}"
        bench.targets[path] = (port, proc)
        bench.measure(path, {"op": "stream", "streams": 2, "requests": 2, "n": 20})  # warm-up
        if profiler == "py-spy":
            spy_bin = Path(procs.PY).parent / "py-spy"
            spy = subprocess.Popen([str(spy_bin) if spy_bin.exists() else "py-spy", "record", "--pid", str(proc.pid),
                                    "--rate", "1000", "--gil", "--format", "raw", "--output", str(raw)],
                                   stdout=subprocess.DEVNULL, stderr=open(workdir / "pyspy.log", "wb"))  # fmt: skip
            time.sleep(1.0)
        cmd = profile_command(cfg, scenario)
        runs = [bench.measure(path, dict(cmd)) for _ in range(reps)]
        ok = [r for r in runs if r]
        responses = sum(r["responses"] for r in ok)
        out["responses"] = responses
        out["proxy_cpu_us_per_resp_under_profiler"] = sum(r["proxy_cpu_s"] for r in ok) / max(1, responses) * 1e6
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
            spy = None
            out.update(pyspy_top(raw, top))
        else:
            proc.stop(30)
            bench.procs.remove(proc)
            out.update(cprofile_top(prof, top))
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
            spy.wait()
        bench.stop()
    out["errors"] = bench.errors
    return out


def pyspy_top(path: Path, top: int) -> dict[str, Any]:
    """Self and inclusive sample counts per function from py-spy's collapsed-stack output."""
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = [_strip_line(f) for f in stack.split(";")]
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for f in set(frames):
            incl[f] = incl.get(f, 0) + n

    def rank(d: dict[str, int]) -> list[tuple[str, int, float]]:
        return [(k, v, 100 * v / max(1, total)) for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:top]]

    # The inclusive view leaves out the trunk every sample shares (runpy, the CLI, the event loop).
    branch = {k: v for k, v in incl.items() if not any(t in k for t in _TRUNK)}
    return {"samples": total, "self": rank(own), "inclusive": rank(branch)}


_TRUNK = ("(asyncio/", "(<frozen runpy>)", "(proxy/cli.py)", "(proxy/__main__.py)", "(threading.py)",
          "(concurrent/futures/", "(selectors.py)", "__main__.py)", "(tap_patches.py)")  # fmt: skip


def _strip_line(frame: str) -> str:
    # "func (path/file.py:123)" -> "func (file.py)"; keep the module file, drop line and venv prefix
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in where:
            where = where.split(marker, 1)[1]
    return f"{name} ({where})"


def cprofile_top(path: Path, top: int) -> dict[str, Any]:
    import pstats

    st = pstats.Stats(str(path))
    total = st.total_tt  # type: ignore[attr-defined]
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        short = file
        for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
            if marker in short:
                short = short.split(marker, 1)[1]
        rows.append((f"{func} ({short}:{line})", nc, tt, ct))
    by_self = sorted(rows, key=lambda r: -r[2])[:top]
    by_cum = sorted(rows, key=lambda r: -r[3])[:top]

    def fmt(rs: list[tuple[str, int, float, float]]) -> list[tuple[str, int, float, float, float]]:
        return [(name, calls, tt, 100 * tt / total, ct) for name, calls, tt, ct in rs]

    return {"total_s": total, "self": fmt(by_self), "cumulative": fmt(by_cum)}


def profile_table(p: dict[str, Any]) -> str:
    lines = [f"### proxy profile ({p['profiler']}, --payload {p['payload']}, {p['scenario']}; {p.get('responses', 0)} responses; "
             f"CPU under the profiler {p.get('proxy_cpu_us_per_resp_under_profiler', 0):.1f} us/response)"]  # fmt: skip
    if p["profiler"] == "py-spy":
        for title, key in (("self (leaf) samples", "self"), ("inclusive samples", "inclusive")):
            lines += [
                "",
                f"top {len(p[key])} by {title} of {p['samples']} GIL-holding samples"
                + (" (the runpy/CLI/event-loop trunk left out):" if key == "inclusive" else ":"),
                "| % | samples | function |",
                "|---|---|---|",
            ]
            lines += [f"| {pct:.1f} | {n} | `{name}` |" for name, n, pct in p[key]]
    else:
        for title, key in (("own time", "self"), ("cumulative time", "cumulative")):
            lines += ["", f"top {len(p[key])} by {title} (total {p['total_s']:.2f} s):",
                      "| own % | own s | cum s | calls | function |", "|---|---|---|---|---|"]  # fmt: skip
            lines += [
                f"| {pct:.1f} | {tt:.3f} | {ct:.3f} | {calls} | `{name}` |" for name, calls, tt, pct, ct in p[key]
            ]
    return "\n".join(lines)


# -- main --------------------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    def version(mod: str) -> str | None:
        try:
            from importlib.metadata import version as v

            return v(mod)
        except Exception:
            return None

    nginx = procs.nginx_binary()
    nginx_v = None
    if nginx:
        r = subprocess.run([nginx, "-v"], capture_output=True, text=True, timeout=10)
        nginx_v = (r.stderr or r.stdout).strip()
    return {
        "cpus": os.cpu_count(), "loadavg": os.getloadavg(), "python": platform.python_version(),
        "platform": platform.platform(), "h2": version("h2"), "grpcio": version("grpcio"),
        "protobuf": version("protobuf"), "orjson": version("orjson"), "nginx": nginx_v,
    }  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny counts, one rep: proves the harness works in seconds")
    p.add_argument("--profile", action="store_true", help="profile the proxy (meta, streaming) instead of benchmarking")
    p.add_argument(
        "--profiler",
        choices=("auto", "py-spy", "cprofile"),
        default="auto",
        help="with --profile: py-spy when installed (auto), else cProfile",
    )
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated subset of {','.join(SCENARIOS)}")
    p.add_argument("--reps", type=int, default=None, help="repetitions of each interleaved round (default 5, smoke 1)")
    p.add_argument("--no-nginx", action="store_true", help="do not run the nginx grpc_pass comparison")
    p.add_argument("--paths", default="", help=f"comma-separated subset of {','.join(ALL_PATHS)} (default: all)")
    p.add_argument(
        "--extra-proxy",
        action="append",
        default=[],
        metavar="NAME=MODULE",
        help="also measure `python -m MODULE` (same flags as `python -m proxy`, --payload meta) as path NAME, "
        "interleaved with the others: A/B a patched proxy (repeatable); with --profile: profile MODULE instead",
    )
    p.add_argument(
        "--json", type=Path, default=None, help="where to write the JSON result (default bench/results/<time>.json)"
    )
    p.add_argument(
        "--workdir", type=Path, default=None, help="keep logs and captures here (default: a temp dir, removed)"
    )
    p.add_argument(
        "--payload", choices=PAYLOADS, default="meta", help="with --profile: the proxy's payload mode (default meta)"
    )
    p.add_argument("--top", type=int, default=15, help="with --profile: how many functions to show")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = dataclasses.replace(SMOKE if args.smoke else FULL)
    if args.reps:
        cfg.reps = cfg.large_reps = cfg.scaling_reps = args.reps
    for spec in args.extra_proxy:
        name, sep, module = spec.partition("=")
        if not sep or not name or not module or name in ALL_PATHS:
            print(f"python -m bench: --extra-proxy wants NAME=MODULE with a new NAME, got {spec!r}", file=sys.stderr)
            return 2
        cfg.extra[name] = module
    if args.paths:
        cfg.only_paths = tuple(p.strip() for p in args.paths.split(",") if p.strip())
        if "direct" not in cfg.only_paths:
            cfg.only_paths = ("direct", *cfg.only_paths)
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    bad = [s for s in scenarios if s not in SCENARIOS]
    if bad:
        print(f"python -m bench: unknown scenario(s) {bad}; choose from {SCENARIOS}", file=sys.stderr)
        return 2

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    # SIGTERM to the harness: unwind through the finally blocks that stop the children.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="triton-tap-bench-")
        workdir = Path(tmp.name)
    else:
        workdir = args.workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    try:
        if args.profile:
            profiler = args.profiler
            if profiler == "auto":
                spy = Path(procs.PY).parent / "py-spy"
                profiler = (
                    "py-spy"
                    if spy.exists() or subprocess.run(["which", "py-spy"], capture_output=True).returncode == 0
                    else "cprofile"
                )
            prof_scenario = scenarios[0] if args.scenarios != ",".join(SCENARIOS) else "streaming"
            if prof_scenario not in ("streaming", "unary", "large", "paced"):
                print(
                    f"python -m bench: --profile runs streaming, unary, large or paced, not {prof_scenario}",
                    file=sys.stderr,
                )
                return 2
            p = profile(cfg, workdir, profiler, prof_scenario, args.payload, reps=args.reps or (2 if args.smoke else 5),
                        top=args.top, log=log)  # fmt: skip
            print(profile_table(p))
            result: dict[str, Any] = {"mode": "profile", "profile": p, "environment": environment()}
            code = 1 if p["errors"] else 0
        else:
            result, code = run_bench(cfg, scenarios, workdir, not args.no_nginx, args.smoke, log)
        result["elapsed_s"] = time.time() - started
        out = (
            args.json
            or RESULTS
            / f"{time.strftime('%Y%m%dT%H%M%S')}{'-smoke' if args.smoke else ''}{'-profile' if args.profile else ''}.json"
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1, default=str))
        print(f"\nJSON result: {out}  ({result['elapsed_s']:.0f} s)")
        return code
    except KeyboardInterrupt:
        print("interrupted: processes stopped", file=sys.stderr)
        return 130
    finally:
        if tmp is not None:
            tmp.cleanup()


def run_bench(cfg: Config, scenarios: list[str], workdir: Path, want_nginx: bool, smoke: bool,
              log: Callable[[str], None]) -> tuple[dict[str, Any], int]:  # fmt: skip
    paths: set[str] = set()
    for s in scenarios:
        paths |= set(cfg.paths.get(s, ()))
    if cfg.only_paths:
        paths &= set(cfg.only_paths)
    if "memory" in scenarios:
        paths.add("direct")
    bench = Bench(cfg, workdir, want_nginx, log)
    results: dict[str, Any] = {"mode": "smoke" if smoke else "full", "config": dataclasses.asdict(cfg),
                               "environment": environment(), "scenarios": {}}  # fmt: skip
    try:
        bench.start(paths)
        for s in scenarios:
            log(f"scenario {s} ...")
            results["scenarios"][s] = getattr(bench, s)()
    finally:
        bench.stop()
    results["notes"] = bench.notes
    results["errors"] = bench.errors
    results["targets"] = targets(results)
    print(f"## triton-tap bench ({results['mode']}; {results['environment']['cpus']} CPUs; "
          f"load average at start {results['environment']['loadavg'][0]:.2f})\n")  # fmt: skip
    print(table(results))
    print(targets_table(results["targets"]))
    if smoke:
        print("(smoke: counts too small for the figures to mean anything; this run only proves the harness works)")
    for n in bench.notes:
        print(f"note: {n}")
    for e in bench.errors:
        print(f"ERROR: {e}")
    return results, (1 if bench.errors else 0)

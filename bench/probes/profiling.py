"""``python -m bench --profile``: one scenario against one proxy under py-spy or cProfile, and its top table."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import procs
from bench.harness.config import MODULE_PATHS, Config
from bench.harness.scenarios import Bench
from bench.probes import nativeprof


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


def native_profile(cfg: Config, workdir: Path, scenario: str, payload: str, reps: int,
                   log: Callable[[str], None]) -> dict[str, Any]:  # fmt: skip
    """``--profiler perf``: the proxy (or the ``--extra-proxy`` module) and the floor, each under ``perf
    record`` for ``reps`` runs of one scenario (bench/probes/nativeprof.py)."""
    bench = Bench(cfg, workdir, want_nginx=False, log=log)
    out: dict[str, Any] = {"profiler": "perf", "scenario": scenario, "payload": payload}
    try:
        bench.start(set())
        pids: dict[str, int] = {}
        module = next(iter(cfg.extra.values()), "proxy")
        for name, mod in ((f"proxy-{payload}", module), ("floor", MODULE_PATHS["floor"])):
            proc, port = procs.start_proxy(workdir, bench.uport, payload, module=mod, name=name)
            bench.procs.append(proc)
            bench.targets[name] = (port, proc)
            bench.measure(name, {"op": "stream", "streams": 2, "requests": 2, "n": 20})  # warm-up
            pids[name] = proc.pid
        cmd = profile_command(cfg, scenario)

        def run(name: str) -> tuple[int, float]:
            runs = [r for r in (bench.measure(name, dict(cmd)) for _ in range(reps)) if r]
            return sum(r["responses"] for r in runs), sum(r["proxy_cpu_s"] for r in runs)

        out["paths"] = nativeprof.profile_paths(pids, run, workdir, log)
    finally:
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
    if p["profiler"] == "perf":
        return nativeprof.table(p)
    lines = [f"### proxy profile ({p['profiler']}, --payload {p['payload']}, {p['scenario']}; {p.get('responses', 0)} responses; "
             f"CPU under the profiler {p.get('proxy_cpu_us_per_resp_under_profiler', 0):.1f} us/response)"]  # fmt: skip
    if "system_us_per_resp" in p:
        lines.append(f"(CPU per response, user / system: {p['user_us_per_resp']:.1f} / {p['system_us_per_resp']:.1f} us)")
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

"""The triton-tap benchmark harness: ``python -m bench`` (see bench/README.md).

Starts a fast fake Triton (``bench.harness.fake_upstream``), the load generator
(``bench.harness.loadgen``), one proxy per payload mode (``python -m proxy``), the Python floor
(``bench.harness.floor``) and nginx ``grpc_pass`` when nginx is installed, each in its own process;
runs every scenario over every path interleaved (rep 1: A B C, rep 2: B C A, ...), measures wall time
in the load generator and CPU time of each process from /proc; prints the targets table (the proxy
beside nginx and the floor) and the scenarios' tables of medians and ratios to direct, and writes a
results file to ``bench/results/``. Every process it starts is stopped on the way out (Ctrl-C
included). ``--render FILE`` prints the targets table of a results file instead of running.

This module is the command line; the rest of the harness: ``config`` (paths, scenarios, sizes),
``scenarios`` (the processes and the measurements), ``summary`` (medians, ratios and the targets),
``tables`` (markdown), ``procs`` (starting and stopping processes). ``--profile`` and the
perf_analyzer scenarios are probes (``bench.probes``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import procs
from bench.harness.config import (
    ALL_PATHS,
    FULL,
    HTTP_SCENARIOS,
    PA_SCENARIOS,
    PAYLOADS,
    RESULTS,
    SCENARIOS,
    SMOKE,
    TRITON_HTTP_SCENARIOS,
    Config,
)
from bench.harness.scenarios import Bench
from bench.harness.summary import targets
from bench.harness.tables import heading, pa_table, render, table, targets_table
from bench.probes import nativeprof, perfa
from bench.probes.profiling import native_profile, profile, profile_table


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


def commit() -> str | None:
    """The short commit of the checkout being measured (None outside git), with ``+`` when it has changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=procs.REPO, capture_output=True,
                              text=True, timeout=10)  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=procs.REPO,
                               capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny counts, one rep: proves the harness works in seconds")
    p.add_argument("--profile", action="store_true", help="profile the proxy (meta, streaming) instead of benchmarking")
    p.add_argument(
        "--profiler",
        choices=("auto", "py-spy", "cprofile", "perf"),
        default="auto",
        help="with --profile: py-spy when installed (auto), else cProfile; perf: Linux perf, the proxy beside the floor, by part of the process (kernel, interpreter, uvloop, C modules)",
    )
    p.add_argument("--scenarios", default=",".join(SCENARIOS),
                   help=f"comma-separated subset of {','.join(SCENARIOS)} (the default), or of "
                   f"{','.join(PA_SCENARIOS + TRITON_HTTP_SCENARIOS)} (real tritonserver, only when named)")
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
    p.add_argument("--render", type=Path, default=None, metavar="RESULTS",
                   help="print the targets table of a results file (as docs/benchmarks.md shows it) and exit")  # fmt: skip
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render is not None:
        try:
            print(render(json.loads(args.render.read_text())), end="")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            print(f"python -m bench: --render {args.render}: not a readable results file ({e})", file=sys.stderr)
            return 2
        return 0
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
    known = SCENARIOS + PA_SCENARIOS + TRITON_HTTP_SCENARIOS
    bad = [s for s in scenarios if s not in known]
    if bad:
        print(f"python -m bench: unknown scenario(s) {bad}; choose from {known}", file=sys.stderr)
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
    stamp = {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)), "commit": commit()}
    try:
        if args.profile:
            p = run_profile(args, cfg, scenarios, workdir, log)
            if p is None:
                return 2
            print(profile_table(p))
            result: dict[str, Any] = {"mode": "profile", "profile": p, "environment": environment()}
            code = 1 if p["errors"] else 0
        else:
            result, code = run_bench(cfg, scenarios, workdir, not args.no_nginx, args.smoke, log, stamp)
        result = {**stamp, **result, "elapsed_s": time.time() - started}
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


def run_profile(
    args: argparse.Namespace, cfg: Config, scenarios: list[str], workdir: Path, log: Callable[[str], None]
) -> dict[str, Any] | None:
    """``--profile``: the profiler and scenario chosen, then the profile run (None: a bad scenario, said on stderr)."""
    profiler = args.profiler
    if profiler == "auto":
        spy = Path(procs.PY).parent / "py-spy"
        profiler = (
            "py-spy"
            if spy.exists() or subprocess.run(["which", "py-spy"], capture_output=True).returncode == 0
            else "cprofile"
        )
    prof_scenario = scenarios[0] if args.scenarios != ",".join(SCENARIOS) else "streaming"
    if profiler == "perf" and nativeprof.perf_binary() is None:
        print("python -m bench: --profiler perf needs Linux perf (apt-get install -y linux-perf)", file=sys.stderr)
        return None
    if prof_scenario == "perf_analyzer":
        if profiler == "perf":
            return perfa.native_profile(perfa.PaConfig(), workdir, log)
        if profiler != "py-spy":
            # The proxy there is a process of its own, attached to: cProfile cannot be.
            print("python -m bench: --profile of perf_analyzer needs py-spy (pip install py-spy) or --profiler perf",
                  file=sys.stderr)  # fmt: skip
            return None
        return perfa.profile(perfa.PaConfig(), workdir, args.top, log)
    if prof_scenario not in ("streaming", "unary", "large", "paced"):
        print(
            f"python -m bench: --profile runs streaming, unary, large, paced or perf_analyzer, not {prof_scenario}",
            file=sys.stderr,
        )
        return None
    reps = args.reps or (2 if args.smoke else 5)
    if profiler == "perf":
        return native_profile(cfg, workdir, prof_scenario, args.payload, reps, log)
    return profile(cfg, workdir, profiler, prof_scenario, args.payload, reps=reps, top=args.top, log=log)


def run_bench(cfg: Config, scenarios: list[str], workdir: Path, want_nginx: bool, smoke: bool,
              log: Callable[[str], None], stamp: dict[str, Any]) -> tuple[dict[str, Any], int]:  # fmt: skip
    pa_scenarios = [s for s in scenarios if s in PA_SCENARIOS]
    scenarios = [s for s in scenarios if s not in PA_SCENARIOS]
    paths: set[str] = set()
    http_paths: set[str] = set()
    triton_paths: set[str] = set()
    for s in scenarios:
        group = http_paths if s in HTTP_SCENARIOS else triton_paths if s in TRITON_HTTP_SCENARIOS else paths
        group.update(cfg.paths.get(s, ()))
    if cfg.only_paths:
        paths &= set(cfg.only_paths)
        http_paths &= set(cfg.only_paths)
        triton_paths &= set(cfg.only_paths)
    if "memory" in scenarios:
        paths.add("direct")
    bench = Bench(cfg, workdir, want_nginx, log)
    results: dict[str, Any] = {**stamp, "mode": "smoke" if smoke else "full", "config": dataclasses.asdict(cfg),
                               "environment": environment(), "scenarios": {}}  # fmt: skip
    try:
        if scenarios:
            bench.start(paths, http_paths, triton_paths)
        for s in scenarios:
            log(f"scenario {s} ...")
            results["scenarios"][s] = getattr(bench, s)()
    finally:
        bench.stop()
    if pa_scenarios:
        pa_cfg = perfa.PaConfig(rounds=1, measurement_ms=1000) if smoke else perfa.PaConfig(rounds=cfg.reps)
        pa_res, notes, errors = perfa.run(pa_scenarios, pa_cfg, workdir, want_nginx, log, cfg.extra)
        results["scenarios"].update(pa_res)
        bench.notes += notes
        bench.errors += errors
    results["notes"] = bench.notes
    results["errors"] = bench.errors
    results["targets"] = targets(results)
    print(f"## triton-tap bench\n\n{heading(results)}")
    print(targets_table(results["targets"]))
    print(table(results))
    if pa_scenarios:
        print(pa_table(results["scenarios"]))
    if smoke:
        print("(smoke: counts too small for the figures to mean anything; this run only proves the harness works)")
    for n in bench.notes:
        print(f"note: {n}")
    for e in bench.errors:
        print(f"ERROR: {e}")
    return results, (1 if bench.errors else 0)

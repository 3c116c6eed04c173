"""NVIDIA perf_analyzer against the real CPU tritonserver: direct, through the proxy, the floor and nginx.

Two scenarios, neither in the default run (they need perf_analyzer and start a real Triton):

* ``perf_analyzer``: perf_analyzer ``--streaming --concurrency-range 4`` on our decoupled ``tokens``
  model (20 text responses + the empty final per request, no delay) direct, through ``python -m
  proxy`` (``triton-tap record`` with its defaults: ``--payload meta``, zstd capture) and through
  nginx ``grpc_pass``, in interleaved rounds (order rotated each round);
* ``pa_workers``: ``record --workers 1`` against ``--workers 2`` (and direct), perf_analyzer at a
  higher concurrency with one connection per context (``TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT=1``)
  so ``SO_REUSEPORT`` has several connections to spread.

Figures: perf_analyzer's own "Response Throughput" (responses/s of its stable window) and the
ratio to direct of the same round; CPU per response of the proxy (all its processes, from /proc),
of Triton (server + Python stub) and of perf_analyzer (its rusage), divided by the responses Triton
sent during the whole run (completed requests from Triton's metrics x 20, the responses perf_analyzer
counts; the empty final is one more message per request, not counted). For each relay (proxy, floor,
nginx) also where its CPU goes per response: user and system time (/proc), and, where ``perf stat``
can count the kernel's tracepoints (root, or a permissive ``perf_event_paranoid``), its system calls,
context switches and futex calls (the hand-overs between its threads: the capture writer's). perf_analyzer runs with
``--stability-percentage 100``: on a shared 2-core machine a tighter window often never settles
(perf_analyzer then prints no figure at all); the interleaved rounds are what cancels the noise.

perf_analyzer is found in ``$PERF_ANALYZER``, else ``.venv-pa/bin/perf_analyzer`` in this checkout
(the venv ``.ci/run`` installs it in: docs/testing.md), else ``/work/pa-venv/bin/perf_analyzer`` (the
integrator's venv, same recipe), else on ``PATH``; without it both scenarios are skipped with one line. Its CUDA runtime library is looked up next to it
(``<venv>/lib/python3*/site-packages/nvidia/cuda_runtime/lib``) and put on ``LD_LIBRARY_PATH``.
"""

from __future__ import annotations

import functools
import json
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.harness import procs
from bench.harness.config import MODULE_PATHS
from bench.harness.summary import median

if TYPE_CHECKING:  # imported where a server is started: the module stays light to import
    from proxy.lab.tritonserver import TritonServer

PA_ENV = "PERF_ANALYZER"
#: Where ``.ci/run`` installs it: its own venv in the checkout (it needs tritonclient 2.51, the project a newer one).
PA_REPO = Path(__file__).resolve().parents[2] / ".venv-pa" / "bin" / "perf_analyzer"
PA_DEFAULT = Path("/work/pa-venv/bin/perf_analyzer")
#: Where :func:`find_perf_analyzer` looks, for skip messages.
PA_WHERE = f"${PA_ENV}, {PA_REPO}, {PA_DEFAULT} or PATH"
MODEL = "tokens"
TOKENS = 20
#: Responses per request as perf_analyzer counts them ("Response Throughput" = 20 x requests/s): the
#: texts, not the empty final (one more message on the wire per request, not counted here).
RESPONSES_PER_REQUEST = TOKENS

#: What ``perf stat`` counts in each relay's processes during a round (key in the results -> perf event).
HANDOVER_EVENTS = {
    "syscalls": "raw_syscalls:sys_enter",
    "switches": "context-switches",
    "futex": "syscalls:sys_enter_futex",
}

_RESP = re.compile(r"Response Throughput:\s*([0-9.]+)")
_THRU = re.compile(r"^\s*Throughput:\s*([0-9.]+)\s*infer/sec", re.M)
_SUCCESS = re.compile(r'^nv_inference_request_success\{[^}]*model="' + MODEL + r'"[^}]*\}\s+([0-9.e+]+)', re.M)


def find_perf_analyzer() -> Path | None:
    """``$PERF_ANALYZER``, else the checkout's ``.venv-pa``, else the default venv's binary, else
    ``perf_analyzer`` on PATH. Run it with :func:`pa_environment` (its CUDA runtime library)."""
    env = os.environ.get(PA_ENV)
    if env:
        return Path(env) if Path(env).is_file() else None
    for known in (PA_REPO, PA_DEFAULT):
        if known.is_file():
            return known
    found = shutil.which("perf_analyzer")
    return Path(found) if found else None


def pa_environment(binary: Path, share_count: int | None = None) -> dict[str, str]:
    """perf_analyzer's environment: its venv's CUDA runtime on LD_LIBRARY_PATH (it links libcudart)."""
    env = dict(os.environ)
    libs = [str(p) for p in binary.resolve().parent.parent.glob("lib/python3*/site-packages/nvidia/cuda_runtime/lib")]
    if env.get("LD_LIBRARY_PATH"):
        libs.append(env["LD_LIBRARY_PATH"])
    if libs:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
    if share_count is not None:
        # tritonclient's C++ gRPC client shares one channel (connection) among up to 6 clients by default.
        env["TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT"] = str(share_count)
    return env


@dataclass
class PaConfig:
    """Sizes of the perf_analyzer scenarios."""

    rounds: int = 3
    concurrency: int = 4
    workers_concurrency: int = 12
    measurement_ms: int = 3000
    timeout_s: float = 240.0


def parse_output(text: str) -> dict[str, float | None]:
    """perf_analyzer's summary: requests/s and responses/s of its (last) stable measurement."""
    resp = _RESP.findall(text)
    thru = _THRU.findall(text)
    return {"responses_per_s": float(resp[-1]) if resp else None, "requests_per_s": float(thru[-1]) if thru else None}


def completed_requests(metrics_url: str) -> float:
    """Requests of ``tokens`` Triton completed so far (its Prometheus counter)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(metrics_url, timeout=10) as r:
        text = r.read().decode()
    return sum(float(x) for x in _SUCCESS.findall(text))


def parse_perf_stat(text: str) -> dict[str, float]:
    """``perf stat -x ,``'s counts by :data:`HANDOVER_EVENTS` key; an event it could not count is left out."""
    by_event = {event: key for key, event in HANDOVER_EVENTS.items()}
    out: dict[str, float] = {}
    for line in text.splitlines():
        cells = line.split(",")
        if len(cells) < 3 or cells[2] not in by_event:
            continue
        try:  # "<not counted>", "<not supported>": no figure
            out[by_event[cells[2]]] = float(cells[0])
        except ValueError:
            continue
    return out


@functools.cache
def perf_counts() -> bool:
    """Whether ``perf stat`` counts every :data:`HANDOVER_EVENTS` event here (asked once)."""
    perf = shutil.which("perf")
    if perf is None:
        return False
    run = subprocess.run([perf, "stat", "-x", ",", "-e", ",".join(HANDOVER_EVENTS.values()), "true"],
                         capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    return run.returncode == 0 and parse_perf_stat(run.stderr).keys() == HANDOVER_EVENTS.keys()


class Counting:
    """``perf stat`` attached to ``pids`` from construction to :meth:`stop` (the counts, by key).

    Construction returns once perf counts: perf starts with its events disabled, is told to enable them
    over a control pipe, and acknowledges. Without that, attaching takes a few ms to much longer on a
    loaded machine, and the first work (or a SIGINT that came before perf's handler: no counts at all)
    went uncounted."""

    #: How long perf may take to attach and acknowledge before the counts are given up (stop() gives {}).
    ATTACH_S = 30.0

    def __init__(self, pids: list[int]) -> None:
        perf = shutil.which("perf") or "perf"
        ctl_r, ctl_w = os.pipe()
        ack_r, ack_w = os.pipe()
        got = b""
        try:
            self._p = subprocess.Popen([perf, "stat", "-x", ",", "-e", ",".join(HANDOVER_EVENTS.values()),
                                        "-D", "-1", "--control", f"fd:{ctl_r},{ack_w}", "-p", ",".join(map(str, pids))],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                       pass_fds=(ctl_r, ack_w))  # fmt: skip
            os.close(ctl_r)
            os.close(ack_w)
            ctl_r = ack_w = -1
            os.write(ctl_w, b"enable\n")
            deadline = time.monotonic() + self.ATTACH_S
            while b"ack" not in got and self._p.poll() is None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([ack_r], [], [], left)[0]:
                    break
                chunk = os.read(ack_r, 64)
                if not chunk:
                    break
                got += chunk
        finally:
            for fd in (ctl_r, ctl_w, ack_r, ack_w):
                if fd >= 0:
                    os.close(fd)
        #: perf said it counts: counts from a perf that did not are from no known start, so none are given.
        self.counting = b"ack" in got

    def stop(self) -> dict[str, float]:
        """SIGINT (perf stat then prints its counts) and the counts; {} when perf ended without them or never
        acknowledged that it counts."""
        if self._p.poll() is None:
            self._p.send_signal(signal.SIGINT)
        try:
            _, err = self._p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self._p.kill()
            self._p.communicate()
            return {}
        return parse_perf_stat(err) if self.counting else {}


class PaBench:
    """One Triton, the proxies and nginx in front of it, and perf_analyzer runs through each."""

    def __init__(self, pa: Path, cfg: PaConfig, workdir: Path, log: Callable[[str], None]) -> None:
        self.pa = pa
        self.cfg = cfg
        self.workdir = workdir
        self.log = log
        self.procs: list[procs.Proc] = []
        self._own_triton: TritonServer | None = None
        self.targets: dict[str, tuple[int, procs.Proc | None]] = {}
        self.errors: list[str] = []
        self.notes: list[str] = []
        self.runs = 0
        self.input = workdir / "pa-input.json"
        self.input.write_text(json.dumps({"data": [{"PROMPT": ["hi"], "MAX_TOKENS": [TOKENS], "DELAY_MS": [0]}]}))

    def start_triton(self) -> None:
        from proxy.lab.tritonserver import TritonServer, model_repository

        server = TritonServer(model_repository(), self.workdir / "triton", log_verbose=0)
        self._own_triton = server  # stopped by stop(), even when start() fails half-way
        server.start()
        self.use_triton(server)

    def use_triton(self, server: TritonServer) -> None:
        """Measure against ``server`` (running, serving proxy/lab/models); :meth:`stop` leaves one it did not start."""
        self.triton = server
        self.targets["direct"] = (int(server.grpc_url.rsplit(":", 1)[1]), None)

    def add_proxy(self, name: str, *extra: str, module: str = "proxy") -> None:
        port = procs.free_port()
        cap = self.workdir / f"capture-{name}-{port}"
        argv = [procs.PY, "-m", module, "--listen", f"127.0.0.1:{port}", "--upstream", self.triton.grpc_url,
                "--capture-dir", str(cap), "--log-level", "warning", *extra]  # fmt: skip
        proc = procs.Proc(name, argv, log=self.workdir / f"{name}-{port}.log")
        self.procs.append(proc)
        procs.wait_port(port, 30, proc.p)
        self.targets[name] = (port, proc)

    def add_nginx(self) -> None:
        if procs.nginx_binary() is None:
            self.notes.append("nginx: skipped, not installed (apt-get install -y nginx)")
            return
        proc, port = procs.start_nginx(self.workdir, self.targets["direct"][0])
        self.procs.append(proc)
        self.targets["nginx"] = (port, proc)

    def stop(self) -> None:
        procs.stop_all(self.procs, self.errors)
        if self._own_triton is not None:
            self._own_triton.stop()

    def run_pa(self, path: str, concurrency: int, share_count: int | None,
               warmup: bool = False) -> dict[str, Any] | None:  # fmt: skip
        """One perf_analyzer run through ``path``: its figures and everyone's CPU per response."""
        port, proc = self.targets[path]
        cmd = [str(self.pa), "-m", MODEL, "-i", "grpc", "-u", f"127.0.0.1:{port}", "--streaming",
               "--input-data", str(self.input), "--concurrency-range", str(concurrency),
               "--measurement-interval", str(500 if warmup else self.cfg.measurement_ms),
               "--stability-percentage", "100", "--max-trials", "3" if warmup else "8"]  # fmt: skip
        assert self.triton.pid is not None
        triton_pid = self.triton.pid
        us0 = proc.user_system() if proc else (0.0, 0.0)
        t0 = procs.cpu_seconds(procs.tree(triton_pid))
        r0 = completed_requests(self.triton.metrics_url)
        # Attached before perf_analyzer starts (it connects and asks for the model's metadata before any request).
        counting = Counting(procs.tree(proc.pid)) if proc and not warmup and perf_counts() else None
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        w0 = time.monotonic()
        try:
            out = subprocess.run(cmd, env=pa_environment(self.pa, share_count), capture_output=True, text=True,
                                 timeout=self.cfg.timeout_s, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            if counting is not None:
                counting.stop()
            if warmup:
                return None
            self.errors.append(f"perf_analyzer via {path}: no result in {self.cfg.timeout_s:.0f} s")
            return None
        wall = time.monotonic() - w0
        handovers = counting.stop() if counting is not None else {}
        us1 = proc.user_system() if proc else (0.0, 0.0)
        self.runs += 1
        (self.workdir / f"pa-{self.runs:02d}-{path}{'-warmup' if warmup else ''}.log").write_text(out.stdout + out.stderr)
        if warmup:
            return None
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        requests = completed_requests(self.triton.metrics_url) - r0
        res: dict[str, Any] = {
            **parse_output(out.stdout), "exit": out.returncode, "wall_s": wall, "requests": requests,
            "responses": requests * RESPONSES_PER_REQUEST, "proxy_cpu_s": (us1[0] - us0[0]) + (us1[1] - us0[1]),
            "triton_cpu_s": procs.cpu_seconds(procs.tree(triton_pid)) - t0,
            "pa_cpu_s": (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime),
            **({"proxy_user_s": us1[0] - us0[0], "proxy_sys_s": us1[1] - us0[1]} if proc else {}),
            **handovers,
        }  # fmt: skip
        # Exit 2: perf_analyzer found no stable window on this busy machine; its last window still counts.
        if res["responses_per_s"] is None:
            self.errors.append(f"perf_analyzer via {path} exited {out.returncode}: {(out.stdout + out.stderr)[-600:]}")
            return None
        if proc is not None and not proc.alive():
            self.errors.append(f"{path} died: {proc.log_tail(500)}")
        return res

    def interleaved(self, name: str, paths: list[str], concurrency: int,
                    share_count: int | None) -> dict[str, list[dict[str, Any] | None]]:  # fmt: skip
        out: dict[str, list[dict[str, Any] | None]] = {p: [] for p in paths}
        # Warm-up (not counted): the Python stub's first requests and every path's first connection.
        for path in paths:
            self.run_pa(path, concurrency, share_count, warmup=True)
        for rnd in range(self.cfg.rounds):
            order = paths[rnd % len(paths) :] + paths[: rnd % len(paths)]
            for path in order:
                out[path].append(self.run_pa(path, concurrency, share_count))
            self.log(f"  {name} round {rnd + 1}/{self.cfg.rounds} done")
        return out


def summarise(raw: dict[str, list[dict[str, Any] | None]]) -> dict[str, Any]:
    """Medians per path; the ratio is the median of per-round ratios to direct (paired)."""
    base = raw.get("direct", [])
    out: dict[str, Any] = {}
    for path, runs in raw.items():
        ok = [r for r in runs if r is not None]

        def per_resp(key: str, rs: list[dict[str, Any]] = ok, scale: float = 1e6) -> float | None:
            return median([r[key] / r["responses"] * scale for r in rs if r["responses"] and key in r])

        ratios = [a["responses_per_s"] / b["responses_per_s"]
                  for a, b in zip(runs, base, strict=False) if a is not None and b is not None]  # fmt: skip
        out[path] = {
            "responses_per_s": median([r["responses_per_s"] for r in ok]),
            "ratio": median(ratios) if "direct" in raw else None,
            # The rounds' spread: on this VM one round's ratio moves by +-0.1, as much as the targets' margins.
            "ratio_range": [min(ratios), max(ratios)] if ratios and "direct" in raw else None,
            "proxy_cpu_us_per_resp": per_resp("proxy_cpu_s") if path != "direct" else None,
            "triton_cpu_us_per_resp": per_resp("triton_cpu_s"),
            "pa_cpu_us_per_resp": per_resp("pa_cpu_s"),
            # Where the relay's CPU goes (rounds that measured it): user and system time, and counts per response.
            "user_us_per_resp": per_resp("proxy_user_s"),
            "sys_us_per_resp": per_resp("proxy_sys_s"),
            **{f"{key}_per_resp": per_resp(key, scale=1.0) for key in HANDOVER_EVENTS},
            "unstable": sum(1 for r in ok if r["exit"] != 0),
            "runs": len(ok),
        }
    return out


def run(scenarios: list[str], cfg: PaConfig, workdir: Path, want_nginx: bool,
        log: Callable[[str], None], extra: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str], list[str]]:  # fmt: skip
    """The perf_analyzer scenarios asked for: (results by scenario, notes, errors). ``extra``: more proxies
    (path name -> module run as ``python -m``, as ``--extra-proxy``) in the perf_analyzer scenario."""
    pa = find_perf_analyzer()
    if pa is None:
        why = f"${PA_ENV} is not a file" if os.environ.get(PA_ENV) else f"not at {PA_REPO}, {PA_DEFAULT} nor on PATH"
        note = f"perf_analyzer: skipped, not found ({why}; set {PA_ENV}=/path/to/perf_analyzer)"
        log(note)
        return {}, [note], []
    b = PaBench(pa, cfg, workdir, log)
    results: dict[str, Any] = {}
    try:
        b.start_triton()
        if "perf_analyzer" in scenarios:
            b.add_proxy("proxy")
            b.add_proxy("floor", module=MODULE_PATHS["floor"])  # the Python floor (bench/harness/floor.py)
            paths = ["direct", "proxy", "floor"]
            for name, module in (extra or {}).items():
                b.add_proxy(name, module=module)
                paths.append(name)
            if want_nginx:
                b.add_nginx()
                paths += ["nginx"] if "nginx" in b.targets else []
            log("scenario perf_analyzer ...")
            raw = b.interleaved("perf_analyzer", paths, cfg.concurrency, None)
            results["perf_analyzer"] = {"shape": f"--streaming, concurrency {cfg.concurrency}, {TOKENS} responses "
                                        "+ empty final per request", "raw": raw, "summary": summarise(raw)}  # fmt: skip
        if "pa_workers" in scenarios:
            b.add_proxy("proxy-w1", "--workers", "1")
            b.add_proxy("proxy-w2", "--workers", "2")
            log("scenario pa_workers ...")
            raw = b.interleaved("pa_workers", ["direct", "proxy-w1", "proxy-w2"], cfg.workers_concurrency, 1)
            results["pa_workers"] = {"shape": f"--streaming, concurrency {cfg.workers_concurrency}, one connection "
                                     "per context", "raw": raw, "summary": summarise(raw)}  # fmt: skip
            b.stop()  # the workers' files are complete once they exit
            results["pa_workers"]["calls_per_worker_file"] = calls_per_file(workdir, "capture-proxy-w2-*")
    except Exception as e:
        b.errors.append(f"perf_analyzer scenarios: {e}")
        log(f"  ERROR perf_analyzer scenarios: {e}")
    finally:
        b.stop()
    return results, b.notes, b.errors


def calls_per_file(workdir: Path, pattern: str) -> dict[str, dict[str, int]]:
    """Calls and client connections in each capture file under ``workdir/pattern`` (how SO_REUSEPORT spread them)."""
    import orjson

    from replay.capture.zst import ZstdLines

    out: dict[str, dict[str, int]] = {}
    for f in sorted(workdir.glob(f"{pattern}/capture-*.jsonl.zst")):
        calls: list[str] = []
        with ZstdLines(f) as lines:
            calls = [orjson.loads(line)["call"] for line in lines if b'"call_start"' in line]
        out[f.name] = {"calls": len(calls), "connections": len({c.split(".")[0] for c in calls})}
    return out


def _user_sys(pid: int) -> tuple[float, float]:
    """(utime, stime) of one process, all threads, in seconds (/proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def profile(cfg: PaConfig, workdir: Path, top: int, log: Callable[[str], None]) -> dict[str, Any] | None:
    """``--profile --scenarios perf_analyzer``: the proxy under py-spy while perf_analyzer streams through
    it (two runs after a warm-up), plus its user/system CPU split; None without perf_analyzer."""
    from bench.probes.profiling import pyspy_top

    pa = find_perf_analyzer()
    if pa is None:
        log(f"perf_analyzer: not found (set {PA_ENV}=/path/to/perf_analyzer)")
        return None
    b = PaBench(pa, cfg, workdir, log)
    out: dict[str, Any] = {"profiler": "py-spy", "scenario": "perf_analyzer", "payload": "meta", "module": "proxy"}
    spy: subprocess.Popen[bytes] | None = None
    try:
        b.start_triton()
        b.add_proxy("proxy")
        _, proc = b.targets["proxy"]
        assert proc is not None
        b.run_pa("proxy", cfg.concurrency, None, warmup=True)
        raw = workdir / "pyspy.txt"
        spy_bin = Path(procs.PY).parent / "py-spy"
        spy = subprocess.Popen([str(spy_bin) if spy_bin.exists() else "py-spy", "record", "--pid", str(proc.pid),
                                "--rate", "1000", "--gil", "--format", "raw", "--output", str(raw)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(1.0)
        u0, s0 = _user_sys(proc.pid)
        runs = [r for r in (b.run_pa("proxy", cfg.concurrency, None) for _ in range(2)) if r is not None]
        u1, s1 = _user_sys(proc.pid)
        responses = sum(r["responses"] for r in runs)
        out["responses"] = responses
        out["proxy_cpu_us_per_resp_under_profiler"] = sum(r["proxy_cpu_s"] for r in runs) / max(1, responses) * 1e6
        out["user_us_per_resp"] = (u1 - u0) / max(1, responses) * 1e6
        out["system_us_per_resp"] = (s1 - s0) / max(1, responses) * 1e6
        spy.send_signal(2)  # SIGINT: py-spy writes its output and exits
        spy.wait(30)
        spy = None
        out.update(pyspy_top(raw, top))
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
            spy.wait()
        b.stop()
    out["errors"] = b.errors
    return out


def native_profile(cfg: PaConfig, workdir: Path, log: Callable[[str], None]) -> dict[str, Any] | None:
    """``--profile --profiler perf --scenarios perf_analyzer``: the proxy and the floor, each under ``perf
    record`` for two perf_analyzer runs (bench/probes/nativeprof.py); None without perf_analyzer."""
    from bench.probes import nativeprof

    pa = find_perf_analyzer()
    if pa is None:
        log(f"perf_analyzer: not found (set {PA_ENV}=/path/to/perf_analyzer)")
        return None
    b = PaBench(pa, cfg, workdir, log)
    out: dict[str, Any] = {"profiler": "perf", "scenario": "perf_analyzer", "payload": "meta"}
    try:
        b.start_triton()
        pids: dict[str, int] = {}
        for name, module in (("proxy", "proxy"), ("floor", MODULE_PATHS["floor"])):
            b.add_proxy(name, module=module)
            b.run_pa(name, cfg.concurrency, None, warmup=True)
            proc = b.targets[name][1]
            assert proc is not None
            pids[name] = proc.pid

        def run(name: str) -> tuple[int, float]:
            runs = [r for r in (b.run_pa(name, cfg.concurrency, None) for _ in range(2)) if r is not None]
            return int(sum(r["responses"] for r in runs)), sum(r["proxy_cpu_s"] for r in runs)

        out["paths"] = nativeprof.profile_paths(pids, run, workdir, log)
    finally:
        b.stop()
    out["errors"] = b.errors
    return out

"""The processes of one benchmark run and the scenarios measured through them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import procs
from bench.harness.config import (
    ALL_PATHS,
    FLAGGED_PATHS,
    HTTP_SCENARIOS,
    MB,
    MODULE_PATHS,
    PAYLOADS,
    TRITON_HTTP_SCENARIOS,
    Config,
    scaling_shape,
)
from bench.harness.summary import summarise_latency, summarise_throughput


class Bench:
    """The processes of one run and the measurements taken through them."""

    def __init__(self, cfg: Config, workdir: Path, want_nginx: bool, log: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.workdir = workdir
        self.log = log
        self.procs: list[procs.Proc] = []
        self.targets: dict[str, tuple[int, procs.Proc | None]] = {}
        #: the HTTP scenarios' paths, to the HTTP upstream (same names as the gRPC ones)
        self.http_targets: dict[str, tuple[int, procs.Proc | None]] = {}
        #: the same paths in front of the real tritonserver's HTTP port
        self.triton_targets: dict[str, tuple[int, procs.Proc | None]] = {}
        self.triton: Any = None
        self.notes: list[str] = []
        self.errors: list[str] = []
        self.want_nginx = want_nginx

    # -- processes ---------------------------------------------------------------------------------

    def start(self, paths: set[str], http_paths: set[str] | None = None, triton_paths: set[str] | None = None) -> None:
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
        for name, (payload, flags) in FLAGGED_PATHS.items():
            if name in paths:
                proc, port = procs.start_proxy(self.workdir, self.uport, payload, name=name, flags=flags)
                self.procs.append(proc)
                self.targets[name] = (port, proc)
        for name, module in [*((n, m) for n, m in MODULE_PATHS.items() if n in paths), *self.cfg.extra.items()]:
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
        if http_paths:
            self.http_upstream, port = procs.start_http_upstream(self.workdir)
            self.procs.append(self.http_upstream)
            self._start_http(http_paths, port, self.http_targets)
        if triton_paths:
            self._start_triton(triton_paths)
        for n in self.notes:
            self.log(n)

    def _start_triton(self, paths: set[str]) -> None:
        """The real CPU tritonserver (as the perf_analyzer scenario starts it) and the paths to its HTTP port."""
        from proxy.lab.tritonserver import TritonServer, model_repository

        self.triton = TritonServer(model_repository(), self.workdir / "triton", log_verbose=0)
        self.triton.start()
        port = int(self.triton.http_url.rsplit(":", 1)[1])
        self._start_http(paths, port, self.triton_targets, label="real tritonserver ")

    def _start_http(self, paths: set[str], port: int, targets: dict[str, tuple[int, procs.Proc | None]],
                    label: str = "") -> None:  # fmt: skip
        targets["direct"] = (port, None)
        for name in sorted(p for p in paths if p.startswith("proxy-")):
            if not procs.proxy_has_http():
                self.notes.append(f"{label}HTTP {name}: skipped, `triton-tap record` has no --http-listen yet")
                continue
            proc, pport = procs.start_http_proxy(self.workdir, port, name.removeprefix("proxy-"), f"{name}-{port}")
            self.procs.append(proc)
            targets[name] = (pport, proc)
        if "nginx" in paths:
            if not self.want_nginx:
                self.notes.append("nginx proxy_pass: skipped (--no-nginx)")
            elif procs.nginx_binary() is None:
                self.notes.append("nginx proxy_pass: skipped, not installed (apt-get install -y nginx)")
            else:
                try:
                    proc, nport = procs.start_nginx_http(self.workdir, port, f"nginx-http-{port}")
                    self.procs.append(proc)
                    targets["nginx"] = (nport, proc)
                except Exception as e:
                    self.notes.append(f"{label}nginx proxy_pass: skipped, failed to start: {e}")

    def stop(self) -> None:
        procs.stop_all(self.procs, self.errors)
        if self.triton is not None:
            self.triton.stop()

    def paths(self, scenario: str) -> list[str]:
        if scenario in HTTP_SCENARIOS + TRITON_HTTP_SCENARIOS:  # --extra-proxy modules take the gRPC flags only
            names = [*self.cfg.paths[scenario]]
            targets = self.http_targets if scenario in HTTP_SCENARIOS else self.triton_targets
        else:
            names, targets = [*self.cfg.paths.get(scenario, ALL_PATHS), *self.cfg.extra], self.targets
        keep = set(self.cfg.only_paths) | set(self.cfg.extra)
        return [p for p in names if p in targets and (not self.cfg.only_paths or p in keep)]

    # -- one measurement ---------------------------------------------------------------------------

    def measure(self, path: str, cmd: dict[str, Any]) -> dict[str, Any] | None:
        upstream_cpu: Callable[[], float]
        if cmd.pop("triton", False):
            port, proc = self.triton_targets[path]
            triton_pid = self.triton.pid

            def upstream_cpu() -> float:
                return procs.cpu_seconds(procs.tree(triton_pid))  # the server and its Python model stubs
        elif cmd["op"].startswith("http_"):
            port, proc = self.http_targets[path]
            upstream_cpu = self.http_upstream.cpu
        else:
            port, proc = self.targets[path]
            upstream_cpu = self.upstream.cpu
        cmd = {**cmd, "target": f"127.0.0.1:{port}", "timeout_s": self.cfg.timeout_s}
        c0 = proc.cpu() if proc else 0.0
        u0, l0 = upstream_cpu(), self.worker.cpu()
        try:
            res = self.worker.call(cmd, self.cfg.timeout_s)
        except Exception as e:
            self.errors.append(f"{cmd['op']} via {path}: {e}")
            self.log(f"  ERROR {cmd['op']} via {path}: {e}")
            return None
        res["proxy_cpu_s"] = (proc.cpu() - c0) if proc else 0.0
        res["upstream_cpu_s"] = upstream_cpu() - u0
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

    def http_stream(self) -> dict[str, Any]:
        c = self.cfg
        cmd = {"op": "http_stream", "streams": c.http_streams, "requests": c.http_requests, "n": c.http_events}
        raw = self.interleaved("http_stream", self.paths("http_stream"), c.reps, cmd)
        return {"shape": f"{c.http_streams} keep-alive connections x {c.http_requests} generate_stream requests x "
                         f"{c.http_events} SSE events", "raw": raw, "summary": summarise_throughput(raw)}  # fmt: skip

    def http_unary(self) -> dict[str, Any]:
        c = self.cfg
        cmd = {"op": "http_unary", "calls": c.http_unary_calls}
        raw = self.interleaved("http_unary", self.paths("http_unary"), c.reps, cmd)
        return {"shape": f"{c.http_unary_calls} sequential JSON infer calls, one keep-alive connection", "raw": raw,
                "summary": summarise_latency(raw)}  # fmt: skip

    def http_triton_stream(self) -> dict[str, Any]:
        c = self.cfg
        cmd = {"op": "http_stream", "triton": True, "streams": c.triton_streams, "requests": c.triton_requests,
               "n": c.triton_tokens, "path": "/v2/models/tokens/generate_stream",
               "body": {"PROMPT": "hi", "MAX_TOKENS": c.triton_tokens, "DELAY_MS": 0}}  # fmt: skip
        paths = self.paths("http_triton_stream")
        for path in paths:  # untimed: Triton's first requests (model stubs warming) land on no path's figures
            self.measure(path, {**cmd, "streams": 1, "requests": 2})
        raw = self.interleaved("http_triton_stream", paths, c.reps, cmd)
        return {"shape": f"real tritonserver, tokens model: {c.triton_streams} keep-alive connections x "
                         f"{c.triton_requests} generate_stream requests x {c.triton_tokens} SSE events",
                "raw": raw, "summary": summarise_throughput(raw)}  # fmt: skip

    def http_triton_unary(self) -> dict[str, Any]:
        c = self.cfg
        cmd = {"op": "http_unary", "triton": True, "calls": c.triton_unary_calls, "path": "/v2/models/echo/infer",
               "inputs": [{"name": "INPUT", "datatype": "UINT8", "shape": [64], "data": [0] * 64}]}  # fmt: skip
        raw = self.interleaved("http_triton_unary", self.paths("http_triton_unary"), c.reps, cmd)
        return {"shape": f"real tritonserver, echo model: {c.triton_unary_calls} sequential JSON infer calls, "
                         "64-byte tensor", "raw": raw, "summary": summarise_latency(raw)}  # fmt: skip

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
        res["rss_peak_mb"] = max(x for x in (res["rss_stall_max_mb"], res["rss_drain_max_mb"], hwm) if x is not None)
        if not res["complete"] or res["received_bytes"] < res["requested_bytes"]:
            self.errors.append(f"memory: only {res['received_bytes']} of {res['requested_bytes']} bytes arrived")
        return res

"""Soak: many concurrent streams through a `triton-tap record` process for a long time.

Checks: every message byte-exact (SHA-256 per message, checked by the fake upstream for requests
and by the client for responses), every message recorded exactly once (per call and direction the
indices are 0..n-1 and the counts equal what the client sent and received), `seq` gap-free with
no `gap` record, and the proxy's RSS and open fds flat after warm-up.

The CI variant runs 100 streams for ~10 s. The slow one (1,000 streams, 10 minutes) runs with:

    python -m pytest -m slow tests/proxy/ops/test_soak.py -s

(`SOAK_STREAMS` / `SOAK_SECONDS` override its size; `SOAK_REPORT=path.json` writes the figures.)
The upstream is tests/support/soak_upstream.py (a fake: the real Python-backend Triton is ~1 ms
per response, far too slow to load the proxy).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from proxy.lab.tritonserver import free_port
from replay.capture import events as ev
from replay.capture.reader import read_capture
from tests.support.paths import ROOT
from tests.support.triton_client import wait_for

RESPONSES_PER_REQUEST = 3
STREAMS_PER_CHANNEL = 50


def _proc_stats(pid: int) -> tuple[int, int]:
    """(RSS bytes, open fds) of a process, from /proc."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def _connectable(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class _Counts:
    def __init__(self) -> None:
        self.sent = 0
        self.received = 0
        self.bad = 0
        self.not_ok: list[str] = []


async def _stream(stub: Any, sid: int, stop_at: float, counts: _Counts) -> None:
    rng = random.Random(sid)
    finals: asyncio.Queue[None] = asyncio.Queue()

    async def requests() -> Any:
        i = 0
        while time.monotonic() < stop_at:
            data = rng.randbytes(rng.randrange(0, 2048))
            req = pb.ModelInferRequest(model_name="soak", id=f"s{sid}-{i}")
            req.parameters["sha"].string_param = hashlib.sha256(data).hexdigest()
            req.parameters["n"].int64_param = RESPONSES_PER_REQUEST
            req.inputs.add(name="IN", datatype="UINT8", shape=[len(data)])
            req.raw_input_contents.append(data)
            counts.sent += 1
            yield req
            await finals.get()  # one request in flight per stream: bounded and steady
            i += 1

    call = stub.ModelStreamInfer(requests(), timeout=max(60.0, stop_at - time.monotonic() + 120))
    try:
        async for resp in call:
            r = resp.infer_response
            counts.received += 1
            if hashlib.sha256(r.raw_output_contents[0]).hexdigest() != r.parameters["sha"].string_param:
                counts.bad += 1
            if r.parameters["triton_final_response"].bool_param:
                finals.put_nowait(None)
    except grpc.RpcError as e:
        counts.not_ok.append(f"stream {sid}: {e.code()} {e.details()}")


async def _load(port: int, upstream_port: int, proxy_pid: int, streams: int, seconds: float) -> dict[str, Any]:
    counts = _Counts()
    samples: list[tuple[float, int, int]] = []
    t0 = time.monotonic()
    stop_at = t0 + seconds
    opts = [("grpc.use_local_subchannel_pool", 1)]  # one HTTP/2 connection per channel
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=opts) for _ in range(-(-streams // STREAMS_PER_CHANNEL))]

    async def sample() -> None:
        while True:
            samples.append((time.monotonic() - t0, *_proc_stats(proxy_pid)))
            await asyncio.sleep(1.0)

    sampler = asyncio.get_running_loop().create_task(sample(), name="soak-sampler")
    try:
        stubs = [pb_grpc.GRPCInferenceServiceStub(ch) for ch in channels]
        await asyncio.gather(*(_stream(stubs[i // STREAMS_PER_CHANNEL], i, stop_at, counts) for i in range(streams)))
    finally:
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
        for ch in channels:
            await ch.close()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{upstream_port}") as ch:
        st = await pb_grpc.GRPCInferenceServiceStub(ch).ModelInfer(pb.ModelInferRequest(model_name="__stats__"))
    return {
        "streams": streams, "seconds": seconds, "elapsed_s": time.monotonic() - t0, "sent": counts.sent,
        "received": counts.received, "client_bad_hashes": counts.bad, "not_ok": counts.not_ok,
        "upstream": {k: st.parameters[k].int64_param for k in ("requests", "bad", "responses")},
        "samples": samples,
    }  # fmt: skip


def _check_capture(capture_dir: Path, figures: dict[str, Any]) -> dict[str, Any]:
    reader = read_capture(capture_dir)
    index: dict[tuple[str, str], list[int]] = {}
    ends: dict[str, str] = {}
    starts = 0
    for _, rec in reader:
        if isinstance(rec, ev.MessageSeen):
            index.setdefault((rec.call, rec.dir), []).append(rec.index)
        elif isinstance(rec, ev.CallEnded):
            ends[rec.call] = rec.cause
        elif isinstance(rec, ev.CallStarted) and rec.method.endswith("ModelStreamInfer"):
            starts += 1
    assert reader.gaps == [], [str(g) for g in reader.gaps]  # seq gap-free, no gap record
    assert not reader.warnings, reader.warnings
    for key, idx in index.items():
        assert idx == list(range(len(idx))), f"{key}: recorded indices not 0..n-1 exactly once"
    c2s = sum(len(v) for (_, d), v in index.items() if d == "c2s")
    s2c = sum(len(v) for (_, d), v in index.items() if d == "s2c")
    assert (c2s, s2c) == (figures["sent"], figures["received"])
    assert starts == figures["streams"] and len(ends) >= starts
    assert {c for c in ends.values()} == {"ok"}, ends
    return {"records": reader.records, "files": len(reader.files), "c2s": c2s, "s2c": s2c}


def _flat(samples: list[tuple[float, int, int]], seconds: float) -> dict[str, Any]:
    """RSS and fds after warm-up (the first 30 %): no upward trend, and swings bounded.

    The proxy's RSS swings by tens of MB with the capture writer's queue between batches, so a
    single high sample is not growth: the trend is the median of the last third of the samples
    against the median of the first third (<= 16 MB), and the largest swing above the warm value
    is bounded separately (<= 64 MB). fds must not move by more than a few.
    """
    warm = [s for s in samples if s[0] >= 0.3 * seconds]
    assert len(warm) >= 6, samples
    third = len(warm) // 3
    rss0, fd0 = warm[0][1], warm[0][2]
    first = statistics.median(s[1] for s in warm[:third])
    last = statistics.median(s[1] for s in warm[-third:])
    rss_max, fd_max = max(s[1] for s in warm), max(s[2] for s in warm)
    mb = 2**20
    out = {
        "rss_start_mb": samples[0][1] / mb, "rss_warm_mb": rss0 / mb, "rss_max_mb": rss_max / mb,
        "rss_end_mb": warm[-1][1] / mb, "rss_first_third_median_mb": first / mb,
        "rss_last_third_median_mb": last / mb, "fds_warm": fd0, "fds_max": fd_max, "fds_end": warm[-1][2],
    }  # fmt: skip
    assert last - first <= 16 * mb, out
    assert rss_max - rss0 <= 64 * mb, out
    assert fd_max - fd0 <= 5, out
    return out


def _soak(tmp_path: Path, streams: int, seconds: float, rotate: bool) -> dict[str, Any]:
    up = subprocess.Popen([sys.executable, "-m", "tests.support.soak_upstream"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    proxy: subprocess.Popen[bytes] | None = None
    try:
        assert up.stdout is not None
        upstream_port = int(up.stdout.readline())
        port = free_port()
        args = [sys.executable, "-m", "proxy", "--listen", f"127.0.0.1:{port}", "--upstream", f"127.0.0.1:{upstream_port}",
                "--capture-dir", str(tmp_path / "cap"), "--payload", "meta", "--log-level", "warning"]  # fmt: skip
        if rotate:
            args += ["--rotate-mb", "64", "--gzip-rotated"]
        with (tmp_path / "proxy.log").open("wb") as log:
            proxy = subprocess.Popen(args, cwd=ROOT, stderr=log)
        wait_for(lambda: _connectable(port), timeout=30, what="the proxy to listen")
        figures = asyncio.run(_load(port, upstream_port, proxy.pid, streams, seconds))
        proxy.send_signal(signal.SIGTERM)
        assert proxy.wait(60) == 0
    finally:
        for p in (proxy, up):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
    figures["messages_per_s"] = (figures["sent"] + figures["received"]) / figures["elapsed_s"]
    report = os.environ.get("SOAK_REPORT")
    if report:  # written before any check, so a failed run still leaves its figures and samples
        Path(report).write_text(json.dumps(figures, indent=1))
    assert figures["not_ok"] == [] and figures["client_bad_hashes"] == 0
    assert figures["upstream"] == {"requests": figures["sent"], "bad": 0, "responses": figures["received"]}
    assert figures["sent"] >= streams
    figures["capture"] = _check_capture(tmp_path / "cap", figures)
    figures["memory"] = _flat(figures.pop("samples"), seconds)
    print(json.dumps(figures, indent=1))
    if report:
        Path(report).write_text(json.dumps(figures, indent=1))
    return figures


def test_soak_short(tmp_path: Path) -> None:
    """100 concurrent streams for ~10 s: byte-exact, recorded once with gap-free seq, RSS/fds flat."""
    _soak(tmp_path, streams=100, seconds=10.0, rotate=False)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_soak_long(tmp_path: Path) -> None:
    """1,000 concurrent streams for 10 minutes (SOAK_STREAMS/SOAK_SECONDS): same checks as the short soak."""
    _soak(
        tmp_path, streams=int(os.environ.get("SOAK_STREAMS", "1000")),
        seconds=float(os.environ.get("SOAK_SECONDS", "600")), rotate=True,
    )  # fmt: skip

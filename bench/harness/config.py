"""What a benchmark run measures: paths, scenarios, and the sizes of each (full and smoke)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
PAYLOADS = ("none", "meta", "full")
#: ``proxy-full``: ``--payload full`` with its default store (message bytes in a raw side file);
#: ``proxy-full-inline``: ``--payload full --payload-store inline`` (base64 inside the JSON line).
#: ``floor``: :mod:`bench.harness.floor`, a relay in Python that only passes reads on (what no proxy change can remove).
ALL_PATHS = ("direct", "proxy-none", "proxy-meta", "proxy-full", "proxy-full-inline", "floor", "nginx")
#: Proxy paths that are a payload mode plus flags: name -> (payload, extra flags).
FLAGGED_PATHS: dict[str, tuple[str, tuple[str, ...]]] = {"proxy-full-inline": ("full", ("--payload-store", "inline"))}
#: Paths that are another program taking the proxy's flags: name -> module run as ``python -m MODULE``.
MODULE_PATHS = {"floor": "bench.harness.floor"}
SCENARIOS = ("streaming", "unary", "large", "paced", "scaling", "memory", "http_stream", "http_unary")
#: Scenarios over Triton's HTTP/1.1 port (bench.harness.fake_http_upstream; nginx is ``proxy_pass`` there).
HTTP_SCENARIOS = ("http_stream", "http_unary")
#: The same over the real CPU tritonserver's HTTP port (our ``tokens`` and ``echo`` models): only when named.
TRITON_HTTP_SCENARIOS = ("http_triton_stream", "http_triton_unary")
#: The paths an HTTP scenario can take: the proxy records with ``--http-listen``/``--http-upstream``.
HTTP_PATHS = ("direct", "proxy-meta", "nginx")
#: Against the real tritonserver with NVIDIA perf_analyzer (bench.probes.perfa): only when asked for by --scenarios.
PA_SCENARIOS = ("perf_analyzer", "pa_workers")
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
    http_streams: int = 4
    http_requests: int = 25
    http_events: int = 1000  # 100k events: ~1 s direct, so /proc's 10 ms ticks do not blur CPU per event
    http_unary_calls: int = 2000
    triton_streams: int = 4
    triton_requests: int = 50  # 4000 events, ~1 s: enough 10 ms ticks for CPU per event
    triton_tokens: int = 20  # events per generate_stream request (the tokens model's MAX_TOKENS)
    triton_unary_calls: int = 500
    timeout_s: float = 300.0
    #: extra paths: name -> module run as ``python -m MODULE`` with the proxy's flags (--payload meta)
    extra: dict[str, str] = field(default_factory=dict)
    #: only these paths (empty: all)
    only_paths: tuple[str, ...] = ()
    paths: dict[str, tuple[str, ...]] = field(
        default_factory=lambda: {
            "streaming": ALL_PATHS,
            "unary": ALL_PATHS,
            "large": ("direct", "proxy-none", "proxy-meta", "proxy-full", "proxy-full-inline", "nginx"),
            "paced": ("direct", "proxy-meta", "floor", "nginx"),
            "scaling": ("direct", "proxy-meta", "nginx"),
            "http_stream": HTTP_PATHS,
            "http_unary": HTTP_PATHS,
            "http_triton_stream": HTTP_PATHS,
            "http_triton_unary": HTTP_PATHS,
        }
    )


FULL = Config()
SMOKE = Config(
    reps=1, streams=2, requests=2, responses=20, unary_calls=50, large_calls=1, large_bytes=4 * MB, large_reps=1,
    paced_streams=3, paced_per_stream=20, paced_pace_us=2000, scaling=(1, 10), scaling_total=200, scaling_reps=1,
    memory_messages=16, memory_stall_s=0.5, memory_multi_streams=2, memory_multi_messages=4, timeout_s=30,
    http_streams=2, http_requests=2, http_events=20, http_unary_calls=50, triton_streams=2, triton_requests=2,
    triton_tokens=5, triton_unary_calls=20,
)  # fmt: skip


def scaling_shape(streams: int, total: int) -> tuple[int, int]:
    """(requests per stream, responses per request) so that streams x R x N ~= total."""
    per_stream = max(1, total // streams)
    requests = max(1, min(10, per_stream // 20))
    return requests, max(1, per_stream // requests)

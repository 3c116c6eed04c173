"""The benchmark harness still runs end to end (seconds; checks it works, not the figures)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT


def test_bench_smoke(tmp_path: Path) -> None:
    """`python -m bench --smoke` exits 0 and prints the ratio table."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--workdir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "direct" in proc.stdout and "proxy-meta" in proc.stdout


def test_bench_micro_smoke() -> None:
    """`python -m bench.micro` still runs against the current relay and schema (it pokes internals)."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.micro", "--responses", "300", "--reps", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "per unary ModelInfer call" in proc.stdout and "cut one DATA frame" in proc.stdout


def test_bench_micro_cold_smoke() -> None:
    """`python -m bench.micro --cold KIB`: the relay's rows with the caches warm and with KIB evicted."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.micro", "--cold", "64", "--responses", "300", "--reps", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| nothing") or line.startswith("| 64 KiB")]
    assert len(rows) == 2 and all(float(c) > 0 for row in rows for c in row.strip("|").split("|")[1:]), proc.stdout
    assert "capture writer" not in proc.stdout  # only the relay's table


def test_bench_readers_smoke() -> None:
    """`python -m bench.probes.readers` checks one capture with both line decoders, side by side."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.probes.readers", "--records", "3000", "--compress", "zstd", "--mode", "json",
         "--decoder", "compiled,pure"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 3,000 |")]
    assert [row.split("|")[4].strip() for row in rows] == ["compiled", "pure"], proc.stdout


def test_bench_report_build_smoke(tmp_path: Path) -> None:
    """`python -m bench.probes.report_build` times the report command as a user runs it, beside the builder's parts."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.probes.report_build", "--sizes", "3000", "--keep", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "command s (cpu)" in proc.stdout and "targets at 1M records: command <= 10 s" in proc.stdout
    assert (tmp_path / "report-cli-3000.html").stat().st_size > 0  # the command's own page


def test_bench_http_smoke(tmp_path: Path) -> None:
    """`python -m bench --scenarios http_stream,http_unary`: the HTTP rows, direct and nginx proxy_pass
    (when installed), and the proxy's once `record` takes --http-listen; skipped, not passed, without it."""
    from bench.harness.procs import nginx_binary, proxy_has_http

    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--scenarios", "http_stream,http_unary", "--workdir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    tables = proc.stdout.split("### HTTP generate_stream", 1)[-1]
    stream, _, unary = tables.partition("### HTTP infer latency")
    assert unary, proc.stdout
    paths = ["direct", *(["nginx"] if nginx_binary() else [])]
    for p in paths:
        assert f"| {p} |" in stream and f"| {p} |" in unary, proc.stdout
    if nginx_binary():
        (conf,) = tmp_path.glob("nginx-http-*/nginx.conf")
        assert "proxy_buffering off;" in conf.read_text()
    if not proxy_has_http():
        assert "skipped, `triton-tap record` has no --http-listen yet" in proc.stdout
        pytest.skip("`triton-tap record` has no --http-listen yet: the proxy's HTTP rows are not measured")
    assert "| proxy-meta |" in stream and "| proxy-meta |" in unary, proc.stdout


def test_a_profile_of_perf_analyzer_without_py_spy_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """cProfile cannot attach to the proxy perf_analyzer's run starts: one line and exit 2 before anything starts
    (it was a FileNotFoundError traceback once tritonserver was up, py-spy not installed)."""
    from bench.harness.run import main

    assert main(["--profile", "--profiler", "cprofile", "--scenarios", "perf_analyzer", "--workdir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "python -m bench: --profile of perf_analyzer needs py-spy (pip install py-spy) or --profiler perf")

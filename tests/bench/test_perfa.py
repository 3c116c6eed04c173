"""The perf_analyzer probe's pure parts (bench/probes/perfa.py) and its skip without perf_analyzer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.probes import perfa
from tests.support.paths import ROOT

# What perf_analyzer 2.51 prints for a decoupled model with --streaming (trimmed).
PA_OUTPUT = """\
Request concurrency: 4
  Client:
    Request count: 349
    Throughput: 95.044 infer/sec
    Response Throughput: 1900.88 infer/sec
    Avg latency: 40316 usec (standard deviation 27335 usec)
  Server:
    Inference count: 349
Inferences/Second vs. Client Average Batch Latency
Concurrency: 4, throughput: 95.044 infer/sec, latency 40316 usec
"""


def test_parse_output_reads_both_throughputs() -> None:
    """Requests/s and responses/s are told apart (the response line also says "Throughput:")."""
    assert perfa.parse_output(PA_OUTPUT) == {"responses_per_s": 1900.88, "requests_per_s": 95.044}


def test_parse_output_of_an_unstable_run_has_no_figures() -> None:
    """perf_analyzer's "Failed to obtain stable measurement" leaves no figure to report."""
    text = "Request concurrency: 4\nFailed to obtain stable measurement.\n"
    assert perfa.parse_output(text) == {"responses_per_s": None, "requests_per_s": None}


def _run(rate: float, cpu: float, exit: int = 0) -> dict[str, float]:
    return {"responses_per_s": rate, "responses": 1000.0, "proxy_cpu_s": cpu, "triton_cpu_s": 0.5,
            "pa_cpu_s": 0.1, "exit": exit}  # fmt: skip


def test_summarise_pairs_rounds_with_direct() -> None:
    """The ratio is the median of per-round ratios (a failed round drops out), CPU per response in us."""
    raw = {
        "direct": [_run(1000, 0), _run(2000, 0), _run(1000, 0)],
        "proxy": [_run(900, 0.05), None, _run(800, 0.07, exit=2)],
    }
    s = perfa.summarise(raw)  # type: ignore[arg-type]
    assert s["proxy"]["ratio"] == pytest.approx(0.85)
    assert s["proxy"]["ratio_range"] == pytest.approx([0.8, 0.9])
    assert s["proxy"]["proxy_cpu_us_per_resp"] == pytest.approx(60.0)
    assert s["proxy"]["runs"] == 2 and s["proxy"]["unstable"] == 1
    assert s["direct"]["ratio"] == 1.0 and s["direct"]["proxy_cpu_us_per_resp"] is None
    assert s["direct"]["triton_cpu_us_per_resp"] == pytest.approx(500.0)


def test_find_perf_analyzer_honours_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$PERF_ANALYZER wins; when it names no file, there is no perf_analyzer (no fallback guessing)."""
    binary = tmp_path / "perf_analyzer"
    binary.write_text("#!/bin/sh\n")
    monkeypatch.setenv(perfa.PA_ENV, str(binary))
    assert perfa.find_perf_analyzer() == binary
    monkeypatch.setenv(perfa.PA_ENV, str(tmp_path / "missing"))
    assert perfa.find_perf_analyzer() is None


def test_pa_environment_puts_the_cuda_runtime_on_the_library_path(tmp_path: Path) -> None:
    """The venv's nvidia/cuda_runtime/lib goes first on LD_LIBRARY_PATH; the channel share count is set when asked."""
    lib = tmp_path / "lib" / "python3.11" / "site-packages" / "nvidia" / "cuda_runtime" / "lib"
    lib.mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    env = perfa.pa_environment(tmp_path / "bin" / "perf_analyzer", share_count=1)
    assert env["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(lib)
    assert env["TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT"] == "1"
    assert "TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT" not in perfa.pa_environment(tmp_path / "bin" / "x")


def test_bench_skips_perf_analyzer_scenarios_with_one_line(tmp_path: Path) -> None:
    """Without perf_analyzer the scenario is skipped with one clear line and the run still succeeds."""
    env = dict(os.environ, PERF_ANALYZER=str(tmp_path / "no-such-perf_analyzer"))
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--scenarios", "perf_analyzer", "--workdir", str(tmp_path / "w"),
         "--json", str(tmp_path / "r.json")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    skipped = [line for line in proc.stdout.splitlines() if "perf_analyzer: skipped" in line]
    assert len(skipped) == 1 and "PERF_ANALYZER" in skipped[0]


# What `perf stat -x , -e raw_syscalls:sys_enter,context-switches,syscalls:sys_enter_futex -p PID` printed
# here for a proxy (the last event as a kernel without that tracepoint prints it).
PERF_STAT = """\
143211,,raw_syscalls:sys_enter,9805120412,100.00,,
53011,,context-switches,9805120412,100.00,14.601,K/sec
<not supported>,,syscalls:sys_enter_futex,0,100.00,,
"""


def test_perf_stat_counts_are_read_by_key_and_an_uncounted_event_is_left_out() -> None:
    assert perfa.parse_perf_stat(PERF_STAT) == {"syscalls": 143211.0, "switches": 53011.0}
    assert perfa.parse_perf_stat("") == {}


def test_summarise_splits_each_relays_cpu_and_counts_per_response() -> None:
    """User and system us per response, and the kernel's counts per response, from the rounds that have
    them; a path that measured none (direct; perf unavailable) has None, not 0."""
    def run(user: float, system: float, **counts: float) -> dict[str, float]:
        return {**_run(1000, user + system), "proxy_user_s": user, "proxy_sys_s": system, **counts}

    raw = {
        "direct": [_run(1000, 0), _run(1000, 0), _run(1000, 0)],
        "proxy": [run(0.02, 0.02, syscalls=3400, switches=1300, futex=100), run(0.03, 0.01), None],
        "nginx": [run(0.004, 0.018, syscalls=3900, switches=1200, futex=0)] * 3,
    }
    s = perfa.summarise(raw)  # type: ignore[arg-type]
    assert s["proxy"]["user_us_per_resp"] == pytest.approx(25.0) and s["proxy"]["sys_us_per_resp"] == pytest.approx(15.0)
    assert s["proxy"]["syscalls_per_resp"] == pytest.approx(3.4) and s["proxy"]["switches_per_resp"] == pytest.approx(1.3)
    assert s["proxy"]["futex_per_resp"] == pytest.approx(0.1) and s["nginx"]["futex_per_resp"] == 0.0
    assert s["direct"]["user_us_per_resp"] is None and s["direct"]["syscalls_per_resp"] is None


def test_counting_attached_to_a_process_counts_its_system_calls() -> None:
    """``perf stat`` attached to a child that makes system calls until told to stop: they are counted."""
    if not perfa.perf_counts():
        pytest.skip("perf stat cannot count the kernel's tracepoints here (perf missing, or not permitted)")
    code = ("import os, sys\n"
            "for line in sys.stdin:\n"  # one line in: 20,000 system calls, then one line out
            "    for _ in range(20000): os.getppid()\n"
            "    print('done', flush=True)\n")  # fmt: skip
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        counting = perfa.Counting([child.pid])
        assert child.stdin is not None and child.stdout is not None
        for _ in range(10):  # 200,000 calls, all after perf said it counts (attaching takes a few ms, or more)
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline() == "done\n"
        counts = counting.stop()
    finally:
        child.kill()
        child.wait(timeout=30)
    assert counts.keys() == perfa.HANDOVER_EVENTS.keys()
    assert counts["syscalls"] >= 200_000 and counts["futex"] < counts["syscalls"]


_PERF_WITHOUT_ACK = """#!{python}
import signal, sys, time
def counts(*_):
    sys.stderr.write("5,,raw_syscalls:sys_enter,1,100.00,,\\n")
    sys.exit(0)
signal.signal(signal.SIGINT, counts)
time.sleep(60)
"""


def test_counts_of_a_perf_that_never_said_it_counts_are_not_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A perf that prints counts but never acknowledged enabling its events (attached late, or an old perf):
    its counts are from no known start, so none are given."""
    fake = tmp_path / "perf"
    fake.write_text(_PERF_WITHOUT_ACK.format(python=sys.executable))
    fake.chmod(0o755)
    monkeypatch.setattr("shutil.which", lambda name: str(fake))
    monkeypatch.setattr(perfa.Counting, "ATTACH_S", 0.5)
    counting = perfa.Counting([os.getpid()])
    assert not counting.counting and counting.stop() == {}


def test_the_scenario_table_has_the_split_columns_only_when_measured() -> None:
    from bench.harness.tables import pa_table

    old = {"perf_analyzer": {"shape": "s", "summary": {"direct": {"responses_per_s": 1000.0}, "proxy": {"ratio": 0.9}}}}
    assert "syscalls" not in pa_table(old)
    new = {"perf_analyzer": {"shape": "s", "summary": {
        "direct": {"responses_per_s": 1000.0},
        "proxy": {"user_us_per_resp": 23.25, "sys_us_per_resp": 17.7, "syscalls_per_resp": 3.4,
                  "switches_per_resp": 1.3, "futex_per_resp": 0.1}}}}  # fmt: skip
    lines = pa_table(new).splitlines()
    assert lines[1].endswith("| user + system us/resp | syscalls / switches / futex per resp |")
    assert lines[3].startswith("| direct |") and lines[3].endswith("| - + - | - / - / - |")
    assert lines[4].endswith("| 23.2 + 17.7 | 3.40 / 1.30 / 0.10 |")

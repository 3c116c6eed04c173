"""`triton-tap check-cancel` against the real tritonserver: does the work stop after a cancel?

Models (proxy/lab/models): `steps_serial` works inside execute() on its single instance and polls
is_cancelled() (a second request queues behind it); `steps_serial_ignore_cancel` never polls;
`tokens`/`tokens_ignore_cancel` answer from threads (no queueing); `steps_unary` is the unary
single-instance variant for request-scope (future) cancels.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proxy.cancelcheck.evidence import LogTail
from proxy.lab.tritonserver import TritonServer

# Short windows keep the suite fast. The allowance is wide (1 s, not the default 300 ms) so that a
# loaded CI machine's slow probe is not read as work going on; the ignoring models still run ~2 s
# past the cancel at --length 400 (~6 ms per step): inside the 4 s window, well beyond 1 s.
FAST = ["--length", "400", "--window", "4", "--allowance-ms", "1000"]


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    # A process of its own, as a user runs it (and the CLI's logging set-up stays out of pytest).
    return subprocess.run(
        [sys.executable, "-c", "import sys; from proxy.cli import main; sys.exit(main(sys.argv[1:]))", *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _check(*args: str) -> tuple[int, dict[str, Any]]:
    proc = _cli("check-cancel", *args, "--json")
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _cases(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["case"]: c for c in doc["cases"]}


def test_honouring_model_stops_executing_and_queued(
    triton: TritonServer, tmp_path: Path
) -> None:
    """steps_serial through the proxy: both cases work_stopped true, neighbours fine, nothing re-sent."""
    tail = LogTail(triton.log_path)
    tail.mark()
    code, doc = _check(
        "--target", triton.grpc_url, "--model", "steps_serial", "--log", str(triton.log_path),
        "--metrics", triton.metrics_url, "--through-proxy", "--capture-dir", str(tmp_path), *FAST,
    )  # fmt: skip
    cases = _cases(doc)
    assert code == 0, doc
    assert (doc["server_version"], doc["backend"], doc["method"], doc["scope"], doc["via"]) == (
        "2.51.0", "python", "stream", "stream", "proxy",
    )  # fmt: skip
    assert cases["executing"]["work_stopped"] is True and cases["queued"]["work_stopped"] is True
    ex = cases["executing"]["evidence"]
    assert any(e.startswith("[stopped] probe") for e in ex) and any(e.startswith("[stopped] log") for e in ex)
    assert any("cancel forwarded upstream" in e for e in ex)
    # The proxy's cancel record: stream scope ended both requests; the sibling had not started.
    assert "the cancel ended 2 request(s) in flight on the call: cc-exec (responded), cc-exec-sibling (no response yet)" in "".join(ex)
    assert cases["executing"]["neighbour_ok"] is True and cases["queued"]["neighbour_ok"] is True
    # Stream scope: the sibling on the same stream is listed as an expected casualty.
    assert cases["executing"]["casualties"] and "cc-exec-sibling" in cases["executing"]["casualties"][0]
    # The proxy never re-sends a cancelled request: Triton prepared each cancelled id once.
    prepared = [line for line in tail.read() if "] prepared:" in line]
    for rid in ("cc-exec", "cc-queued"):
        assert sum(f"[request id: {rid}] prepared" in line for line in prepared) == 1
    assert list(tmp_path.glob("capture-*"))


def test_ignoring_model_reports_work_that_went_on(triton: TritonServer) -> None:
    """steps_serial_ignore_cancel: both cases false, with the probe and log evidence behind it; exit 1."""
    code, doc = _check(
        "--target", triton.grpc_url, "--model", "steps_serial_ignore_cancel", "--log", str(triton.log_path), *FAST,
    )  # fmt: skip
    cases = _cases(doc)
    assert code == 1, doc
    for case in ("executing", "queued"):
        assert cases[case]["work_stopped"] is False
        assert any(e.startswith("[continued] probe") for e in cases[case]["evidence"]), cases[case]
        assert any(e.startswith("[continued] log") for e in cases[case]["evidence"]), cases[case]
    # Queued: Triton 2.51 still hands the cancelled queued request to the backend.
    assert any("still handed to the backend" in e for e in cases["queued"]["evidence"])


def test_threaded_ignoring_model_is_caught_by_the_log(triton: TritonServer) -> None:
    """tokens_ignore_cancel serves requests concurrently (probe blind): the verbose log still shows it went on."""
    code, doc = _check(
        "--target", triton.grpc_url, "--model", "tokens_ignore_cancel", "--log", str(triton.log_path),
        "--cases", "executing", *FAST,
    )  # fmt: skip
    (case,) = doc["cases"]
    assert code == 1 and case["work_stopped"] is False
    assert any(e.startswith("[info] probe: answered while") for e in case["evidence"])
    assert any(e.startswith("[continued] log") for e in case["evidence"])


def test_threaded_honouring_model_with_aio_and_no_queue(triton: TritonServer) -> None:
    """tokens via the aio client: executing true from the log's silence; queued not exercisable -> null, exit 2."""
    code, doc = _check(
        "--target", triton.grpc_url, "--model", "tokens", "--method", "aio", "--log", str(triton.log_path), *FAST,
    )  # fmt: skip
    cases = _cases(doc)
    assert (doc["method"], doc["scope"]) == ("aio", "stream")
    assert cases["executing"]["work_stopped"] is True, cases["executing"]
    assert cases["queued"]["work_stopped"] is None
    assert "not exercised" in cases["queued"]["evidence"][0]
    assert code == 2


def test_request_scope_cancel_spares_the_neighbour(triton: TritonServer) -> None:
    """steps_unary with --method future: request scope, no casualties, the neighbour completes; work stopped."""
    code, doc = _check(
        "--target", triton.grpc_url, "--model", "steps_unary", "--method", "future", *FAST,
    )  # fmt: skip
    cases = _cases(doc)
    assert code == 0, doc
    assert doc["scope"] == "request"
    assert cases["executing"]["neighbour_ok"] is True and cases["executing"]["casualties"] == []
    assert cases["executing"]["work_stopped"] is True and cases["queued"]["work_stopped"] is True
    assert any("processing start was assumed" in n for n in cases["executing"]["not_covered"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "no_such_model"], "model 'no_such_model' is not available"),
        (["--model", "echo", "--method", "future"], "give --inputs JSON"),
        (["--model", "tokens", "--inputs", '{"NOPE": [1]}'], "has no input 'NOPE'"),
        (["--model", "steps_unary"], "is not decoupled"),
    ],
)
def test_cannot_run_exits_2_with_one_line(
    triton: TritonServer, args: list[str], message: str
) -> None:
    """Unknown model, inputs the recipe cannot build, bad --inputs, wrong method: one line, exit 2."""
    proc = _cli("check-cancel", "--target", triton.grpc_url, *args)
    code, err = proc.returncode, proc.stderr
    assert code == 2
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_unreachable_target_exits_1() -> None:
    """Nothing listening at --target: one line, exit 1 (the upstream's fault, as for every command)."""
    from proxy.lab.tritonserver import free_port

    proc = _cli("check-cancel", "--target", f"127.0.0.1:{free_port()}", "--model", "tokens")
    code, err = proc.returncode, proc.stderr
    assert code == 1 and "unreachable" in err and err.count("\n") == 1


@pytest.mark.parametrize(("model", "went_on"), [("tokens", False), ("tokens_ignore_cancel", True)])
def test_record_evidence_after_a_cancel(triton: TritonServer, tmp_path: Path, model: str, went_on: bool) -> None:
    """`record --evidence metrics=,log=`: each forwarded cancel gets log and metrics records; the log shows work going on."""
    from proxy.lab.background import ProxyThread
    from proxy.ops.evidence import EvidenceSpec
    from tests.support.capture import of_kind, records
    from tests.support.triton_client import StreamSession, token_inputs, wait_for

    spec = EvidenceSpec(metrics_url=triton.metrics_url, log_path=triton.log_path, window_s=1.5)
    with ProxyThread(triton.grpc_url, tmp_path, payload="meta", drain_timeout=2, evidence=spec) as proxy:
        s = StreamSession(f"127.0.0.1:{proxy.proxy.port}")
        s.send(model, token_inputs("e", 300, 5), "ev-1")
        s.take(3)
        s.client.stop_stream(cancel_requests=True)

        def evidence() -> list[dict[str, Any]]:
            return of_kind(records(proxy.proxy.capture_path), "evidence")

        # The writer flushes on its own tick; the window is 1.5 s.
        wait_for(lambda: len(evidence()) == 2, 20, "both evidence records")
        s.client.close()
    recs = records(proxy.proxy.capture_path)
    (cancel,) = of_kind(recs, "cancel")
    by_source = {r["source"]: r for r in of_kind(recs, "evidence")}
    lg = by_source["log"]
    assert lg["call"] == cancel["call"] and lg["in_flight"] == ["ev-1"] and lg["error"] is None
    assert any("Cancellation notification received" in line for line in lg["lines"]), str(lg)[:3000]
    # The ignoring model produces ~1 response per 5-6 ms for the rest of the 1.5 s window (~250); the honouring one
    # stops once the cancel reaches it. The line between them is wide both ways: the honouring model would have
    # to take ~375 ms to notice, the ignoring one ~20 ms a response, before a loaded machine blurs them.
    assert (lg["skipped_responses"] > 75) is went_on, lg["skipped_responses"]
    assert by_source["metrics"]["error"] is None and isinstance(by_source["metrics"]["counters"], dict)

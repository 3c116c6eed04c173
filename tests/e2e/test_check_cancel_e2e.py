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


def test_queued_behind_a_long_blocker_is_watched_from_the_blocker_s_end(triton: TritonServer) -> None:
    """The blocker runs past the whole window (--length 900: ~5 s of steps): the cancelled queued request
    reaches the backend only then, and its work going on must still be seen in the log. (Watched from the
    cancel, the window closed first: the log said it never left the queue, a stop; with a blocker ending
    inside the window but later than the allowance before its end, all it saw was "within the allowance".)"""
    code, doc = _check(
        "--target", triton.grpc_url, "--model", "steps_serial_ignore_cancel", "--log", str(triton.log_path),
        "--cases", "queued", "--length", "900", "--window", "4", "--allowance-ms", "1000",
    )  # fmt: skip
    (case,) = doc["cases"]
    assert code == 1 and case["work_stopped"] is False, case
    assert any("still handed to the backend" in e for e in case["evidence"]), case
    assert any(e.startswith("[continued] log") for e in case["evidence"]), case
    assert not any(e.startswith("[stopped]") for e in case["evidence"]), case


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


def test_short_remainder_is_not_called_stopped(triton: TritonServer) -> None:
    """tokens_ignore_cancel at --length 60: the ~34 responses left after the cancel take ~200 ms at
    ~166/s, all inside the 300 ms allowance, and the model produces every one of them. Silence after
    the allowance then proves nothing: the verdict must not be `work_stopped: true` (it was, exit 0).
    On this machine it reads "cannot tell" (Triton dropped as many responses as the request had
    left); on a slower one, where the remainder outlasts the allowance, the log shows it went on."""
    code, doc = _check(
        "--target", triton.grpc_url, "--model", "tokens_ignore_cancel", "--length", "60", "--cases", "executing",
        "--window", "4", "--log", str(triton.log_path),
    )  # fmt: skip
    (case,) = doc["cases"]
    assert case["work_stopped"] is not True and code != 0, case
    if case["work_stopped"] is None:
        assert code == 2 and any("may have run to its end" in e for e in case["evidence"]), case
    else:
        assert code == 1 and any(e.startswith("[continued] log") for e in case["evidence"]), case


def test_record_evidence_names_overlapping_cancels_both_ways(triton: TritonServer, tmp_path: Path) -> None:
    """Two cancels 0.5 s apart, the first on tokens_ignore_cancel (it goes on producing, and Triton's
    'skipping response generation' lines carry no request id), the second on tokens. Each window
    meets the other: each evidence log record names the other call in `overlapping`, so the later
    one's skipped lines are not taken for its own without a word."""
    from proxy.lab.background import ProxyThread
    from proxy.ops.evidence import EvidenceSpec
    from tests.support.capture import of_kind, records
    from tests.support.triton_client import StreamSession, token_inputs, wait_for

    spec = EvidenceSpec(metrics_url=None, log_path=triton.log_path, window_s=3.0)
    with ProxyThread(triton.grpc_url, tmp_path, payload="meta", drain_timeout=2, evidence=spec) as proxy:
        url = f"127.0.0.1:{proxy.proxy.port}"
        a, b = StreamSession(url), StreamSession(url)
        try:
            # ~2 s of work after its cancel: inside B's 3 s window, and over before the next test reads the log.
            a.send("tokens_ignore_cancel", token_inputs("e", 400, 5), "ov-a")
            a.take(3)
            a.client.stop_stream(cancel_requests=True)
            b.send("tokens", token_inputs("e", 400, 5), "ov-b")
            b.take(3)
            b.client.stop_stream(cancel_requests=True)

            def logs() -> list[dict[str, Any]]:
                return [r for r in of_kind(records(proxy.proxy.capture_path), "evidence") if r["source"] == "log"]

            wait_for(lambda: len(logs()) == 2, 30, "both log evidence records")
            done = "tokens_ignore_cancel: request ov-a done"
            wait_for(lambda: done in triton.log_path.read_text(errors="replace"), 30, "ov-a to run to its end")
        finally:
            a.client.close()
            b.client.close()
    recs = records(proxy.proxy.capture_path)
    call_of = {r["in_flight"][0]: r["call"] for r in of_kind(recs, "cancel")}
    by_rid = {r["in_flight"][0]: r for r in of_kind(recs, "evidence") if r["source"] == "log"}
    assert by_rid["ov-a"]["overlapping"] == [call_of["ov-b"]], by_rid["ov-a"]
    assert by_rid["ov-b"]["overlapping"] == [call_of["ov-a"]], by_rid["ov-b"]


def test_record_evidence_after_an_http_client_close(triton: TritonServer, tmp_path: Path) -> None:
    """An HTTP generate_stream client that closes its connection (a FIN, as httpx and curl do) mid
    stream: the proxy passes the FIN on, Triton takes it for the cancel, and the evidence log record
    reads Triton's log from the FIN on (it said 'tritonserver.log unreadable': no offset was taken).
    A reset marked the offset; a FIN did not."""
    import httpx

    from proxy.lab.background import ProxyThread
    from proxy.ops.evidence import EvidenceSpec
    from tests.support.capture import of_kind, records
    from tests.support.triton_client import wait_for

    spec = EvidenceSpec(metrics_url=None, log_path=triton.log_path, window_s=1.0)
    http_upstream = triton.http_url.removeprefix("http://")
    with ProxyThread(triton.grpc_url, tmp_path, payload="meta", drain_timeout=2, evidence=spec,
                     http_listen="127.0.0.1:0", http_upstream=http_upstream) as proxy:  # fmt: skip
        got = 0
        with httpx.Client(timeout=30) as client:
            url = f"http://127.0.0.1:{proxy.proxy.http_port}/v2/models/tokens/generate_stream"
            with client.stream("POST", url, json={"id": "fin-ev", "PROMPT": "h", "MAX_TOKENS": 500, "DELAY_MS": 20}) as r:
                for line in r.iter_lines():
                    got += line.startswith("data: ")
                    if got == 3:
                        break

        def logs() -> list[dict[str, Any]]:
            return [r for r in of_kind(records(proxy.proxy.capture_path), "evidence") if r["source"] == "log"]

        wait_for(lambda: len(logs()) == 1, 30, "the log evidence record")
    (lg,) = logs()
    (cancel,) = of_kind(records(proxy.proxy.capture_path), "cancel")
    assert (lg["call"], lg["in_flight"], lg["error"]) == (cancel["call"], ["fin-ev"], None), lg
    assert cancel["cause"] == "client_disconnect"
    # Read from the FIN on: Triton's HTTP front end logs no cancel notification, and the lines of its
    # own it tags with the id came before (the request was released once execute() handed it to a thread).
    assert isinstance(lg["lines"], list) and lg["skipped_responses"] == 0, lg

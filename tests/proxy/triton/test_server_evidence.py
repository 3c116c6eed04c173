"""Triton's verbose log and metrics page read as evidence (shared by check-cancel and the proxy's ops evidence)."""

from __future__ import annotations

import pytest

from proxy.triton import server_evidence as se

# Lines as Triton 2.51 writes them with --log-verbose=1 (shapes copied from this machine's log).
NOTE = 'I1130 08:10:59.656216 8505 infer_handler.h:850] "Cancellation notification received for ModelStreamInferHandler, rpc_ok=1, context 0, 0 step ISSUED"'


def skip_at(t: str) -> str:
    return f'I1130 {t} 8505 stream_infer_handler.cc:664] "ModelStreamInferHandler::StreamInferResponseComplete, 0, skipping response generation as grpc transaction was cancelled... "'


def state(t: str, rid: str, to: str, frm: str = "PENDING") -> str:
    return f'I1130 {t} 8505 infer_request.cc:132] "[request id: {rid}] Setting state from {frm} to {to}"'


def test_log_time_parses_triton_lines_only() -> None:
    """Triton's `I1130 08:10:59.656216` prefix becomes seconds of the day; other lines give None."""
    assert se.log_time_s(NOTE) == pytest.approx(8 * 3600 + 10 * 60 + 59.656216)
    assert se.log_time_s("=== triton-tap: starting tritonserver") is None


def test_scan_log_executing_release_and_late_responses() -> None:
    """Times run from the first notification; RELEASED of our id and skipped lines past the allowance count."""
    lines = [
        skip_at("08:10:59.600000"),  # before our cancel: not ours
        NOTE,
        NOTE.replace("656216", "657000"),
        skip_at("08:10:59.700000"),
        skip_at("08:11:00.500000"),
        state("08:11:00.820000", "other", "RELEASED", "EXECUTING"),
        state("08:11:00.856216", "r", "RELEASED", "EXECUTING"),
    ]
    got = se.scan_log(lines, "r", allowance_ms=300, window_ms=5000)
    assert got.notified and got.reached_backend is None
    assert got.released_after_ms == pytest.approx(1200, abs=0.01)
    assert (got.skipped_total, got.skipped_after_allowance) == (2, 1)
    assert got.last_skipped_ms == pytest.approx(843.784, abs=0.01)
    # The skip 56 ms before ours is another call's; the notification 0.8 ms after ours is our call's other state.
    assert got.others == 1
    assert se.scan_log(lines[1:2] + lines[3:], "r", allowance_ms=300, window_ms=5000).others == 0
    near = [skip_at("08:10:59.620000"), NOTE, NOTE.replace("59.656216", "59.700000")]  # within 50 ms: ours
    assert se.scan_log(near, "r", allowance_ms=300, window_ms=5000).others == 0
    far = [skip_at("08:10:59.600000"), NOTE, NOTE.replace("59.656216", "59.710000")]  # past 50 ms: another's
    assert se.scan_log(far, "r", allowance_ms=300, window_ms=5000).others == 2
    late = se.scan_log([NOTE, NOTE.replace("08:10:59", "08:11:09"), skip_at("08:11:09.000000")], "r", 300, 5000)
    assert late.others == 0  # (past the window: not counted)


def test_scan_log_queued_measures_from_reaching_the_backend() -> None:
    """A queued request's clock starts when it left the queue; skipped lines before that are someone else's."""
    lines = [NOTE, skip_at("08:11:00.000000"), state("08:11:01.000000", "q", "EXECUTING"),
             skip_at("08:11:01.001000"), state("08:11:01.002000", "q", "RELEASED", "EXECUTING")]  # fmt: skip
    got = se.scan_log(lines, "q", allowance_ms=300, window_ms=5000, case="queued")
    assert got.reached_backend is True
    assert got.released_after_ms == pytest.approx(2.0, abs=0.01)
    assert (got.skipped_total, got.skipped_after_allowance) == (1, 0)


def test_scan_log_queued_window_runs_from_reaching_the_backend() -> None:
    """A queued request that reached the backend 4.5 s into a 5 s window is still watched for 5 s from then:
    its responses 1.2 and 4.9 s after its start count (the window from the notification cut them off, and
    all it saw was dropped within the allowance)."""
    lines = [NOTE, state("08:11:04.156216", "q", "EXECUTING"),
             skip_at("08:11:04.200000"), skip_at("08:11:05.356216"), skip_at("08:11:09.056216"),
             skip_at("08:11:09.256216")]  # fmt: skip
    got = se.scan_log(lines, "q", allowance_ms=1000, window_ms=5000, case="queued")
    assert got.reached_backend is True
    assert (got.skipped_total, got.skipped_after_allowance) == (3, 2)
    assert got.last_skipped_ms == pytest.approx(4900, abs=0.01)
    # Reaching it only after the work ahead of it, past a window from the notification, is still seen.
    later = [NOTE, state("08:11:06.156216", "q", "EXECUTING"), skip_at("08:11:07.356216")]
    got = se.scan_log(later, "q", allowance_ms=1000, window_ms=5000, case="queued")
    assert got.reached_backend is True and (got.skipped_total, got.skipped_after_allowance) == (1, 1)
    # Not queued: the window from the notification cuts the lines as before.
    assert se.scan_log(later, "q", allowance_ms=1000, window_ms=5000).skipped_total == 0


def test_scan_log_without_notification_and_past_the_window() -> None:
    """No notification: nothing is attributed; lines after the window are ignored."""
    assert not se.scan_log([skip_at("08:11:00.000000")], "r", 300, 5000).notified
    got = se.scan_log([NOTE, skip_at("08:11:09.000000")], "r", 300, 5000)
    assert got.notified and got.skipped_total == 0


def test_scan_log_crosses_midnight() -> None:
    """A log that passes midnight keeps increasing times."""
    lines = [NOTE.replace("08:10:59.656216", "23:59:59.900000"), skip_at("00:00:00.900000")]
    got = se.scan_log(lines, "r", 300, 5000)
    assert got.skipped_after_allowance == 1 and got.last_skipped_ms == pytest.approx(1000, abs=0.01)


def test_parse_metrics_keeps_nv_inference_series() -> None:
    """Only `nv_inference_*` samples, keyed by name and labels; comments and other families are skipped."""
    page = (
        "# HELP nv_inference_count Number of inferences\n# TYPE nv_inference_count counter\n"
        'nv_inference_count{model="m",version="1"} 3\nnv_gpu_utilization{gpu="0"} 0.5\n'
        'nv_inference_request_failure{model="m",reason="CANCELED",version="1"} 1.5e+01\nnv_inference_bad x\n'
    )
    assert se.parse_metrics(page) == {
        'nv_inference_count{model="m",version="1"}': 3.0,
        'nv_inference_request_failure{model="m",reason="CANCELED",version="1"}': 15.0,
    }

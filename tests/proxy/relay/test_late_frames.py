"""Cancel evidence in the relay: late upstream frames, cancel latency, executing/queued marking.

Uses tests/support/stubborn_upstream.py, a raw HTTP/2 fake that keeps sending after RST_STREAM:
a real tritonserver stops at once, so late frames only exist in a short race window there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.ops.server import RecordingProxy
from tests.support.capture import of_kind, records
from tests.support.loop_thread import BackgroundLoop
from tests.support.proxy import stop_proxy
from tests.support.stubborn_upstream import Stubborn
from tests.support.triton_client import StreamSession, token_inputs, wait_for


@pytest.fixture
def stubborn(bg: BackgroundLoop) -> Iterator[Stubborn]:
    """The stubborn fake upstream (3 late messages then trailers after every reset)."""
    s = Stubborn(late_messages=3, interval=0.01)
    bg.run(s.start())
    yield s
    bg.run(s.stop())


def _cancel_two(stubborn: Stubborn, start_proxy: Callable[..., RecordingProxy]) -> tuple[list[Any], list[Any], list[dict[str, Any]]]:
    proxy = start_proxy(f"127.0.0.1:{stubborn.port}")
    s = StreamSession(f"127.0.0.1:{proxy.port}")
    s.send("m", token_inputs("p"), "run-1")
    s.send("m", token_inputs("p"), "wait-1")
    before = s.take(2)
    # The client connection stays open: closing it would close the upstream connection too.
    s.client.stop_stream(cancel_requests=True)
    wait_for(lambda: len(stubborn.resets) == 1, 10, "the reset to reach the upstream")
    # The fake writes its 3 late messages and trailers 10 ms apart after the reset.
    wait_for(lambda: all(t.done() for c in stubborn._conns for t in c.tasks), 10, "the fake's late frames")
    after: list[Any] = []
    while not s.events.empty():
        after.append(s.events.get())
    s.client.close()
    stop_proxy(proxy)
    return before, after, records(proxy.capture_path)


def test_late_frames_are_recorded_and_never_surface_in_the_client(
    stubborn: Stubborn, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """Messages and trailers sent after the forwarded cancel become `late` records; the client's
    HTTP/2 stack discards them (they are passed on: HPACK and flow control stay in step)."""
    before, after, recs = _cancel_two(stubborn, start_proxy)
    assert [e[1] for e in before] == ["run-1", "run-1"]
    # Responses the upstream sent before the reset reached it may still arrive (they were not
    # late); none of those it wrote after the reset may reach the client's callback.
    assert len(stubborn.late_texts) == 3
    assert not [e for e in after if e[0] == "result" and set(e[3]) & set(stubborn.late_texts)], after
    late = of_kind(recs, "late")
    frames = [r["frame"] for r in late]
    assert frames.count("message") >= 3 and frames[-1] == "trailers", frames
    msgs = [r for r in late if r["frame"] == "message"]
    assert {r["request_id"] for r in msgs} == {"run-1"} and all(r["final"] is False for r in msgs)
    assert late[-1]["error"] == "0 late-ok"
    assert all(r["since_cancel_ms"] >= 0 for r in late)
    assert [r["since_cancel_ms"] for r in late] == sorted(r["since_cancel_ms"] for r in late)
    cancel = of_kind(recs, "cancel")[0]
    assert all(r["call"] == cancel["call"] for r in late)
    # Nothing late is counted as a normal message of the call.
    end = of_kind(recs, "call_end", cancel["call"])[0]
    assert end["messages_s2c"] == len(of_kind(recs, "message", cancel["call"])) - end["messages_c2s"]


def test_cancel_marks_executing_and_queued_and_times_the_rst(
    stubborn: Stubborn, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """The cancel record lists both ids in flight, only the answering one as executing, and the RST latency."""
    _, _, recs = _cancel_two(stubborn, start_proxy)
    cancel = of_kind(recs, "cancel")[0]
    assert cancel["cause"] == "client_cancel" and cancel["forwarded_upstream"] is True
    assert sorted(cancel["in_flight"]) == ["run-1", "wait-1"] and cancel["responded"] == ["run-1"]
    assert cancel["upstream_rst_us"] is not None and 0 < cancel["upstream_rst_us"] < 1e6


def test_proxy_never_resends_a_cancelled_request(stubborn: Stubborn, start_proxy: Callable[..., RecordingProxy]) -> None:
    """The upstream sees each request exactly once and one reset: nothing is re-sent after the cancel."""
    _cancel_two(stubborn, start_proxy)
    assert stubborn.requests == ["run-1", "wait-1"]
    assert len(stubborn.resets) == 1


def test_evidence_window_ends_early_at_shutdown(
    stubborn: Stubborn, start_proxy: Callable[..., RecordingProxy], tmp_path: Path
) -> None:
    """`--evidence`: log lines appended after the cancel are kept; a stop ends the window; a dead metrics URL is an error."""
    from proxy.lab.tritonserver import free_port
    from proxy.ops.evidence import EvidenceSpec

    triton_log = tmp_path / "triton.log"
    triton_log.write_text("I1130 08:00:00.000000 1 x.cc:1] \"before the cancel: not evidence\"\n")
    spec = EvidenceSpec(metrics_url=f"http://127.0.0.1:{free_port()}/metrics", log_path=triton_log, window_s=60.0)
    proxy = start_proxy(f"127.0.0.1:{stubborn.port}", evidence=spec)
    s = StreamSession(f"127.0.0.1:{proxy.port}")
    s.send("m", token_inputs("p"), "run-9")
    s.take(1)
    s.client.stop_stream(cancel_requests=True)
    wait_for(lambda: len(stubborn.resets) == 1, 10, "the reset to reach the upstream")
    with triton_log.open("a") as f:
        f.write('I1130 08:00:01.000000 1 h.h:850] "Cancellation notification received for ModelStreamInferHandler"\n')
        f.write('I1130 08:00:01.100000 1 r.cc:132] "[request id: run-9] Setting state from EXECUTING to RELEASED"\n')
        f.write('I1130 08:00:01.200000 1 s.cc:664] "x, skipping response generation as grpc transaction was cancelled... "\n')
        f.write('I1130 08:00:01.300000 1 z.cc:1] "unrelated"\n')
    s.client.close()
    stop_proxy(proxy)
    recs = records(proxy.capture_path)
    cancel = of_kind(recs, "cancel")[0]
    evidence = {r["source"]: r for r in of_kind(recs, "evidence")}
    assert set(evidence) == {"metrics", "log"}
    lg, mt = evidence["log"], evidence["metrics"]
    assert lg["call"] == cancel["call"] and lg["cancel_t_ns"] == cancel["t_ns"] and lg["in_flight"] == ["run-9"]
    assert len(lg["lines"]) == 3 and lg["skipped_responses"] == 1 and lg["error"] is None
    assert lg["window_ms"] < 60000
    assert mt["counters"] is None and "metrics endpoint unreadable" in mt["error"]
    # Evidence records come before the capture's end, after the cancel they belong to.
    kinds = [r["kind"] for r in recs]
    assert kinds.index("cancel") < kinds.index("evidence") < kinds.index("capture_end")


def test_replay_reads_a_capture_with_late_records(
    stubborn: Stubborn, start_proxy: Callable[..., RecordingProxy], tmp_path: Path
) -> None:
    """`late` records are not responses to replay: the cancelled request stays cancelled, nothing unattributable."""
    from replay import track

    _, _, recs = _cancel_two(stubborn, start_proxy)
    assert of_kind(recs, "late")
    result = track(tmp_path / "captures")
    assert sorted((r.request_id, r.outcome, r.responses) for r in result.requests) == [
        ("run-1", "cancelled", 2), ("wait-1", "cancelled", 0),
    ]  # fmt: skip
    assert result.unattributable == () and not any(r.violations for r in result.requests)

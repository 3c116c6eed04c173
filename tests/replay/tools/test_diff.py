"""`diff` as pure logic over two captures (built with the golden-capture builder): what counts as a change."""

from __future__ import annotations

from replay.tools.captured import summarize
from replay.tools.diff import DiffResult, diff
from tests.data.make_golden import Builder


def _stream(*, rid: str = "r1", final: bool = True, first_ms: float = 5.0, cancel: bool = False,
            payload: str = "meta", prompt: str = "hi") -> Builder:  # fmt: skip
    b = Builder(payload=payload).start()
    b.call("c1.1")
    b.request("c1.1", rid, prompt=prompt)
    b.response("c1.1", rid, "hi-0", ms=first_ms)
    if cancel:
        b.cancel("c1.1", "client_cancel", rst_code=8)
        b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
        return b.finish()
    if final:
        b.response("c1.1", rid, None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish()


def _diff(a: Builder, b: Builder, **kw: object) -> DiffResult:
    return diff(summarize(a.records), summarize(b.records), **kw)  # type: ignore[arg-type]


def _changes(result: DiffResult) -> dict[str, tuple[object, object]]:
    assert len(result.pairs) == 1
    return {c.field: (c.a, c.b) for c in result.pairs[0].changes}


def test_same_traffic_is_equivalent() -> None:
    """A capture compared with an identical one: every request paired, nothing changed."""
    result = _diff(_stream(), _stream())
    assert result.equivalent and len(result.pairs) == 1 and result.pairs[0].by == "id"


def test_a_missing_final_flag_is_a_change() -> None:
    """The backend stopped sending the empty final: outcome, responses, final flag and violations differ."""
    result = _diff(_stream(), _stream(final=False))
    assert not result.equivalent
    assert _changes(result) == {
        "outcome": ("completed", "incomplete"),
        "responses": (2, 1),
        "final": (True, False),
        "violations": ([], ["missing_final"]),
    }


def test_a_different_cause_is_a_change() -> None:
    """The same request cancelled in B: outcome, status and cause differ."""
    changes = _changes(_diff(_stream(), _stream(cancel=True)))
    assert changes["cause"] == ("ok", "client_cancel")
    assert changes["status"] == ("OK", "CANCELLED")
    assert changes["outcome"] == ("completed", "cancelled")


def test_timing_counts_only_beyond_the_threshold() -> None:
    """A first response 300 ms later is a change at a 100 ms threshold, not at 1000 ms."""
    slow = _stream(first_ms=305.0)
    changes = _changes(_diff(_stream(), slow, threshold_ms=100.0))
    assert set(changes) == {"first_response_ms", "duration_ms"}
    assert changes["first_response_ms"] == (5.0, 305.0)
    assert _diff(_stream(), slow, threshold_ms=1000.0).equivalent


def test_requests_only_on_one_side_are_listed() -> None:
    """With --match id, a request whose id exists on one side only is 'only in A' / 'only in B'."""
    result = _diff(_stream(rid="x"), _stream(rid="y"), strategies=("id",))
    assert not result.equivalent and not result.pairs
    assert [r.request_id for r in result.only_a] == ["x"]
    assert [r.request_id for r in result.only_b] == ["y"]


def test_new_ids_with_the_same_inputs_pair_by_payload() -> None:
    """Full captures of a client whose ids change per run still pair (by input hash), and are equivalent."""
    a = _stream(rid="run1-7", payload="full", prompt="p")
    b = _stream(rid="run2-7", payload="full", prompt="p")
    result = _diff(a, b, strategies=("id", "payload"))
    assert result.equivalent and result.pairs[0].by == "payload"
    other = _stream(rid="run2-7", payload="full", prompt="q")
    assert _diff(a, other, strategies=("id", "payload")).only_b


def test_json_document_lists_changes_per_request() -> None:
    """The --json document carries each pair's changes and a summary."""
    doc = _diff(_stream(), _stream(final=False)).to_json()
    assert doc["equivalent"] is False
    assert doc["summary"] == {"paired": 1, "changed": 1, "only_a": 0, "only_b": 0, "calls_changed": 0,
                                  "holes_a": 0, "holes_b": 0}
    assert {"field": "final", "a": True, "b": False} in doc["requests"][0]["changes"]


def test_other_calls_are_compared_as_counts_per_method_and_status() -> None:
    """A ServerLive that failed in B (and one more ModelMetadata) makes the captures different."""

    def with_calls(live_status: str, metadata_calls: int) -> Builder:
        b = _stream()
        b.records.pop()  # reopen: drop capture_end
        b.call("c2.1", method="/inference.GRPCInferenceService/ServerLive")
        b.end("c2.1", live_status, "ok" if live_status == "OK" else "error")
        for i in range(metadata_calls):
            b.call(f"c3.{i}", method="/inference.GRPCInferenceService/ModelMetadata")
            b.end(f"c3.{i}")
        return b.finish()

    assert _diff(with_calls("OK", 1), with_calls("OK", 1)).equivalent
    result = _diff(with_calls("OK", 1), with_calls("UNAVAILABLE", 2))
    assert not result.equivalent and not result.changed
    assert {c.field: (c.a, c.b) for c in result.calls} == {
        "ServerLive OK": (1, 0),
        "ServerLive UNAVAILABLE": (0, 1),
        "ModelMetadata OK": (1, 2),
    }

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


def _errored(error: str, *, model: str = "tokens", end: str = "ok") -> Builder:
    """One request answered by an in-band error final, the call then ending OK or by a deadline."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r1", model=model)
    b.response("c1.1", "r1", None, final=True, error=error, model=model)
    if end == "ok":
        b.half_close("c1.1")
        b.end("c1.1")
    else:
        b.cancel("c1.1", end)
        b.end("c1.1", "DEADLINE_EXCEEDED", end, details=error, ms=0)
    return b.finish()


def test_a_different_error_text_is_a_change_unless_both_ended_alike_on_the_client_side() -> None:
    """The server's error message changed: a change. The same deadline on both sides: its text only says
    who noticed first (a race), not a change."""
    assert _changes(_diff(_errored("boom"), _errored("bang"))) == {"error": ("boom", "bang")}
    assert _diff(_errored("boom", end="deadline"), _errored("bang", end="deadline")).equivalent


def test_model_map_pairs_a_renamed_models_requests() -> None:
    """--model-map old=new: A's requests for `tokens` pair with B's for `tokens_v2` (and only with it)."""
    a, b = _errored("boom"), _errored("boom", model="tokens_v2")
    assert not _diff(a, b).equivalent
    mapped = _diff(a, b, model_map={"tokens": "tokens_v2"})
    assert mapped.equivalent and [(p.a.model, p.b.model) for p in mapped.pairs] == [("tokens", "tokens_v2")]


def test_json_names_each_unpaired_request_by_call_record_model_id_and_kind() -> None:
    """`diff --json`'s only_a / only_b entries say where each unpaired request is."""
    doc = _diff(_stream(rid="x"), _stream(rid="y"), strategies=("id",)).to_json()
    ref = {"call": "c1.1", "seq": 2, "model": "tokens", "kind": "stream"}
    assert (doc["only_a"], doc["only_b"]) == ([{**ref, "request_id": "x"}], [{**ref, "request_id": "y"}])
    assert (doc["equivalent"], doc["summary"]["only_a"], doc["summary"]["only_b"], doc["match"]) == (False, 1, 1, ["id"])


def _requests(*rids: str) -> Builder:
    b = Builder().start()
    b.call("c1.1")
    for rid in rids:
        b.request("c1.1", rid)
        b.response("c1.1", rid, None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish()


def test_every_request_of_b_is_paired_or_listed_and_a_request_of_a_pairs_once() -> None:
    """An unmatched request of B does not stop the pairing of the ones after it; a request of A sent
    once pairs with one request of B (the same request sent twice in B is once only in B)."""
    result = _diff(_requests("x", "z"), _requests("y", "x", "x", "z"), strategies=("id",))
    assert [(p.a.request_id, p.b.request_id, p.b.seq) for p in result.pairs] == [("x", "x", 4), ("z", "z", 8)]
    assert [(r.request_id, r.seq) for r in result.only_b] == [("y", 2), ("x", 6)]
    assert result.only_a == ()


def test_a_percentage_tolerance_widens_the_timing_threshold() -> None:
    """--tolerance-pct: a timing that moved by less than that share of A's is no change, even beyond the ms threshold."""
    slow = _diff(_stream(first_ms=200.0), _stream(first_ms=300.0), threshold_ms=10.0)
    assert "first_response_ms" in _changes(slow)
    tolerant = _diff(_stream(first_ms=200.0), _stream(first_ms=300.0), threshold_ms=10.0, tolerance_pct=60.0)
    assert "first_response_ms" not in _changes(tolerant) and tolerant.tolerance_pct == 60.0

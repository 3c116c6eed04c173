"""`diff` as pure logic over two captures (built with the golden-capture builder): what counts as a change."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tritonclient.grpc import service_pb2 as pb

from replay.capture import events as ev
from replay.capture.holes import Gap
from replay.tools.captured import CaptureSummary, summarize
from replay.tools.diff import Change, DiffResult, Pair, diff
from replay.tools.match import STRATEGIES
from replay.tools.regression import ModelRegression, Timing
from tests.data.make_golden import Builder, stray_error


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
    assert doc["summary"] == {"paired": 1, "changed": 1, "raced": 0, "only_a": 0, "only_b": 0, "calls_changed": 0, "unattributable_changed": 0,
                              "holes_a": 0, "holes_b": 0, "models_slower": 0, "models_faster": 0, "refused_a": 0,
                              "refused_b": 0}
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


def _written(path: Path, b: Builder) -> CaptureSummary:
    """``b`` read back from a file as the proxy writes it: holes are what the reader finds in files."""
    path.write_bytes(b.render())
    return summarize(path)


def _timed(*, first_ms: float, gaps: tuple[int, ...] = (), live: bool = False) -> Builder:
    """One stream request (first response after ``first_ms``), then ``gap`` records and a ServerLive call."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r1")
    b.response("c1.1", "r1", "hi-0", ms=first_ms)
    b.response("c1.1", "r1", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    for dropped in gaps:
        b.gap(dropped)
    if live:
        b.call("c2.1", method="/inference.GRPCInferenceService/ServerLive")
        b.end("c2.1")
    return b.finish()


def test_json_document_in_full(tmp_path: Path) -> None:
    """The whole `diff --json` document a script reads: settings, pairs, other calls, holes, per-model table,
    summary. B answered 80 ms later (within 10 % of A's 1 s), lost other records and made no ServerLive call."""
    a = _written(tmp_path / "a.jsonl", _timed(first_ms=1000.0, gaps=(3,), live=True))
    b = _written(tmp_path / "b.jsonl", _timed(first_ms=1080.0, gaps=(1, 2)))
    doc = diff(a, b, threshold_ms=50.0, tolerance_pct=10.0, strategies=("id", "order")).to_json()
    ref = {"call": "c1.1", "seq": 2, "model": "tokens", "request_id": "r1", "kind": "stream"}
    why = "the proxy dropped {} record(s): queue_full: the capture disk is slower than the traffic"

    def hole(side: str, line: int, count: int) -> dict[str, object]:
        return {"kind": "gap_record", "file": str(tmp_path / f"{side}.jsonl"), "line": line, "first_seq": line - 1,
                "last_seq": line - 1, "count": count, "detail": why.format(count)}  # fmt: skip

    def timing(name: str, a_ms: float, b_ms: float) -> dict[str, object]:
        return {"name": name, "a": a_ms, "b": b_ms, "beyond_tolerance": False, "direction": None}

    timings = [timing(f"first_response_ms p{p}", 1000.0, 1080.0) for p in (50, 95, 99)]
    timings += [timing(f"duration_ms p{p}", 1005.0, 1085.0) for p in (50, 95, 99)]
    model = {"model": "tokens", "requests_a": 1, "requests_b": 1, "only_a": 0, "only_b": 0, "outcome_changes": {},
             "responses_changed": 0, "final_changed": 0, "error_changed": 0, "timings": timings, "changed": False}  # fmt: skip
    summary = {"paired": 1, "changed": 0, "raced": 0, "only_a": 0, "only_b": 0, "calls_changed": 1, "unattributable_changed": 0, "holes_a": 1, "holes_b": 2,
               "models_slower": 0, "models_faster": 0, "refused_a": 0, "refused_b": 0}
    assert doc == {
        "equivalent": False,
        "threshold_ms": 50.0,
        "match": ["id", "order"],
        "requests": [{"a": ref, "b": ref, "matched_by": "id", "changes": [], "raced": [], "cut_ms": None}],
        "only_a": [],
        "only_b": [],
        "calls": [{"field": "ServerLive OK", "a": 1, "b": 0}],
        "unattributable": [],
        "holes": {"a": [hole("a", 8, 3)], "b": [hole("b", 8, 1), hole("b", 9, 2)]},
        "tolerance": {"ms": 50.0, "pct": 10.0},
        "models": [model],
        "summary": summary,
    }


def test_a_tolerance_percentage_applies_to_the_per_model_percentiles_too() -> None:
    """Every request 80 ms slower on a 1 s baseline: beyond a 50 ms threshold, within 10 %: with both given,
    neither the request nor its model's percentiles count as slower, and the captures are equivalent."""
    a, b = _timed(first_ms=1000.0), _timed(first_ms=1080.0)
    assert not _diff(a, b, threshold_ms=50.0).equivalent
    tolerant = _diff(a, b, threshold_ms=50.0, tolerance_pct=10.0)
    assert tolerant.equivalent and tolerant.slower == [] and len(tolerant.models) == 1


def test_by_default_only_the_millisecond_threshold_counts_however_long_the_request() -> None:
    """Without --tolerance-pct, a first response 150 ms later is a change even on a 20 s request."""
    changes = _changes(_diff(_timed(first_ms=20_000.0), _timed(first_ms=20_150.0)))
    assert changes["first_response_ms"] == (20_000.0, 20_150.0)


def test_other_calls_still_open_at_the_end_are_counted_as_open() -> None:
    """A ServerReady call that never ended in A but answered OK in B: two different counts, by short method name."""

    def with_ready(ended: bool) -> Builder:
        b = _stream()
        b.records.pop()  # reopen: drop capture_end
        b.call("c2.1", method="/inference.GRPCInferenceService/ServerReady")
        if ended:
            b.end("c2.1")
        return b.finish()

    result = _diff(with_ready(False), with_ready(True))
    assert {c.field: (c.a, c.b) for c in result.calls} == {"ServerReady open": (1, 0), "ServerReady OK": (0, 1)}


def test_an_other_call_whose_path_has_no_slash_is_counted_under_its_path() -> None:
    """A broken client's path without a '/' (the proxy forwards it as it came): counted as it is, no crash."""

    def with_odd(n: int) -> Builder:
        b = _stream()
        b.records.pop()
        for i in range(n):
            b.call(f"c2.{i}", method="ServerLive")
            b.end(f"c2.{i}", "UNIMPLEMENTED", "error")
        return b.finish()

    result = _diff(with_odd(1), with_odd(2))
    assert [(c.field, c.a, c.b) for c in result.calls] == [("ServerLive UNIMPLEMENTED", 1, 2)]


def _two_models(model_b: str, *, extra_b: bool = False) -> Builder:
    """One request of `tokens` (or its renamed ``model_b``) and one of `echo`, answered alike."""
    b = Builder().start()
    b.call("c1.1")
    rids = [("t1", model_b), ("e1", "echo")] + ([("t2", model_b)] if extra_b else [])
    for rid, model in rids:
        b.request("c1.1", rid, model=model)
        b.response("c1.1", rid, None, final=True, model=model)
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish()


def test_model_map_leaves_the_models_it_does_not_name_as_they_are() -> None:
    """--model-map tokens=tokens_v2: the `echo` requests, not in the map, still pair with each other."""
    result = _diff(_two_models("tokens"), _two_models("tokens_v2"), model_map={"tokens": "tokens_v2"})
    assert result.equivalent
    assert sorted((p.a.model, p.b.model) for p in result.pairs) == [("echo", "echo"), ("tokens", "tokens_v2")]


def test_the_per_model_table_names_a_renamed_model_by_its_name_in_a() -> None:
    """--model-map tokens=tokens_v2 and one more tokens_v2 request in B: the table's row is `tokens`
    (A's name), with that request as only in B; no row of its own for `tokens_v2`."""
    result = _diff(_two_models("tokens"), _two_models("tokens_v2", extra_b=True), model_map={"tokens": "tokens_v2"})
    assert [r.request_id for r in result.only_b] == ["t2"]
    rows = {m.model: (m.requests_a, m.requests_b, m.only_b) for m in result.models}
    assert rows == {"echo": (1, 1, 0), "tokens": (1, 2, 1)}


def test_a_stream_of_b_keeps_following_the_stream_of_a_its_first_request_paired_with() -> None:
    """A has two streams sending ids r0, r1; B's first stream sends only r0 (pairs with A's first stream),
    B's second sends r0, r1: its r1 pairs with the r1 of A's second stream (the stream its r0 paired with),
    not with the still unpaired r1 of A's first stream, which answered differently."""

    def streams(calls: dict[str, list[tuple[str, int]]]) -> Builder:
        b = Builder().start()
        for call, requests in calls.items():
            b.call(call)
            for rid, texts in requests:
                b.request(call, rid)
                for i in range(texts):
                    b.response(call, rid, f"{rid}-{i}")
                b.response(call, rid, None, final=True)
            b.half_close(call)
            b.end(call)
        return b.finish()

    a = streams({"c1.1": [("r0", 1), ("r1", 1)], "c2.1": [("r0", 1), ("r1", 3)]})
    b = streams({"c1.1": [("r0", 1)], "c2.1": [("r0", 1), ("r1", 3)]})
    result = _diff(a, b, strategies=("id",))
    assert [(p.a.call, p.b.call, p.b.request_id) for p in result.pairs] == [
        ("c1.1", "c1.1", "r0"), ("c2.1", "c2.1", "r0"), ("c2.1", "c2.1", "r1"),
    ]  # fmt: skip
    assert result.changed == [] and [(r.call, r.request_id) for r in result.only_a] == [("c1.1", "r1")]


# -- the verdict: every rule of DiffResult.equivalent, both ways -----------------------------------
# Each rule is pinned where it alone makes the captures different, and where what it looks at is there
# but does not count. The timing percentiles are pinned on a DiffResult built by hand: through diff(),
# a percentile beyond tolerance always comes with a changed pair (an order statistic moves no more than
# the largest move of a pair), so only a DiffResult can show that term deciding alone.


def _one() -> Pair:
    """A pair of one request answered alike on both sides."""
    (r,) = summarize(_stream().records).outcomes.requests
    return Pair(a=r, b=r, by="id", changes=())


def _model(direction: str | None) -> ModelRegression:
    """A model whose first-response p95 moved in ``direction`` beyond tolerance (None: within it)."""
    ms = {"slower": 290.0, "faster": 16.0, None: 100.0}[direction]
    return ModelRegression(model="tokens", requests_a=1, requests_b=1,
                           timings=[Timing(name="first_response_ms p95", a=100.0, b=ms, direction=direction)])  # fmt: skip


def _result(**terms: object) -> DiffResult:
    """An equivalent result (one unchanged pair, a model within tolerance, a hole on each side) with ``terms``."""
    hole = Gap(kind="seq_gap", file="x.jsonl", line=3, first_seq=2, last_seq=2, count=1, detail="1 record(s) missing")
    base: dict[str, Any] = {"pairs": (_one(),), "only_a": (), "only_b": (), "threshold_ms": 100.0,
                            "strategies": ("id",), "holes_a": (hole,), "holes_b": (hole,), "models": (_model(None),)}  # fmt: skip
    return DiffResult(**{**base, **terms})


def _changed_pair() -> Pair:
    return replace(_one(), changes=(Change(field="final", a=True, b=False),))


ALONE: dict[str, dict[str, object]] = {
    "only in A": {"only_a": (_one().a,)},
    "only in B": {"only_b": (_one().b,)},
    "a changed pair": {"pairs": (_one(), _changed_pair())},
    "other calls": {"calls": (Change(field="ServerLive OK", a=1, b=0),)},
    "unattributable responses": {"unattributable": (Change(field="unknown_id with error", a=0, b=1),)},
    "a slower percentile": {"models": (_model("slower"),)},
    "a faster percentile": {"models": (_model("faster"),)},
}


def test_the_base_of_the_verdict_table_is_equivalent() -> None:
    """Unchanged pairs, a percentile within tolerance and holes on both sides: equivalent (holes do not count)."""
    result = _result()
    assert result.equivalent and result.pairs and result.holes_a and result.holes_b
    assert (result.changed, result.slower, result.faster) == ([], [], [])
    assert _result(holes_a=(), holes_b=()).equivalent


@pytest.mark.parametrize("rule", list(ALONE))
def test_each_verdict_rule_alone_makes_the_captures_different(rule: str) -> None:
    """One term of the verdict on an otherwise equivalent result: different, and the JSON says so."""
    result = _result(**ALONE[rule])
    assert not result.equivalent
    assert result.to_json()["equivalent"] is False


def test_a_percentile_is_named_by_its_direction() -> None:
    """A slower percentile is in `slower` only, a faster one in `faster` only; one within tolerance in neither."""
    slower, faster, within = _result(**ALONE["a slower percentile"]), _result(**ALONE["a faster percentile"]), _result()
    assert ([m.model for m in slower.slower], slower.faster) == (["tokens"], [])
    assert (faster.slower, [m.model for m in faster.faster]) == ([], ["tokens"])
    assert (within.slower, within.faster) == ([], [])
    assert [(s["models_slower"], s["models_faster"]) for s in (r.to_json()["summary"] for r in (slower, faster))] == [
        (1, 0), (0, 1)]  # fmt: skip


def _ids(*rids: str) -> Builder:
    """One stream whose requests ``rids`` each get one response and a final, 5 ms after being sent."""
    b = Builder().start()
    b.call("c1.1")
    for rid in rids:
        b.request("c1.1", rid)
        b.response("c1.1", rid, "x", ms=5.0)
        b.response("c1.1", rid, None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish()


@pytest.mark.parametrize("strategies", [("id",), STRATEGIES])
def test_a_request_only_in_a_alone_makes_the_captures_different(strategies: tuple[str, ...]) -> None:
    """A sent r1 and r2, B only r1: r2 is only in A, nothing else moved, and the verdict is different.
    The same two requests on both sides: equivalent."""
    result = _diff(_ids("r1", "r2"), _ids("r1"), strategies=strategies)
    assert [r.request_id for r in result.only_a] == ["r2"]
    assert (result.only_b, result.changed, result.calls, result.slower, result.faster) == ((), [], (), [], [])
    assert not result.equivalent
    assert _diff(_ids("r1", "r2"), _ids("r1", "r2"), strategies=strategies).equivalent


@pytest.mark.parametrize("strategies", [("id",), STRATEGIES])
def test_a_request_only_in_b_alone_makes_the_captures_different(strategies: tuple[str, ...]) -> None:
    """B sent one more request than A: only in B, nothing else moved, different."""
    result = _diff(_ids("r1"), _ids("r1", "r2"), strategies=strategies)
    assert [r.request_id for r in result.only_b] == ["r2"]
    assert (result.only_a, result.changed, result.calls, result.slower, result.faster) == ((), [], (), [], [])
    assert not result.equivalent


def test_a_changed_pair_alone_makes_the_captures_different() -> None:
    """The same request ended in B without its final: one changed pair and nothing else; unchanged: equivalent."""
    result = _diff(_stream(), _stream(final=False))
    assert (result.only_a, result.only_b, result.calls, result.slower, result.faster) == ((), (), (), [], [])
    assert len(result.changed) == 1 and not result.equivalent


def test_other_calls_alone_make_the_captures_different() -> None:
    """One more ServerLive in A, every request paired unchanged: different; the same count: equivalent."""

    def with_live(n: int) -> Builder:
        b = _stream()
        b.records.pop()  # reopen: drop capture_end
        for i in range(n):
            b.call(f"c2.{i}", method="/inference.GRPCInferenceService/ServerLive")
            b.end(f"c2.{i}")
        return b.finish()

    result = _diff(with_live(2), with_live(1))
    assert (result.only_a, result.only_b, result.changed, result.slower, result.faster) == ((), (), [], [], [])
    assert result.calls and not result.equivalent
    assert _diff(with_live(2), with_live(2)).equivalent


def test_a_faster_model_is_named_faster_never_slower() -> None:
    """tokens' first response 290 -> 16 ms: the model is faster beyond tolerance, not slower; B's responses came
    sooner, which is a difference all the same (the request's time changed too)."""
    result = _diff(_stream(first_ms=290.0), _stream(first_ms=16.0))
    assert result.slower == [] and [m.model for m in result.faster] == ["tokens"]
    assert {t.direction for t in result.models[0].timings} == {"faster"}
    assert not result.equivalent and "first_response_ms" in _changes(result)
    slower = _diff(_stream(first_ms=16.0), _stream(first_ms=290.0))
    assert [m.model for m in slower.slower] == ["tokens"] and slower.faster == []


def _group(*, second_errs: bool) -> Builder:
    """Two requests with one id sent while the first is in flight (an id group): both answered, or the second's
    answer an error."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "g")
    b.request("c1.1", "g")
    b.response("c1.1", "g", "a-0")
    b.response("c1.1", "g", None, final=True)
    if second_errs:
        b.response("c1.1", "g", None, error="model crashed", final=True)
    else:
        b.response("c1.1", "g", "b-0")
        b.response("c1.1", "g", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish()


def test_how_an_id_group_ended_is_compared() -> None:
    """An id group's requests share their responses, so each one's own fields can match while the group ended
    otherwise: how it ended is a change (diff called these equivalent)."""
    result = _diff(_group(second_errs=False), _group(second_errs=True))
    assert not result.equivalent
    assert all(p.a.group is not None for p in result.pairs)
    changed = {c.field for p in result.pairs for c in p.changes}
    assert "group" in changed


def test_unattributable_responses_are_compared_by_reason() -> None:
    """B has a response for an id nobody asked for (with an error): `check` fails B and not A, so `diff` cannot
    call them equivalent; the counts per reason say what differs."""
    result = _diff(_ids("r1"), stray_error())
    assert not result.equivalent and not result.changed
    assert result.unattributable == (Change(field="unknown_id with error", a=0, b=1),)
    assert result.to_json()["summary"]["unattributable_changed"] == 1


def test_an_id_group_is_compared_by_what_all_its_requests_got() -> None:
    """Two id-less requests, 6 responses and 2 finals both times: one client sent the second request just
    after the first's first response (1 response its own, 5 the group's), the other just before (6 the
    group's). Which request got responses while still alone is the clients' timing: equivalent (it was
    `responses 1 -> 0`, `group 5 -> 6`, found with `replay send`). One response fewer is a change."""

    def idless(second_after_first_response: bool, responses: int = 6) -> Builder:
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "", prompt="a")
        if second_after_first_response:
            b.response("c1.1", "", "t-0")
        b.request("c1.1", "", prompt="b")
        for i in range(responses - 2 - second_after_first_response):
            b.response("c1.1", "", f"t-{i + 1}")
        b.response("c1.1", "", None, final=True)
        b.response("c1.1", "", None, final=True)
        b.half_close("c1.1")
        b.end("c1.1")
        return b.finish()

    same = _diff(idless(True), idless(False), strategies=("order",))
    assert same.equivalent, [p.changes for p in same.pairs]
    fewer = _diff(idless(True), idless(False, responses=5), strategies=("order",))
    assert not fewer.equivalent
    assert {c.field for p in fewer.pairs for c in p.changes} == {"group"}

    def empty(extra: bool, text: bool) -> Builder:
        """As above, the second request sent first; one response more (empty), or one with text or not."""
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "", prompt="a")
        b.response("c1.1", "", "t-0")
        b.request("c1.1", "", prompt="b")
        b.response("c1.1", "", "t-1" if text else None)
        if extra:
            b.response("c1.1", "", None)
        b.response("c1.1", "", None, final=True)
        b.response("c1.1", "", None, final=True)
        b.half_close("c1.1")
        b.end("c1.1")
        return b.finish()

    for other in (empty(True, True), empty(False, False)):  # one empty response more; one text fewer
        assert not _diff(empty(False, True), other, strategies=("order",)).equivalent


def test_a_correction_sent_before_or_after_another_models_answer_is_no_change() -> None:
    """Id "" to `tokens` and to `scripted` without its input (refused), then the corrected `scripted` request:
    one run's `tokens` answered before the correction was sent, the other's after. The refusal is placed
    either way before the rows are compared: equivalent (it was `outcome group -> completed`)."""

    def corrected(tokens_first: bool) -> Builder:
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "", model="tokens", empty_final=True)
        b.request("c1.1", "", model="scripted", empty_final=True)
        b.response("c1.1", "", None, error="expected 1 inputs but got 0", model="")
        if tokens_first:
            b.response("c1.1", "", "a-0", model="tokens")
        b.request("c1.1", "", model="scripted", empty_final=True)
        b.response("c1.1", "", "t-0", model="scripted")
        b.response("c1.1", "", None, final=True, model="scripted")
        if not tokens_first:
            b.response("c1.1", "", "a-0", model="tokens")
        b.response("c1.1", "", None, final=True, model="tokens")
        b.half_close("c1.1")
        b.end("c1.1")
        return b.finish()

    result = _diff(corrected(True), corrected(False), strategies=("order",))
    assert result.equivalent, [p.changes for p in result.pairs]
    assert [p.b.outcome for p in result.pairs] == ["completed", "error", "completed"]


def _refused_then_corrected(refusal_first: bool, responses: int = 1, error: str = "expected 1 inputs but got 0") -> Builder:
    """A request refused at once (an error, no final) and its correction with the same id: the refusal came
    before the correction was sent (two requests, each alone with the id) or after (an id group)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "x", model="scripted", empty_final=True)
    if refusal_first:
        b.response("c1.1", "x", None, error=error, model="")
    b.request("c1.1", "x", model="scripted", empty_final=True)
    if not refusal_first:
        b.response("c1.1", "x", None, error=error, model="")
    for i in range(responses):
        b.response("c1.1", "x", f"t-{i}", model="scripted")
    b.response("c1.1", "x", None, final=True, model="scripted")
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish()


@pytest.mark.parametrize("strategies", [("order",), STRATEGIES])
def test_a_refusal_and_its_correction_grouped_on_one_side_only_are_compared_together(
    strategies: tuple[str, ...],
) -> None:
    """The correction sent just after the refusal came (two exact requests) or just before (an id group): the
    clients' timing. They are compared by what they got together: equivalent (it was `outcome error -> group`,
    `completed -> group` and 5 fields more, found by a review of real captures). What they got is still compared:
    a response fewer, or another error text, is a change of the two together."""
    exact, grouped = _refused_then_corrected(True), _refused_then_corrected(False)
    same = _diff(exact, grouped, strategies=strategies)
    assert [(p.a.group is None, p.b.group is None) for p in same.pairs] == [(True, False), (True, False)]
    assert same.equivalent, [p.changes for p in same.pairs]
    assert _diff(grouped, exact, strategies=strategies).equivalent
    fewer = _diff(exact, _refused_then_corrected(False, responses=0), strategies=strategies)
    assert not fewer.equivalent
    (change,) = {c for p in fewer.pairs for c in p.changes}
    assert change.field == "group"
    assert change.a == "2 request(s) with id 'x' (ended: 1 completed, 1 error), 3 response(s) (1 text) to them"
    assert change.b == "2 request(s) with id 'x' (ended: 1 completed, 1 error), 2 response(s) (0 text) to them"
    other = _diff(exact, _refused_then_corrected(False, error="boom"), strategies=strategies)
    assert {(c.field, c.a, c.b) for p in other.pairs for c in p.changes} == {
        ("error", "expected 1 inputs but got 0", "boom"),
    }


def test_a_group_whose_partners_were_on_two_calls_is_not_compared_together() -> None:
    """The other side sent the refused request and its correction on two calls: not the same requests told apart
    by the clients' timing, so each pair is compared as it is (the group's fields against each request's)."""
    b = Builder().start()
    for call, error in (("c1.1", "expected 1 inputs but got 0"), ("c2.1", None)):
        b.call(call)
        b.request(call, "x", model="scripted", empty_final=True)
        if error is not None:
            b.response(call, "x", None, error=error, model="")
        else:
            b.response(call, "x", "t-0", model="scripted")
            b.response(call, "x", None, final=True, model="scripted")
        b.half_close(call)
        b.end(call)
    result = _diff(_refused_then_corrected(False), b.finish(), strategies=("order",))
    assert [(p.a.group is None, p.b.group is None) for p in result.pairs] == [(False, True), (False, True)]
    assert not result.equivalent and "group" in {c.field for p in result.pairs for c in p.changes}


def _two_errors(first: str, second: str) -> Builder:
    """Two id-less `tokens` requests in flight together (an id group), each ended by an error final: the
    server's timing says which error comes first."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", prompt="a", empty_final=True)
    b.request("c1.1", "", prompt="b", empty_final=True)
    b.response("c1.1", "", "t-0")
    b.response("c1.1", "", None, error=first, final=True)
    b.response("c1.1", "", None, error=second, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish()


def test_an_id_groups_errors_are_compared_whichever_came_first() -> None:
    """Two errors of one id group, in either order: each row shows the group's first error, which is the
    server's timing, so the group is compared by the texts it got (it was `error: boom -> bust`, one of the
    timing differences a fuzz of two timings of one client found). Another text is a change, named."""
    ab, ba = _two_errors("boom", "bust"), _two_errors("bust", "boom")
    assert [r.error for r in summarize(ab.records).outcomes.requests] == ["boom", "boom"]
    assert [r.error for r in summarize(ba.records).outcomes.requests] == ["bust", "bust"]
    same = _diff(ab, ba, strategies=("order",))
    assert same.equivalent, [p.changes for p in same.pairs]
    other = _diff(ab, _two_errors("bust", "crash"), strategies=("order",))
    assert not other.equivalent
    assert {(c.field, tuple(c.a), tuple(c.b)) for p in other.pairs for c in p.changes} == {
        ("error", ("boom", "bust"), ("bust", "crash")),
    }
    one = _diff(ab, _two_errors("boom", "boom"), strategies=("order",))
    assert {(c.field, tuple(c.a), c.b) for p in one.pairs for c in p.changes} == {("error", ("boom", "bust"), "boom")}


def _cut(n: int, *, pace_ms: float, end_ms: float, first_ms: float = 5.0, cause: str = "client_cancel",
         texts: int | None = None) -> Builder:  # fmt: skip
    """A stream's request got ``n`` responses, the first ``first_ms`` after it, one every ``pace_ms`` (the
    first ``texts`` with text), and its client ended it ``end_ms`` after the request (a cancel, or the
    deadline: CANCELLED or DEADLINE_EXCEEDED)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "long", ms=0)
    for i in range(n):
        b.response("c1.1", "long", f"t-{i}" if texts is None or i < texts else None, ms=first_ms if i == 0 else pace_ms)
    b.cancel("c1.1", cause, rst_code=8, ms=end_ms - (b.t - b.calls["c1.1"].t0) / 1e6)
    b.end("c1.1", "CANCELLED" if cause == "client_cancel" else "DEADLINE_EXCEEDED", cause, ms=0)
    return b.finish()


def test_a_count_of_responses_cut_by_the_clients_end_at_the_same_pace_is_a_race() -> None:
    """Re-sent to the same server, a stream its client cancels 1 ms after its 3rd response (as measured live:
    tritonclient's stop_stream) gets 2 when the 3rd comes a little late, or 4 when the server is a little
    faster; a deadline of 3 s at 1 ms a token gets 2,040 or 1,859. The count is the server's pace over the
    client's window: listed as raced, not changed (every such run was `different`, found live)."""
    a = _cut(3, pace_ms=1.4, end_ms=8.4)  # responses at 5.0, 6.4, 7.8; cancel at 8.4
    late = _diff(a, _cut(2, pace_ms=1.4, end_ms=8.7, first_ms=6.0))  # 6.0, 7.4; cancelled before the 3rd
    assert late.equivalent and not late.changed
    (p,) = late.raced
    assert {c.field: (c.a, c.b) for c in p.raced} == {"responses": (3, 2), "text_responses": (3, 2)}
    assert p.cut_ms == 0.9  # B ended 0.9 ms after A had its 3rd
    assert late.to_json()["summary"]["raced"] == 1 and late.to_json()["requests"][0]["cut_ms"] == 0.9
    faster = _diff(a, _cut(5, pace_ms=0.8, end_ms=8.4, first_ms=4.0))  # 4.0 ... 7.2: two more before the cancel
    assert faster.equivalent and faster.raced[0].cut_ms == 2.0  # (A ended 2 ms after B had its 4th, at 6.4)
    deadline = _diff(_cut(524, pace_ms=5.72, end_ms=3000, cause="deadline"),
                     _cut(518, pace_ms=5.78, end_ms=3004, cause="deadline"))  # fmt: skip
    assert deadline.equivalent and deadline.raced[0].cut_ms == 36.04


def test_a_count_cut_by_the_clients_end_is_a_change_when_the_pace_moved_beyond_the_tolerance() -> None:
    """The same deadline, a server ten times slower: B's 205th response did not come by its end at 3 s,
    where A had it at ~300 ms: a change (responses and text), as before. A tolerance of 3 s takes it."""
    a, slow = _cut(2040, pace_ms=1.45, end_ms=3000, cause="deadline"), _cut(204, pace_ms=14.5, end_ms=3000, cause="deadline")
    result = _diff(a, slow)
    assert not result.equivalent and not result.raced
    assert _changes(result) == {"responses": (2040, 204), "text_responses": (2040, 204)}
    assert _diff(a, slow, threshold_ms=3000.0).equivalent
    # Just past the tolerance: A's 3rd came at 7.8 ms, B ended without it at 107.9 (100.1 ms later).
    assert not _diff(_cut(3, pace_ms=1.4, end_ms=200), _cut(2, pace_ms=1.4, end_ms=107.9)).equivalent
    assert _diff(_cut(3, pace_ms=1.4, end_ms=200), _cut(2, pace_ms=1.4, end_ms=107.7)).equivalent


def test_only_counts_ended_alike_by_the_client_can_race() -> None:
    """Another ending (the client's cancel against its deadline), another outcome, or text responses that
    moved otherwise than the count: changes, as before."""
    a = _cut(3, pace_ms=1.4, end_ms=8.4)
    other_end = _diff(a, _cut(2, pace_ms=1.4, end_ms=8.7, first_ms=6.0, cause="deadline"))
    assert not other_end.equivalent and not other_end.raced
    assert {"responses", "cause", "status"} <= set(_changes(other_end))
    fewer_texts = _diff(a, _cut(2, pace_ms=1.4, end_ms=8.7, first_ms=6.0, texts=0))  # text 3 -> 0: more than the count
    assert not fewer_texts.equivalent and not fewer_texts.raced
    more_texts = _diff(_cut(3, pace_ms=1.4, end_ms=8.4, texts=1), _cut(2, pace_ms=1.4, end_ms=8.7, first_ms=6.0))
    assert not more_texts.equivalent  # (text 1 -> 2 while the count fell)
    unpaced = _diff(_cut(1, pace_ms=1.0, end_ms=8.0), _cut(0, pace_ms=1.0, end_ms=4.0))  # B ended before A's 1st came
    assert unpaced.equivalent and unpaced.raced[0].cut_ms == -1.0


def test_a_request_that_had_its_final_before_the_client_ended_the_call_was_not_cut() -> None:
    """Three tokens and the final, then (500 ms later) the client cancels its stream, or its deadline comes:
    the request completed before that end, so two tokens in B is the server's answer, a change, as with an
    OK end (it was `raced`, equivalent: the end compared was the final's)."""

    def stream(tokens: int, end: str) -> Builder:
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "r1", ms=0)
        for i in range(tokens):
            b.response("c1.1", "r1", f"t-{i}", ms=20.0, final=i == tokens - 1)
        if end == "ok":
            b.half_close("c1.1", ms=500)
            b.end("c1.1")
        else:
            b.cancel("c1.1", end, rst_code=8, ms=500)
            b.end("c1.1", "CANCELLED" if end == "client_cancel" else "DEADLINE_EXCEEDED", end, ms=0)
        return b.finish()

    for end in ("ok", "client_cancel", "deadline"):
        result = _diff(stream(3, end), stream(2, end))
        assert not result.equivalent and not result.raced and result.pairs[0].cut_ms is None, end
        assert _changes(result) == {"responses": (3, 2), "text_responses": (3, 2)}, end


def test_how_the_tolerance_judges_a_cut_count() -> None:
    """An end long before the missing response was due raced it, however long (the durations say the rest);
    a percentage is of A's time: A's next response when A has more, A's end when it has fewer; text
    responses may fall with the count, one each at most."""
    early = _diff(_cut(1, pace_ms=1.0, end_ms=700, first_ms=600), _cut(0, pace_ms=1.0, end_ms=100))
    assert [c.field for c in early.pairs[0].changes] == ["duration_ms"]  # (700 -> 100 ms: beyond the tolerance)
    assert early.raced and early.pairs[0].cut_ms == -500.0
    # A has more (5, 105, 205 ms): B ended 25 ms after A's 3rd, beyond 10 % of its 205.
    a_more = _diff(_cut(3, pace_ms=100, end_ms=300), _cut(2, pace_ms=100, end_ms=230), threshold_ms=0.0,
                   tolerance_pct=10.0)  # fmt: skip
    assert not a_more.raced and a_more.pairs[0].cut_ms == 25.0
    # A has fewer: A ended 22 ms after B's 3rd (205 ms), within 10 % of A's end (227 ms), not of 205.
    a_fewer = _diff(_cut(2, pace_ms=100, end_ms=227), _cut(3, pace_ms=100, end_ms=300), threshold_ms=0.0,
                    tolerance_pct=10.0)  # fmt: skip
    assert a_fewer.pairs[0].cut_ms == 22.0 and a_fewer.raced
    assert [c.field for c in a_fewer.pairs[0].changes] == ["duration_ms"]  # (227 -> 300 ms: beyond 10 %)
    # A has more: B ended 15 ms after A's 3rd, within 10 % of its 205 ms (the durations, 300 -> 220, are a change).
    close = _diff(_cut(3, pace_ms=100, end_ms=300), _cut(2, pace_ms=100, end_ms=220), threshold_ms=0.0,
                  tolerance_pct=10.0)  # fmt: skip
    assert close.pairs[0].cut_ms == 15.0 and close.raced
    # ... and 22 ms after it is beyond 10 % of A's 205 ms, though within 10 % of B's end (227 ms).
    past = _diff(_cut(3, pace_ms=100, end_ms=300), _cut(2, pace_ms=100, end_ms=227), threshold_ms=0.0,
                 tolerance_pct=10.0)  # fmt: skip
    assert past.pairs[0].cut_ms == 22.0 and not past.raced
    # No tolerance at all: 0.9 ms after A had its 3rd is a change.
    assert not _diff(_cut(3, pace_ms=1.4, end_ms=8.4), _cut(2, pace_ms=1.4, end_ms=8.7, first_ms=6.0), threshold_ms=0.0).raced
    # Responses without text may make the difference: 3 (2 text) -> 2 (2 text) raced.
    assert _diff(_cut(3, pace_ms=1.4, end_ms=8.4, texts=2), _cut(2, pace_ms=1.4, end_ms=8.7, first_ms=6.0)).raced
    texts = _diff(_cut(3, pace_ms=1.4, end_ms=8.4), _cut(2, pace_ms=1.4, end_ms=8.7, first_ms=6.0, texts=1))
    assert not texts.equivalent and not texts.raced  # (3 -> 2 responses, 3 -> 1 text: one more text than count)


def test_an_id_groups_own_and_shared_errors_are_compared_together() -> None:
    """The first request's error came while it was alone with its id (its own), or once the second had
    joined (the group's): the client's timing either way, the same texts compared. Ended by the client's
    cancel, the group's requests are compared as a group, never by the pace of their own shares."""

    def joined(error_first: bool) -> Builder:
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "", prompt="a", empty_final=True)
        if error_first:
            b.response("c1.1", "", None, error="first")
        b.request("c1.1", "", prompt="b", empty_final=True)
        if not error_first:
            b.response("c1.1", "", None, error="first")
        b.response("c1.1", "", "t-0")
        b.response("c1.1", "", None, error="second", final=True)
        b.response("c1.1", "", None, final=True)
        b.half_close("c1.1")
        b.end("c1.1")
        return b.finish()

    def cancelled(answered_alone: bool) -> Builder:
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "", prompt="a", empty_final=True)
        if answered_alone:
            b.response("c1.1", "", "t-0")
        b.request("c1.1", "", prompt="b", empty_final=True)
        b.response("c1.1", "", "t-1")
        b.cancel("c1.1", "client_cancel", rst_code=8)
        b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
        return b.finish()

    same = _diff(joined(True), joined(False), strategies=("order",))
    # Nothing differs, the group's line included: it counts the first request's error either way.
    assert same.equivalent and not [c for p in same.pairs for c in p.changes]
    assert [p.a.group.errors_without_final for p in same.pairs] == [1, 1]  # type: ignore[union-attr]
    # (what the rows show differs: the first request's own error, or the group's first)
    assert [p.a.error for p in same.pairs] == ["first", "second"] and [p.b.error for p in same.pairs] == ["first"] * 2
    cut = _diff(cancelled(True), cancelled(False), strategies=("order",))
    assert [p.a.outcome for p in cut.pairs] == ["cancelled"] * 2 and [p.a.responses for p in cut.pairs] == [1, 0]
    assert all(p.cut_ms is None and not p.raced for p in cut.pairs)


def test_an_error_text_one_side_did_not_record_is_no_change() -> None:
    """The same traffic recorded with --payload meta and with none: none keeps that a response carried an
    error, not its text. diff called each such request changed (error 'backend failure' -> '(error text not
    recorded...)'); what one side did not record is no change. Another error text still is."""

    def failing(text: str) -> Builder:
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "r1")
        b.response("c1.1", "r1", error=text, final=True)
        b.half_close("c1.1")
        b.end("c1.1")
        return b.finish()

    from replay.capture import events as ev

    assert _diff(failing("backend failure"), failing(ev.NONE_ERROR_TEXT)).equivalent
    assert _diff(failing(ev.NONE_ERROR_TEXT), failing("backend failure")).equivalent
    assert _changes(_diff(failing("backend failure"), failing("other failure"))) == {
        "error": ("backend failure", "other failure")}  # fmt: skip


@pytest.mark.parametrize("payload", ["meta", "full"])
def test_a_new_request_first_in_b_does_not_take_by_order_what_a_later_ones_id_names(payload: str) -> None:
    """B is A's stream with one new request sent first: A's r1, r2, r3 pair with B's by id, and B's r0 is the
    one only in B. (One request at a time, r0's order fallback took r1, r1's took r2...: three made-up changes
    and r3 "only in B"; found against the real tritonserver.)"""

    def stream(*requests: tuple[str, int]) -> Builder:
        b = Builder(payload=payload).start()
        b.call("c1.1")
        for rid, n in requests:
            b.request("c1.1", rid, prompt=f"{rid}-{n}")
            for k in range(n):
                b.response("c1.1", rid, f"t{k}")
            b.response("c1.1", rid, None, final=True)
        b.half_close("c1.1")
        b.end("c1.1")
        return b.finish()

    result = _diff(stream(("r1", 1), ("r2", 2), ("r3", 3)), stream(("r0", 4), ("r1", 1), ("r2", 2), ("r3", 3)))
    assert [(p.a.request_id, p.b.request_id, p.by, p.changes) for p in result.pairs] == [
        ("r1", "r1", "id", ()), ("r2", "r2", "id", ()), ("r3", "r3", "id", ()),
    ]  # fmt: skip
    assert [r.request_id for r in result.only_b] == ["r0"] and result.only_a == ()


def test_an_order_match_waits_for_every_id_match() -> None:
    """B's first request (new id) falls back to order only among the candidates no id of B names: A's "old"
    (whose id B does not send), not A's "z", which B's later "z" names."""
    result = _diff(_requests("z", "old"), _requests("new", "z"))
    assert [(p.a.request_id, p.b.request_id, p.by) for p in result.pairs] == [("old", "new", "order"), ("z", "z", "id")]
    assert result.only_b == () and result.only_a == ()


def _asked(ready: bool, model: str = "tokens") -> Builder:
    """A stream, then one ModelReady call for ``model`` answered ``ready``, labelled as the proxy labels it."""
    b = _stream()
    b.records.pop()  # reopen: drop capture_end
    b.call("c2.1", method="/inference.GRPCInferenceService/ModelReady")
    b.ask("c2.1", pb.ModelReadyRequest(name=model), pb.ModelReadyResponse(ready=ready))
    b.end("c2.1")
    return b.finish()


def test_a_model_that_stopped_being_ready_is_a_change() -> None:
    """ModelReady answered true in A and false in B: both calls are OK, only the answer says it (diff said
    "equivalent"; found against the real tritonserver, the model unloaded between the runs)."""
    assert _diff(_asked(True), _asked(True)).equivalent
    result = _diff(_asked(True), _asked(False))
    assert not result.equivalent
    assert {c.field: (c.a, c.b) for c in result.calls} == {
        "ModelReady tokens OK ready": (1, 0),
        "ModelReady tokens OK not ready": (0, 1),
    }


def test_ready_calls_for_different_models_are_not_one_count() -> None:
    """One model asked in A, another in B, both ready: the model a request named is part of what is compared."""
    result = _diff(_asked(True, "tokens"), _asked(True, "echo"))
    assert {c.field: (c.a, c.b) for c in result.calls} == {
        "ModelReady tokens OK ready": (1, 0),
        "ModelReady echo OK ready": (0, 1),
    }


def test_a_capture_from_before_readiness_requests_named_their_model_is_compared_without_it() -> None:
    """A baseline recorded before the proxy recorded the model a ModelReady names, against the same traffic
    recorded after: equivalent, not `ModelReady OK ready 1 -> 0` and `ModelReady tokens OK ready 0 -> 1`. The
    readiness answer, read off the size in both, still counts."""
    old = _asked(True)
    old.records = [dataclasses.replace(r, model=None, model_version=None) if r.kind == "message" and r.call == "c2.1" else r
                   for r in old.records]  # fmt: skip
    assert _diff(old, _asked(True)).equivalent and _diff(_asked(True), old).equivalent
    result = _diff(old, _asked(False))
    assert {c.field: (c.a, c.b) for c in result.calls} == {"ModelReady OK ready": (1, 0), "ModelReady OK not ready": (0, 1)}


@pytest.mark.parametrize("flagged", [True, False], ids=["refused", "older-proxy-words"])
def test_a_call_refused_unprocessed_is_left_out_and_counted(flagged: bool) -> None:
    """A call the proxy refused (it crossed a GOAWAY: REFUSED_STREAM, ``call_end.refused``) never ran, and its
    client sent it again as a call of its own: compared, that attempt would be a request only in A. A proxy from
    before the ``refused`` field said so only in its details (and ``cause`` ``error``)."""
    a = Builder(payload="meta").start()
    a.call("c1.3")
    a.request("c1.3", "r1")
    a.tick()
    a.records.append(ev.CallEnded(t_ns=a.t, call="c1.3", status="UNAVAILABLE",
                                  cause="upstream_disconnect" if flagged else "error",
                                  details=ev.REFUSED_ABOVE_UPSTREAM_GOAWAY, trailers=None,
                                  initial_metadata=None, duration_ms=1.0, messages_c2s=1, messages_s2c=0,
                                  upstream_rst_code=7, refused=flagged))  # fmt: skip
    a.call("c2.1")
    a.request("c2.1", "r1")
    a.response("c2.1", "r1", "hi-0", ms=5.0)
    a.response("c2.1", "r1", None, final=True)
    a.half_close("c2.1")
    a.end("c2.1")
    result = _diff(a.finish(), _stream())
    assert result.equivalent and len(result.pairs) == 1 and not result.only_a
    assert (result.refused_a, result.refused_b) == (1, 0)
    assert result.to_json()["summary"]["refused_a"] == 1

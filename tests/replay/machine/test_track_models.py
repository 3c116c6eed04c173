"""Requests with one id to different models on one stream: Triton names the model in each response but its
refusal of a request, so the tracker attributes by id and model, and places a refusal by what follows it.

The shapes are Triton 2.51's, seen live (tests/e2e/test_idless_e2e.py drives the same through the real
server): a normal or empty final response carries the request's `model_name`, a model's error too; the
refusal of a request (an unknown model, a missing input) carries only the id, and nothing follows it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from replay.cli.check import check
from replay.machine.outcomes import RequestOutcome
from replay.machine.tracker import Tracker, track
from tests.data.make_golden import Builder

REFUSAL = "Request for unknown model: 'nosuch' is not found"


def _rows(b: Builder) -> list[tuple[str | None, str, int, list[str], list[str]]]:
    return [(r.model, r.outcome, r.responses, list(r.notes), [v.name for v in r.violations])
            for r in track(b.records).requests]  # fmt: skip


def _two_models(b: Builder, *, second: str = "silent") -> None:
    b.call("c1.1")
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.request("c1.1", "", model=second, empty_final=True)


def test_id_less_requests_to_two_models_are_each_attributed_exactly() -> None:
    """Interleaved responses of `tokens` and `silent`, both id "": each request's own, not one group's."""
    b = Builder().start()
    _two_models(b)
    b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", None, final=True, model="silent")
    b.response("c1.1", "", "a-1", model="tokens")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(b.records)
    assert [(r.model, r.outcome, r.responses, r.text_responses, r.group) for r in result.requests] == [
        ("tokens", "completed", 3, 2, None), ("silent", "completed", 1, 0, None),
    ]  # fmt: skip
    assert result.ok and result.unattributable == ()


def test_a_models_error_is_its_own_requests_not_the_other_models() -> None:
    """`fail_midstream`'s error names its model: that request is `error`, the other one `completed`."""
    b = Builder().start()
    _two_models(b, second="fail_midstream")
    b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", "b-0", model="fail_midstream")
    b.response("c1.1", "", None, final=True, error="backend failure", model="fail_midstream")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    assert _rows(b) == [("tokens", "completed", 2, [], []), ("fail_midstream", "error", 2, [], [])]


def test_a_refusal_naming_no_model_is_the_request_that_got_nothing_else() -> None:
    """The refusal comes first, while both are open: whose it was shows when `tokens` answers (a refused
    request gets nothing more). `nosuch` is `error` (owes no final), `tokens` `completed`: exit 0."""
    b = Builder().start()
    _two_models(b, second="nosuch")
    b.response("c1.1", "", None, error=REFUSAL, model="")
    b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    assert _rows(b) == [("tokens", "completed", 2, [], []), ("nosuch", "error", 1, ["missing_final"], [])]
    (r,) = [r for r in track(b.records).requests if r.model == "nosuch"]
    assert r.error == REFUSAL


def test_a_refusal_after_one_request_was_answered_is_the_others_at_once() -> None:
    """A request alone with its id that got an answer was not refused: the refusal is the other's."""
    b = Builder().start()
    _two_models(b, second="nosuch")
    b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", None, error=REFUSAL, model="")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    assert _rows(b) == [("tokens", "completed", 2, [], []), ("nosuch", "error", 1, ["missing_final"], [])]


def test_a_refusal_the_wire_cannot_place_leaves_its_candidates_one_group() -> None:
    """Neither request gets anything else before the call ends: either could have been refused, so the
    two are one group (known only together), the refusal counted for it; nothing is invented."""
    b = Builder().start()
    _two_models(b, second="nosuch")
    b.response("c1.1", "", None, error=REFUSAL, model="")
    b.cancel("c1.1", "client_cancel")
    b.end("c1.1", status="CANCELLED")
    result = track(b.records)
    assert [r.outcome for r in result.requests] == ["group", "group"]
    g = result.requests[0].group
    assert g is not None and g == result.requests[1].group
    assert (g.requests, g.responses, g.errors_without_final) == (2, 1, 1)


def test_a_response_naming_no_model_while_two_are_open_makes_them_one_group() -> None:
    """Not shaped like a refusal (no error): either request's, so the two are counted together from then on;
    what each got before stays its own."""
    b = Builder().start()
    _two_models(b)
    b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", "?", model="")
    b.response("c1.1", "", None, final=True, model="silent")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(b.records)
    assert [(r.outcome, r.responses) for r in result.requests] == [("completed", 1), ("completed", 0)]
    g = result.requests[0].group
    assert g is not None and g == result.requests[1].group
    assert (g.requests, g.responses, g.text_responses, g.ended) == (2, 3, 1, {"completed": 2})


def test_two_requests_to_one_model_and_one_to_another_keep_their_group_and_their_own() -> None:
    """`tokens` twice with id "" is a group as before; `silent` beside them is exact."""
    b = Builder().start()
    _two_models(b)
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", None, final=True, model="silent")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(b.records)
    rows = [(r.model, r.outcome, r.group.requests if r.group else None) for r in result.requests]
    assert rows == [("tokens", "completed", 2), ("silent", "completed", None), ("tokens", "completed", 2)]


def test_the_report_and_summaries_are_told_of_a_parked_refusal_when_it_comes() -> None:
    """Observers (report, summarize) learn of each response while it is fed: a refusal placed later is
    drawn when it comes, on the lane of the latest request that could have caused it, and once."""
    b = Builder().start()
    _two_models(b, second="nosuch")
    b.response("c1.1", "", None, error=REFUSAL, model="")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    seen, _ = _observed(b)
    assert [(s, q) for _, q, s, _ in seen] == [(4, 3), (5, 2)]  # the requests are seq 2 (tokens) and 3 (nosuch)


class _Sink:
    def __init__(self) -> None:
        self.outcomes: list[RequestOutcome] = []

    def settled(self, call_pos: int, outcome: RequestOutcome) -> None:
        self.outcomes.append(outcome)

    def call_over(self, call_pos: int, status: str | None, outcomes: list[RequestOutcome]) -> None:
        self.outcomes.extend(outcomes)


def test_check_streaming_its_outcomes_places_the_refusal_alike(tmp_path: Path) -> None:
    """`check --json` hands outcomes to a sink as they settle: a request answered after a parked refusal is
    not handed over before the refusal is placed, and the document says what the in-memory result says."""
    b = Builder().start()
    _two_models(b, second="nosuch")
    b.response("c1.1", "", None, error=REFUSAL, model="")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.request("c1.1", "", model="tokens", empty_final=True)  # (the first `tokens` request can be retired)
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    path = tmp_path / "capture.jsonl"
    path.write_bytes(b.finish().render())
    out = io.StringIO()
    assert check([str(path)], as_json=True, out=out, err=io.StringIO()) == 0
    doc = json.loads(out.getvalue())
    assert [(r["model"], r["outcome"]) for r in doc["requests"]] == [
        ("tokens", "completed"), ("nosuch", "error"), ("tokens", "completed"),
    ]  # fmt: skip
    sink = _Sink()
    t = Tracker(sink=sink)
    for seq, rec in enumerate(b.records):
        t.feed(seq, rec)
    t.finish()
    assert sorted((o.seq, o.outcome) for o in sink.outcomes) == [(2, "completed"), (3, "error"), (6, "completed")]


def test_a_refusal_is_drawn_on_the_request_it_is_placed_on_when_the_wire_already_tells() -> None:
    """`nosuch` sent first, `tokens` after it and answered before the refusal came: the refusal is placed at
    once, so it is drawn on `nosuch`'s lane, not on the latest request's."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", model="nosuch", empty_final=True)
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", None, error=REFUSAL, model="")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    seen, result = _observed(b)
    assert [(s, q) for _, q, s, _ in seen] == [(4, 3), (5, 2), (6, 3)]
    assert [(r.model, r.outcome) for r in result.requests] == [("nosuch", "error"), ("tokens", "completed")]


def _two_groups() -> Builder:
    """Two `tokens` requests and two `silent` ones, id "", sent in turn: two groups (seq 2 to 5)."""
    b = Builder().start()
    b.call("c1.1")
    for model in ("tokens", "silent", "tokens", "silent"):
        b.request("c1.1", "", model=model, empty_final=True)
    return b


def test_groups_made_one_add_up_and_keep_the_first_error_by_when_it_came() -> None:
    """Two shared groups (two requests each, one model each) made one by a response naming no model: the
    members in the order sent, what each group counted added up, the first response and the first error
    the ones that came first (the later-sent group's response, the earlier-sent group's error)."""
    b = _two_groups()
    b.response("c1.1", "", "s-0", model="silent")  # 6: the first response
    b.response("c1.1", "", None, error="tokens first", model="tokens")  # 7: the first error
    b.response("c1.1", "", None, error="silent second", model="silent")
    b.response("c1.1", "", None, final=True, model="silent")
    b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", "?", model="")
    for model in ("tokens", "tokens", "silent"):
        b.response("c1.1", "", None, final=True, model=model)
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(b.records)
    assert [r.model for r in result.requests] == ["tokens", "silent", "tokens", "silent"]
    groups = [r.group for r in result.requests]
    g = groups[0]
    assert g is not None and all(x == g for x in groups)
    assert (g.first_seq, g.requests, g.responses, g.text_responses, g.errors_without_final) == (2, 4, 9, 3, 2)
    assert g.ended == {"completed or error": 4}
    assert g.first_response_ms == 8.0  # (s-0's time after the first request; a-0 came later)
    assert {r.error for r in result.requests} == {"tokens first"}
    assert g.error_texts == ("silent second", "tokens first")  # (both groups': made one, they add up)


def test_groups_made_one_keep_the_first_of_each_whichever_group_it_was_in() -> None:
    """As above with the roles turned: the earlier-sent group's response first, the later-sent group's
    error first, and finals counted in both groups before they were made one."""
    b = _two_groups()
    b.response("c1.1", "", "a-0", model="tokens")  # 6: the first response
    b.response("c1.1", "", None, error="silent first", model="silent")  # 7: the first error
    b.response("c1.1", "", None, error="tokens second", model="tokens")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.response("c1.1", "", None, final=True, model="silent")
    b.response("c1.1", "", "?", model="")
    for model in ("tokens", "silent"):
        b.response("c1.1", "", None, final=True, model=model)
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(b.records)
    g = result.requests[0].group
    assert g is not None and all(r.group == g for r in result.requests)
    assert (g.responses, g.text_responses, g.errors_without_final, g.ended) == (8, 2, 2, {"completed or error": 4})
    assert g.first_response_ms == 8.0
    assert {r.error for r in result.requests} == {"silent first"}


def test_a_refusal_is_placed_by_the_answers_of_a_request_that_never_got_its_final() -> None:
    """`tokens` did not ask for empty finals, so its last text carries no flag and it is open to the end:
    its answers alone say the refusal, which came first, was not its own."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", model="tokens", empty_final=False)
    b.request("c1.1", "", model="nosuch", empty_final=False)
    b.response("c1.1", "", None, error=REFUSAL, model="")
    b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", "a-1", model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    assert _rows(b) == [("tokens", "unconfirmed", 2, [], []), ("nosuch", "error", 1, ["missing_final"], [])]


def _both(b: Builder) -> list[tuple[int, str | None, str, int, tuple[str, ...], tuple[str, ...], Any]]:
    """Each request's row, the same whether the tracker keeps every outcome or hands them to a sink as they
    settle (as `check` does): asserted here, the rows returned."""

    def row(r: RequestOutcome) -> tuple[int, str | None, str, int, tuple[str, ...], tuple[str, ...], Any]:
        g = r.group
        return (r.seq, r.model, r.outcome, r.responses, r.notes, tuple(v.name for v in r.violations),
                None if g is None else (g.requests, g.responses, g.errors_without_final, g.ended))  # fmt: skip

    kept = [row(r) for r in track(b.records).requests]
    sink = _Sink()
    t = Tracker(sink=sink)
    for seq, rec in enumerate(b.records):
        t.feed(seq, rec)
    t.finish()
    assert sorted(row(r) for r in sink.outcomes) == sorted(kept)
    return kept


def test_a_parked_error_is_placed_before_what_the_request_left_gets_next() -> None:
    """An error naming no model, then a final for each request (not Triton 2.51's way: its refusal is a
    request's one answer). `tokens`'s final shows it was not refused, so the error is `silent`'s, placed
    then, before `silent`'s own final: no `response_after_final` the wire did not show, exit 0."""
    b = Builder().start()
    _two_models(b)
    b.response("c1.1", "", None, error="boom", model="")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.response("c1.1", "", None, final=True, model="silent")
    b.half_close("c1.1")
    b.end("c1.1")
    assert _both(b) == [(2, "tokens", "completed", 1, (), (), None), (3, "silent", "error", 2, (), (), None)]


def test_a_request_handed_over_early_never_misses_an_error_placed_later() -> None:
    """`check` hands a request over once a later request of its id and model took its place: the error
    parked on it is placed before that, so what `check` prints is what the whole result says."""
    b = Builder().start()
    _two_models(b)
    b.response("c1.1", "", None, error="boom", model="")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.response("c1.1", "", None, final=True, model="silent")
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.request("c1.1", "", model="silent", empty_final=True)
    b.response("c1.1", "", None, final=True, model="tokens")
    b.response("c1.1", "", None, final=True, model="silent")
    b.half_close("c1.1")
    b.end("c1.1")
    rows = _both(b)
    assert [(r[1], r[2], r[3]) for r in rows] == [
        ("tokens", "completed", 1), ("silent", "error", 2), ("tokens", "completed", 1), ("silent", "completed", 1),
    ]  # fmt: skip


def test_an_error_parked_on_groups_made_one_is_that_groups_before_their_finals() -> None:
    """An error naming no model, then a response naming none that is no error: the two requests are one
    group from there, the parked error its error without the flag, counted before the finals."""
    b = Builder().start()
    _two_models(b)
    b.response("c1.1", "", None, error="boom", model="")
    b.response("c1.1", "", "?", model="")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.response("c1.1", "", None, final=True, model="silent")
    b.half_close("c1.1")
    b.end("c1.1")
    group = (2, 4, 1, {"completed": 1, "error": 1})
    assert _both(b) == [(2, "tokens", "group", 0, (), (), group), (3, "silent", "group", 0, (), (), group)]
    # Observers are told of the parked error when it came, with its record and call, and not again once placed.
    seen, _ = _observed(b)
    assert [(c, q, s) for c, q, s, _ in seen] == [("c1.1", 3, 4), ("c1.1", 3, 5), ("c1.1", 3, 6), ("c1.1", 3, 7)]
    assert [i for *_, i in seen] == [id(b.records[s]) for s in (4, 5, 6, 7)]
    g = track(b.records).requests[0].group
    assert g is not None and g.first_response_ms == 6.0  # (the error's time, not the later "?"'s: 11.0)


def test_an_error_placed_late_in_a_group_is_its_first_by_when_it_came() -> None:
    """Two `tokens` requests (a group) and one `silent`, id "": an error naming no model, then a `tokens` error
    and text, the call cancelled. The parked error is placed at the end, on all three as one group: the
    group's first response and first error are still the parked one's, which came first."""
    b = Builder().start()
    _two_models(b)
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.response("c1.1", "", None, error="parked", model="")
    b.response("c1.1", "", "a-0", error="later", model="tokens")
    b.cancel("c1.1", "client_cancel")
    b.end("c1.1", status="CANCELLED")
    result = track(b.records)
    g = result.requests[0].group
    assert g is not None and all(r.group == g for r in result.requests)
    assert (g.requests, g.responses, g.first_response_ms) == (3, 2, 7.0)  # (the parked error's time: 12.0 after)
    assert {r.error for r in result.requests} == {"parked"}


def _observed(b: Builder) -> tuple[list[tuple[str, int, int, int]], Any]:
    """What an observer (report, summarize) is told, (call, request seq, seq, id of the record), and the result."""
    seen: list[tuple[str, int, int, int]] = []
    t = Tracker(on_response=lambda call, req_seq, seq, rec: seen.append((call, req_seq, seq, id(rec))))
    for seq, rec in enumerate(b.records):
        t.feed(seq, rec)
    return seen, t.finish()


def test_groups_made_one_leave_a_third_models_group_its_own() -> None:
    """`tokens` and `silent` made one group by a response naming no model; `echo`'s request of the same id,
    over before that, keeps its responses: a late one naming `echo` is its `response_after_final`."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", model="echo", empty_final=True)
    b.response("c1.1", "", None, final=True, model="echo")
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.request("c1.1", "", model="silent", empty_final=True)
    b.response("c1.1", "", "?", model="")
    b.response("c1.1", "", "late", model="echo")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.response("c1.1", "", None, final=True, model="silent")
    b.half_close("c1.1")
    b.end("c1.1")
    rows = [(r.model, r.outcome, r.responses, [v.name for v in r.violations]) for r in track(b.records).requests]
    assert rows == [("echo", "completed", 2, ["response_after_final"]), ("tokens", "completed", 0, []),
                    ("silent", "completed", 0, [])]  # fmt: skip


def test_a_response_naming_no_model_goes_to_the_one_group_of_its_id_still_open() -> None:
    """`tokens` is over, `silent` open: a text naming no model is `silent`'s own (no group made of the two);
    one naming a model no request of the id went to, likewise."""
    for model in ("", "ensemble"):
        b = Builder().start()
        _two_models(b)
        b.response("c1.1", "", None, final=True, model="tokens")
        b.response("c1.1", "", "?", model=model)
        b.response("c1.1", "", None, final=True, model="silent")
        b.half_close("c1.1")
        b.end("c1.1")
        assert _rows(b) == [("tokens", "completed", 1, [], []), ("silent", "completed", 2, [], [])], model


def test_a_response_naming_a_model_no_request_went_to_while_two_are_open_makes_them_one_group() -> None:
    b = Builder().start()
    _two_models(b)
    b.response("c1.1", "", "?", model="ensemble")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.response("c1.1", "", None, final=True, model="silent")
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(b.records)
    g = result.requests[0].group
    assert g is not None and g == result.requests[1].group and (g.requests, g.responses) == (2, 3)


def test_requests_of_two_models_handed_over_as_they_settle_lose_nothing() -> None:
    """With a sink, a `tokens` request over before a later `silent` request replaced `silent`'s group stays
    in the tracker until `tokens`'s group is replaced: a late `tokens` response still reaches it."""
    b = Builder().start()
    _two_models(b)
    b.response("c1.1", "", None, final=True, model="silent")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.request("c1.1", "", model="silent", empty_final=True)  # replaces silent's group: hand-over time
    b.response("c1.1", "", "late", model="tokens")
    b.response("c1.1", "", None, final=True, model="silent")
    b.half_close("c1.1")
    b.end("c1.1")
    rows = _both(b)
    assert [(r[1], r[2], r[3], r[5]) for r in rows] == [
        ("tokens", "completed", 2, ("response_after_final",)), ("silent", "completed", 1, ()),
        ("silent", "completed", 1, ()),
    ]  # fmt: skip


def test_two_parked_refusals_are_each_placed() -> None:
    """A refusal while `tokens` and `nosuch` are open, then `other` sent and a second refusal while all three
    are: `tokens`'s text places the first on `nosuch`, and `nosuch`, refused, gets nothing more, so the
    second is `other`'s; neither error is lost."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.request("c1.1", "", model="nosuch", empty_final=True)
    b.response("c1.1", "", None, error="first", model="")
    b.request("c1.1", "", model="other", empty_final=True)
    b.response("c1.1", "", None, error="second", model="")
    b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.cancel("c1.1", "client_cancel")
    b.end("c1.1", status="CANCELLED")
    result = track(b.records)
    rows = [(r.model, r.outcome, r.responses, r.error, r.group and r.group.errors_without_final) for r in result.requests]
    assert rows == [("tokens", "completed", 2, None, None), ("nosuch", "error", 1, "first", None),
                    ("other", "error", 1, "second", None)]  # fmt: skip


def test_refusals_as_many_as_the_requests_they_could_be_of_pin_each_as_error() -> None:
    """Two requests with id "", both refused (an unknown model, a missing input) and nothing else: whose
    refusal is whose the wire does not say, but each request got one, so each is `error`, owes no final
    (no `missing_final` violation), and the group says `{"error": 2}` (it said `unconfirmed or error`)."""
    b = Builder().start()
    _two_models(b, second="nosuch")
    b.response("c1.1", "", None, error="missing input", model="")
    b.response("c1.1", "", None, error=REFUSAL, model="")
    b.half_close("c1.1")
    b.end("c1.1")
    rows = _both(b)
    assert [(r[2], r[5]) for r in rows] == [("error", ()), ("error", ())]
    assert rows[0][6] == (2, 2, 2, {"error": 2}) and rows[1][6] == rows[0][6]
    assert all(r.final is None for r in track(b.records).requests)  # (whose final: none came)


def test_a_shared_group_rules_itself_out_only_when_its_last_final_comes() -> None:
    """Two `tokens` requests (a group) and `silent`, id "", an error naming no model parked on both: one
    final of the group says nothing (either `tokens` request may have been refused); `silent`'s text
    rules `silent` out, so the error is the group's; when the group's last final rules it out
    instead, the error is `silent`'s."""
    def run(silent_answers: bool) -> list[tuple[str | None, str, int, Any]]:
        b = Builder().start()
        _two_models(b)
        b.request("c1.1", "", model="tokens", empty_final=True)
        b.response("c1.1", "", None, error="boom", model="")
        b.response("c1.1", "", None, final=True, model="tokens")
        if silent_answers:
            b.response("c1.1", "", "s", model="silent")
        b.response("c1.1", "", None, final=True, model="tokens")
        b.cancel("c1.1", "client_cancel")
        b.end("c1.1", status="CANCELLED")
        return [(r.model, r.outcome, r.responses, r.group and (r.group.errors_without_final, r.group.ended))
                for r in track(b.records).requests]  # fmt: skip

    grouped = (1, {"completed": 1, "error": 1})
    assert run(True) == [("tokens", "group", 0, grouped), ("silent", "cancelled", 1, None),
                         ("tokens", "group", 0, grouped)]  # fmt: skip
    assert run(False) == [("tokens", "completed", 0, (0, {"completed": 2})), ("silent", "error", 1, None),
                          ("tokens", "completed", 0, (0, {"completed": 2}))]  # fmt: skip


def test_a_request_of_another_id_on_a_call_with_two_models_is_handed_over_only_once_replaced() -> None:
    """id "" goes to two models, id "x" to one: `x`'s request, over, stays until a later "x" replaces it, so
    a late "x" response still reaches it with a sink as without."""
    b = Builder().start()
    _two_models(b)
    b.request("c1.1", "x", model="tokens", empty_final=True)
    for rid, model in (("", "tokens"), ("", "silent"), ("x", "tokens")):
        b.response("c1.1", rid, None, final=True, model=model)
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.request("c1.1", "", model="silent", empty_final=True)  # the hand-over of the first two
    b.response("c1.1", "x", "late", model="tokens")
    for model in ("tokens", "silent"):
        b.response("c1.1", "", None, final=True, model=model)
    b.half_close("c1.1")
    b.end("c1.1")
    rows = _both(b)
    assert [(r[1], r[3], r[5]) for r in rows] == [
        ("tokens", 1, ()), ("silent", 1, ()), ("tokens", 2, ("response_after_final",)), ("tokens", 1, ()),
        ("silent", 1, ()),
    ]  # fmt: skip


def test_a_request_sent_after_its_id_and_models_refusal_is_a_group_of_its_own() -> None:
    """A request refused (missing an input), then the client's corrected one with the same id and model,
    while the first has no final: nothing follows a refusal, so the second does not join the first (it
    did: both `group`, known only together); the first is `error`, the second `completed`."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", model="scripted", empty_final=True)
    b.response("c1.1", "", None, error="expected 1 inputs but got 0", model="")
    b.request("c1.1", "", model="scripted", empty_final=True)
    b.response("c1.1", "", "t-0", model="scripted")
    b.response("c1.1", "", None, final=True, model="scripted")
    b.half_close("c1.1")
    b.end("c1.1")
    assert _both(b) == [(2, "scripted", "error", 1, ("missing_final",), (), None),
                        (4, "scripted", "completed", 2, (), (), None)]  # fmt: skip
    # A refused request is done when refused (its duration is not the call's: diff compares durations).
    assert [r.duration_ms for r in track(b.records).requests] == [5.0, 10.0]


def test_a_models_error_without_the_flag_keeps_its_request_open_to_what_follows() -> None:
    """An error naming its model is the model's (more may follow, and its final), and so is one naming none
    after an answer (a refusal is a request's first): a request sent after it with the same id and model
    joins the first, as before."""
    for model, before in (("scripted", False), ("", True)):
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "", model="scripted", empty_final=True)
        if before:
            b.response("c1.1", "", "t-0", model="scripted")
        b.response("c1.1", "", None, error="model error", model=model)
        b.request("c1.1", "", model="scripted", empty_final=True)
        b.response("c1.1", "", None, final=True, model="scripted")
        b.response("c1.1", "", None, final=True, model="scripted")
        b.half_close("c1.1")
        b.end("c1.1")
        rows = _both(b)
        assert [r[2] for r in rows] == ["group", "group"], model
        # (the group's errors without the flag: the first request's own too, from while it was alone)
        assert rows[0][6] == (2, 2, 1, {"completed": 1, "error": 1}), model
        assert rows[0][3] == 1 + before  # (its own: what came while it was alone)


def test_a_final_after_a_refusal_does_not_reopen_its_id() -> None:
    """A server that sends a final after its refusal of a request (2.51 does not): the final is that
    request's, and a request sent after it with its id and model is still one of its own (the group's
    count of open requests went below zero, and the next request joined the refused one)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.response("c1.1", "", None, error="refused", model="")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    rows = _both(b)
    assert [(r[2], r[3], r[6]) for r in rows] == [("error", 2, None), ("completed", 1, None)]


def test_a_parked_error_no_candidate_is_left_for_goes_to_the_request_answered_then() -> None:
    """Two errors naming no model while `tokens` and `silent` are open, then `tokens` answers: the first is
    `silent`'s, `silent` (refused) gets nothing more, and no candidate is left for the second (not 2.51's
    way): it is `tokens`'s, placed before that answer; nothing is lost and nothing raises."""
    b = Builder().start()
    _two_models(b)
    b.response("c1.1", "", None, error="first", model="")
    b.response("c1.1", "", None, error="second", model="")
    b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    rows = _both(b)
    assert [(r[1], r[2], r[3], r[5]) for r in rows] == [("tokens", "error", 3, ()), ("silent", "error", 1, ())]
    assert [r.error for r in track(b.records).requests] == ["second", "first"]


def _refused_then_corrected(b: Builder) -> None:
    """`tokens` and `scripted` (missing an input) sent with id "", the refusal while neither has answered,
    then the client's corrected `scripted` request, sent before `tokens` answers."""
    b.call("c1.1")
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.request("c1.1", "", model="scripted", empty_final=True)
    b.response("c1.1", "", None, error="expected 1 inputs but got 0", model="")
    b.request("c1.1", "", model="scripted", empty_final=True)


def test_a_request_corrected_while_the_refusal_is_still_unplaced_is_its_own_once_it_is_placed() -> None:
    """The corrected request is sent while the refusal could still be `tokens`'s. Once `tokens` answers, the
    refusal is the first `scripted` request's, sent before it came: the corrected one, sent after it, never
    was in flight with a request that could still answer (it was: both `group`, and a `diff` against a run
    whose `tokens` answered before the correction said `group -> completed`, from the server's timing)."""
    b = Builder().start()
    _refused_then_corrected(b)
    b.response("c1.1", "", "t-0", model="scripted")
    b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", None, final=True, model="scripted")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    expected = [(2, "tokens", "completed", 2, (), (), None),
                (3, "scripted", "error", 1, ("missing_final",), (), None),
                (5, "scripted", "completed", 2, (), (), None)]  # fmt: skip
    assert _both(b) == expected
    # The same client, `tokens` answering before the correction is sent: the same rows.
    c = Builder().start()
    c.call("c1.1")
    c.request("c1.1", "", model="tokens", empty_final=True)
    c.request("c1.1", "", model="scripted", empty_final=True)
    c.response("c1.1", "", None, error="expected 1 inputs but got 0", model="")
    c.response("c1.1", "", "a-0", model="tokens")
    c.request("c1.1", "", model="scripted", empty_final=True)
    c.response("c1.1", "", "t-0", model="scripted")
    c.response("c1.1", "", None, final=True, model="scripted")
    c.response("c1.1", "", None, final=True, model="tokens")
    c.half_close("c1.1")
    c.end("c1.1")
    assert [row[1:] for row in _both(c)] == [row[1:] for row in expected]
    (corrected,) = [r for r in track(b.records).requests if r.seq == 5]
    assert corrected.error is None and corrected.text_responses == 1 and corrected.first_response_ms is not None


def test_two_corrected_requests_sent_while_the_refusal_is_unplaced_are_their_own_group() -> None:
    """Two corrections in flight together after the refusal: they are an id group of their own (the refused
    request is not of it) once `tokens`'s answer places the refusal."""
    b = Builder().start()
    _refused_then_corrected(b)
    b.request("c1.1", "", model="scripted", empty_final=True)
    b.response("c1.1", "", "t-0", model="scripted")
    b.response("c1.1", "", None, final=True, model="scripted")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.response("c1.1", "", None, final=True, model="scripted")
    b.half_close("c1.1")
    b.end("c1.1")
    assert _both(b) == [(2, "tokens", "completed", 1, (), (), None),
                        (3, "scripted", "error", 1, ("missing_final",), (), None),
                        (5, "scripted", "completed", 0, (), (), (2, 3, 0, {"completed": 2})),
                        (6, "scripted", "completed", 0, (), (), (2, 3, 0, {"completed": 2}))]  # fmt: skip


def test_a_correction_sent_while_the_refusal_is_unplaced_joins_when_the_refusal_is_the_other_models() -> None:
    """The refusal was `tokens`'s after all (its request got nothing, both `scripted` requests their finals):
    the two `scripted` requests were in flight together, one group, as before."""
    b = Builder().start()
    _refused_then_corrected(b)
    b.response("c1.1", "", "t-0", model="scripted")
    b.response("c1.1", "", None, final=True, model="scripted")
    b.response("c1.1", "", None, final=True, model="scripted")
    b.half_close("c1.1")
    b.end("c1.1")
    assert _both(b) == [(2, "tokens", "error", 1, ("missing_final",), (), None),
                        (3, "scripted", "completed", 0, (), (), (2, 3, 0, {"completed": 2})),
                        (5, "scripted", "completed", 0, (), (), (2, 3, 0, {"completed": 2}))]  # fmt: skip


def test_a_correction_is_placed_once_a_third_models_answer_leaves_two_candidates_and_the_next_one() -> None:
    """Three models: `silent`'s answer leaves the refusal to `tokens` or `scripted` (still kept: whose it was
    is not known yet), `tokens`'s answer then places it on the first `scripted` request."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.request("c1.1", "", model="silent", empty_final=True)
    b.request("c1.1", "", model="scripted", empty_final=True)
    b.response("c1.1", "", None, error="expected 1 inputs but got 0", model="")
    b.request("c1.1", "", model="scripted", empty_final=True)
    b.response("c1.1", "", "t-0", model="scripted")
    b.response("c1.1", "", None, final=True, model="silent")
    b.response("c1.1", "", None, final=True, model="scripted")
    b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    assert _both(b) == [(2, "tokens", "completed", 2, (), (), None),
                        (3, "silent", "completed", 1, (), (), None),
                        (4, "scripted", "error", 1, ("missing_final",), (), None),
                        (6, "scripted", "completed", 2, (), (), None)]  # fmt: skip


def test_a_correction_in_groups_made_one_before_the_refusal_is_placed_stays_known_only_together() -> None:
    """A response naming no model that is no error makes the open groups of the id one before anything
    placed the refusal: the correction stays in that group (what was counted together is not split)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", model="scripted", empty_final=True)
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.response("c1.1", "", None, error="expected 1 inputs but got 0", model="")
    b.request("c1.1", "", model="scripted", empty_final=True)
    b.response("c1.1", "", "t-0", model="")
    b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.response("c1.1", "", None, final=True, model="scripted")
    b.half_close("c1.1")
    b.end("c1.1")
    rows = _both(b)
    assert [row[2] for row in rows] == ["group"] * 3
    assert [row[6] for row in rows] == [(3, 5, 1, {"completed": 2, "error": 1})] * 3


def test_what_a_correction_got_is_given_again_in_order_with_its_own_violations() -> None:
    """A response after the corrected request's final, while the refusal is unplaced: once placed, it is that
    request's `response_after_final`, at the seq it came; a group of corrections keeps its id."""
    b = Builder().start()
    _refused_then_corrected(b)
    b.response("c1.1", "", None, final=True, model="scripted")
    b.response("c1.1", "", "t-1", model="scripted")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    (corrected,) = [r for r in track(b.records).requests if r.seq == 5]
    assert [(v.name, v.seq) for v in corrected.violations] == [("response_after_final", 7)]
    c = Builder().start()
    _refused_then_corrected(c)
    c.request("c1.1", "", model="scripted", empty_final=True)
    c.response("c1.1", "", None, final=True, model="tokens")
    c.half_close("c1.1")
    c.end("c1.1")
    assert {(r.seq, r.group.request_id) for r in track(c.records).requests if r.group is not None} == {(5, ""), (6, "")}


def test_corrections_of_two_ids_each_wait_for_their_own_ids_refusal() -> None:
    """The same on two ids at once (a refusal kept for each): each correction is its own once its id's
    refusal is placed, whatever is kept for the other id."""
    b = Builder().start()
    b.call("c1.1")
    for rid in ("", "x"):
        b.request("c1.1", rid, model="tokens", empty_final=True)
        b.request("c1.1", rid, model="scripted", empty_final=True)
        b.response("c1.1", rid, None, error="expected 1 inputs but got 0", model="")
    for rid in ("", "x"):
        b.request("c1.1", rid, model="scripted", empty_final=True)
        b.response("c1.1", rid, None, final=True, model="scripted")
    for rid in ("", "x"):
        b.response("c1.1", rid, None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    assert [(row[1], row[2]) for row in _both(b)] == [
        ("tokens", "completed"), ("scripted", "error"), ("tokens", "completed"), ("scripted", "error"),
        ("scripted", "completed"), ("scripted", "completed"),
    ]  # fmt: skip


def test_a_response_after_groups_made_one_are_over_is_a_violation_of_its_models_request() -> None:
    """Groups made one, then over (a final for each request): a late response naming `tokens` is the
    `response_after_final` of the last `tokens` request, not of the last request sent (a `silent` one)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.request("c1.1", "", model="silent", empty_final=True)
    b.response("c1.1", "", "?", model="")  # (naming no model: the two are one group from here)
    b.response("c1.1", "", None, final=True, model="tokens")
    b.response("c1.1", "", None, final=True, model="silent")
    b.response("c1.1", "", "late", model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    assert [(r.model, [(v.name, v.seq) for v in r.violations]) for r in track(b.records).requests] == [
        ("tokens", [("response_after_final", 7)]), ("silent", []),
    ]  # fmt: skip


def test_a_correction_refused_again_is_placed_alike_whenever_the_second_refusal_came() -> None:
    """The correction is refused too; its refusal comes before or after `silent`'s final, which places the
    first one: the rows are the same either way, each refusal its own request's (it was a group of two,
    known only together, when the second refusal came first)."""

    def rows(second_first: bool) -> list[Any]:
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "", model="silent", empty_final=True)
        b.request("c1.1", "", model="scripted", empty_final=True)
        b.response("c1.1", "", None, error="refusal 1", model="")
        b.request("c1.1", "", model="scripted", empty_final=True)
        if second_first:
            b.response("c1.1", "", None, error="refusal 2", model="")
        b.response("c1.1", "", None, final=True, model="silent")
        if not second_first:
            b.response("c1.1", "", None, error="refusal 2", model="")
        b.half_close("c1.1")
        b.end("c1.1")
        errors = [(r.seq, r.error) for r in track(b.records).requests]
        return [row[1:] for row in _both(b)] + errors

    assert rows(True) == rows(False) == [
        ("silent", "completed", 1, (), (), None), ("scripted", "error", 1, ("missing_final",), (), None),
        ("scripted", "error", 1, ("missing_final",), (), None), (2, None), (3, "refusal 1"), (5, "refusal 2"),
    ]  # fmt: skip


def test_a_hole_among_what_a_correction_got_is_taken_where_it_fell() -> None:
    """Records lost after the correction's final and a response after it, before `tokens` answers: had the
    wire told at once, the correction had ended before the hole, so it keeps its outcome and its violation
    counts (it was `unknown`, the violation not counted, when `tokens` answered after the hole)."""

    def row(tokens_first: bool) -> tuple[Any, ...]:
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "", model="tokens", empty_final=True)
        b.request("c1.1", "", model="scripted", empty_final=True)
        b.response("c1.1", "", None, error="expected 1 inputs but got 0", model="")
        if tokens_first:
            b.response("c1.1", "", "a-0", model="tokens")
        b.request("c1.1", "", model="scripted", empty_final=True)
        b.response("c1.1", "", None, final=True, model="scripted")
        b.response("c1.1", "", "late", model="scripted")
        b.gap(1)
        if not tokens_first:
            b.response("c1.1", "", "a-0", model="tokens")
        b.response("c1.1", "", None, final=True, model="tokens")
        b.half_close("c1.1")
        b.end("c1.1")
        (r,) = [r for r in track(b.records).requests if r.model == "scripted" and r.error is None]
        return (r.outcome, r.recorded_as, [v.name for v in r.violations], [v.name for v in r.violations_after_loss])

    assert row(True) == row(False) == ("completed", None, ["response_after_final"], [])


def test_a_correction_sent_after_a_hole_stays_unknown_when_it_breaks_a_rule() -> None:
    """Records lost before the correction was sent (a lost request of its id may have answered it): its
    violation after the loss is not counted and it is `unknown`, however the refusal was placed."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.request("c1.1", "", model="scripted", empty_final=True)
    b.response("c1.1", "", None, error="expected 1 inputs but got 0", model="")
    b.gap(1)
    b.request("c1.1", "", model="scripted", empty_final=True)
    b.response("c1.1", "", None, final=True, model="scripted")
    b.response("c1.1", "", "late", model="scripted")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    (r,) = [r for r in track(b.records).requests if r.seq == 6]
    assert (r.outcome, r.recorded_as, r.violations, [v.name for v in r.violations_after_loss]) == (
        "unknown", "completed", (), ["response_after_final"],
    )  # fmt: skip


def test_what_is_kept_for_a_correction_is_bounded(monkeypatch: Any) -> None:
    """While the refusal stays unplaced on a busy stream, what the correction's group gets is kept up to a
    bound; beyond it the group stays one, known only together, as before any of this was kept."""
    monkeypatch.setattr("replay.machine.tracker.KEEP_STEPS", 3)

    def build(responses: int) -> Builder:
        b = Builder().start()
        _refused_then_corrected(b)
        for i in range(responses):
            b.response("c1.1", "", f"t-{i}", model="scripted")
        b.response("c1.1", "", None, final=True, model="scripted")
        b.response("c1.1", "", None, final=True, model="tokens")
        b.half_close("c1.1")
        b.end("c1.1")
        return b

    assert [row[2] for row in _both(build(2))] == ["completed", "error", "completed"]
    assert [row[2] for row in _both(build(3))] == ["completed", "group", "group"]


def test_a_second_correction_after_the_first_was_refused_is_its_own_whenever_silent_answered() -> None:
    """The first correction is refused in turn, and the client corrects again, all before `silent`'s final
    (or after it): each refusal is its own request's, the last correction `completed` either way (it was one
    group with the first correction, known only together, when `silent` answered last)."""

    def rows(silent_last: bool) -> list[Any]:
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "", model="silent", empty_final=True)
        b.request("c1.1", "", model="scripted", empty_final=True)
        b.response("c1.1", "", None, error="refusal 1", model="")
        if not silent_last:
            b.response("c1.1", "", None, final=True, model="silent")
        b.request("c1.1", "", model="scripted", empty_final=True)
        b.response("c1.1", "", None, error="refusal 2", model="")
        b.request("c1.1", "", model="scripted", empty_final=True)
        b.response("c1.1", "", "t-0", model="scripted")
        b.response("c1.1", "", None, final=True, model="scripted")
        if silent_last:
            b.response("c1.1", "", None, final=True, model="silent")
        b.half_close("c1.1")
        b.end("c1.1")
        return [(row[1], row[2], row[3], row[6]) for row in _both(b)] + [r.error for r in track(b.records).requests]

    assert rows(True) == rows(False) == [
        ("silent", "completed", 1, None), ("scripted", "error", 1, None), ("scripted", "error", 1, None),
        ("scripted", "completed", 2, None), None, "refusal 1", "refusal 2", None,
    ]  # fmt: skip


def _holes_around_corrections(tokens_first: bool, open_at_hole: bool) -> list[Any]:
    """Two corrections, the second sent after a hole; the first still open at the hole, or ended before it."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.request("c1.1", "", model="scripted", empty_final=True)
    b.response("c1.1", "", None, error="expected 1 inputs but got 0", model="")
    if tokens_first:
        b.response("c1.1", "", "a-0", model="tokens")
    b.request("c1.1", "", model="scripted", empty_final=True)
    if not open_at_hole:
        b.response("c1.1", "", None, final=True, model="scripted")
    b.gap(1)
    b.response("c1.1", "", "t-0", model="scripted")
    if open_at_hole:
        b.response("c1.1", "", None, final=True, model="scripted")
    b.request("c1.1", "", model="scripted", empty_final=True)
    b.response("c1.1", "", None, final=True, model="scripted")
    b.response("c1.1", "", "late", model="scripted")
    if not tokens_first:
        b.response("c1.1", "", "a-0", model="tokens")
    b.response("c1.1", "", None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    return [(r.seq, r.outcome, r.recorded_as, [v.name for v in r.violations], [v.name for v in r.violations_after_loss])
            for r in track(b.records).requests if r.model == "scripted"]  # fmt: skip


def test_holes_among_what_corrections_got_mark_each_as_where_it_stood() -> None:
    """The hole comes after the first correction was sent: open then (its final after the hole), it is
    `unknown`; ended before it, it keeps `completed` (its `t-0` after the hole is after its final, and
    not counted). The refused request is `unknown` (a refused request is open to Triton's table until the
    call ends), and the second correction, sent after the hole, breaks a rule after it: `unknown`. The
    same whether `tokens` answered before the first correction or after all of it."""
    refused = ("unknown", "error", [], [])
    after_hole = ("unknown", "completed", [], ["response_after_final"])
    for tokens_first in (True, False):
        assert [r[1:] for r in _holes_around_corrections(tokens_first, open_at_hole=True)] == [
            refused, ("unknown", "completed", [], []), after_hole,
        ]  # fmt: skip
        assert [r[1:] for r in _holes_around_corrections(tokens_first, open_at_hole=False)] == [
            refused, ("completed", None, [], ["response_after_final"]), after_hole,
        ]  # fmt: skip


def test_a_split_on_one_id_leaves_an_error_kept_for_another_id_to_its_own_requests() -> None:
    """Refusals kept for ids "" and "x" at once, each corrected; `tokens` of "" answers first (the "" split),
    the "" correction never does: the split re-parks only what was kept for its own id, so "x"'s refusal
    stays among "x"'s requests (the "" correction is no candidate of it) and is placed at the call's end."""
    b = Builder().start()
    b.call("c1.1")
    for rid in ("", "x"):
        b.request("c1.1", rid, model="tokens", empty_final=True)
        b.request("c1.1", rid, model="scripted", empty_final=True)
        b.response("c1.1", rid, None, error=f"refusal {rid}", model="")
        b.request("c1.1", rid, model="scripted", empty_final=True)
    for rid in ("", "x"):
        b.response("c1.1", rid, None, final=True, model="tokens")
    b.half_close("c1.1")
    b.end("c1.1")
    assert [(row[1], row[2], row[6]) for row in _both(b)] == [
        ("tokens", "completed", None), ("scripted", "error", None), ("scripted", "incomplete", None),
        ("tokens", "completed", None), ("scripted", "error", None), ("scripted", "incomplete", None),
    ]  # fmt: skip
    assert [r.error for r in track(b.records).requests] == [None, "refusal ", None, None, "refusal x", None]

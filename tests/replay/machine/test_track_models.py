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
    seen: list[tuple[int, int]] = []
    t = Tracker(on_response=lambda _call, req_seq, seq, _rec: seen.append((seq, req_seq)))
    for seq, rec in enumerate(b.records):
        t.feed(seq, rec)
    t.finish()
    assert seen == [(4, 3), (5, 2)]  # the requests are seq 2 (tokens) and 3 (nosuch)


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
    seen: list[tuple[int, int]] = []
    t = Tracker(on_response=lambda _call, req_seq, seq, _rec: seen.append((seq, req_seq)))
    for seq, rec in enumerate(b.records):
        t.feed(seq, rec)
    result = t.finish()
    assert seen == [(4, 3), (5, 2), (6, 3)]
    assert [(r.model, r.outcome) for r in result.requests] == [("nosuch", "error"), ("tokens", "completed")]


def test_groups_made_one_add_up_and_keep_the_first_error_by_when_it_came() -> None:
    """Two shared groups (two requests each, one model each) made one by a response naming no model: the
    members in the order sent, the counts added, the first error the one that came first."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.request("c1.1", "", model="silent", empty_final=True)
    b.request("c1.1", "", model="tokens", empty_final=True)
    b.request("c1.1", "", model="silent", empty_final=True)
    b.response("c1.1", "", None, error="silent first", model="silent")
    b.response("c1.1", "", "a-0", error="tokens second", model="tokens")
    b.response("c1.1", "", "?", model="")
    for model in ("tokens", "silent", "tokens", "silent"):
        b.response("c1.1", "", None, final=True, model=model)
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(b.records)
    assert [r.model for r in result.requests] == ["tokens", "silent", "tokens", "silent"]
    groups = [r.group for r in result.requests]
    g = groups[0]
    assert g is not None and all(x == g for x in groups)
    assert (g.first_seq, g.requests, g.responses, g.text_responses, g.errors_without_final) == (2, 4, 7, 2, 2)
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

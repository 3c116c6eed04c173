"""Attribution and outcomes of the pure tracker, fed records built in memory (no files)."""

from __future__ import annotations

from typing import Any

from replay.capture import events as ev
from replay.machine.tracker import Tracker, track
from tests.data.make_golden import INFER, Builder


def _outcomes(b: Builder) -> list[tuple[str | None, str, list[str]]]:
    return [(r.request_id, r.outcome, [v.name for v in r.violations]) for r in track(b.records).requests]


def test_requests_without_id_one_at_a_time_are_attributed() -> None:
    """tritonclient's default id "" is an id like any other: one such request in flight owns its responses."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "")
    b.response("c1.1", "", "x")
    b.response("c1.1", "", None, final=True)
    b.request("c1.1", "")
    b.response("c1.1", "", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(b.records)
    assert [(r.occurrence, r.outcome, r.responses) for r in result.requests] == [
        (0, "completed", 2),
        (1, "completed", 1),
    ]
    assert result.unattributable == ()
    assert result.ok


def test_an_id_reused_after_its_final_is_a_new_occurrence() -> None:
    """The same id sent again on the call after the first finished is tracked separately, not merged."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "x")
    b.response("c1.1", "x", "1")
    b.response("c1.1", "x", None, final=True)
    b.request("c1.1", "x")
    b.response("c1.1", "x", "2")
    b.response("c1.1", "x", "3")
    b.response("c1.1", "x", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(b.records)
    assert [(r.occurrence, r.responses, r.text_responses) for r in result.requests] == [(0, 2, 1), (1, 3, 2)]
    assert result.ok


def test_one_final_for_two_requests_sharing_an_id_is_counted_for_the_group() -> None:
    """Two in flight under one id, one final, OK end with finals due: the group ended 1 completed and
    1 incomplete, so each request is `group`; the missing final is one violation, on the group."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "d", empty_final=True)
    b.request("c1.1", "d", empty_final=True)
    b.response("c1.1", "d", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(b.records)
    assert result.unattributable == ()
    assert [r.outcome for r in result.requests] == ["group", "group"]
    group = result.requests[0].group
    assert group is not None and result.requests[1].group == group
    assert (group.requests, group.responses, group.ended, group.per_request) == (
        2, 1, {"completed": 1, "incomplete": 1}, False,
    )  # fmt: skip
    assert [[v.name for v in r.violations] for r in result.requests] == [["missing_final"], []]
    assert result.group_only == 2 and not result.ok


def _idless(finals: list[str | None], *, requests: int | None = None, end: str = "ok") -> list[object]:
    """``requests`` id-less requests in flight together, then one final per item (an error text or None)."""
    b = Builder().start()
    b.call("c1.1")
    for _ in range(requests if requests is not None else len(finals)):
        b.request("c1.1", "", empty_final=None)
    for error in finals:
        b.response("c1.1", "", None if error else "t", final=True, error=error)
    if end == "ok":
        b.half_close("c1.1")
        b.end("c1.1")
    else:
        b.cancel("c1.1", end, rst_code=8)
        b.end("c1.1", "CANCELLED", end, ms=0)
    return b.records


def test_all_error_finals_give_each_id_less_request_error_and_exit_0() -> None:
    """Triton QA's shape: 10 id-less requests, 10 error finals: each request error, nothing unattributable."""
    result = track(_idless(["boom"] * 10))
    assert [r.outcome for r in result.requests] == ["error"] * 10
    assert all(r.error == "boom" and r.final is True and r.group is not None for r in result.requests)
    assert result.requests[0].group is not None and result.requests[0].group.per_request
    assert result.ok and result.group_only == 0 and result.unattributable == ()


def test_mixed_finals_leave_each_request_known_only_for_the_group() -> None:
    """7 completed and 3 error finals for 10 id-less requests: `group`, with the group's counts; still exit 0."""
    result = track(_idless([None] * 7 + ["boom"] * 3))
    assert {r.outcome for r in result.requests} == {"group"}
    group = result.requests[0].group
    assert group is not None and group.ended == {"completed": 7, "error": 3} and group.text_responses == 7
    assert "ended: 7 completed, 3 error" in group.describe()
    assert result.ok and result.group_only == 10 and result.summary()["known_only_for_group"] == 10


def test_cancel_with_part_of_the_group_ended_is_known_only_for_the_group() -> None:
    """One final of three, then a client cancel: ended 1 completed, 2 cancelled -> group."""
    result = track(_idless([None], requests=3, end="client_cancel"))
    group = result.requests[0].group
    assert group is not None and group.ended == {"completed": 1, "cancelled": 2}
    assert [r.outcome for r in result.requests] == ["group"] * 3


def test_cancel_before_any_final_cancels_every_request_of_the_group() -> None:
    """No final at all, then a client cancel: every request of the group was cancelled (uniform)."""
    result = track(_idless([], requests=3, end="client_cancel"))
    assert [r.outcome for r in result.requests] == ["cancelled"] * 3


def test_a_final_beyond_the_groups_requests_is_response_after_final() -> None:
    """More id-less finals than id-less requests: the server answered a request twice (a violation)."""
    result = track(_idless([None, None, None], requests=2))
    assert [r.outcome for r in result.requests] == ["completed", "completed"]
    assert [[v.name for v in r.violations] for r in result.requests] == [[], ["response_after_final"]]
    assert not result.ok


def test_a_request_sent_after_the_group_ended_starts_a_new_exact_group() -> None:
    """Id-less requests one at a time are attributed exactly (a group of one each), as before groups."""
    b = Builder().start()
    b.call("c1.1")
    for n in (1, 2):
        b.request("c1.1", "", empty_final=None)
        for i in range(n):
            b.response("c1.1", "", f"t-{i}")
        b.response("c1.1", "", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(b.records)
    assert [(r.outcome, r.responses, r.text_responses, r.group) for r in result.requests] == [
        ("completed", 2, 1, None), ("completed", 3, 2, None),
    ]  # fmt: skip


def test_an_error_without_final_at_a_clean_end_is_error_with_a_missing_final_note() -> None:
    """Error, no final, OK end, empty finals not enabled: `error`, note `missing_final`, no violation."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "x", empty_final=None)
    b.response("c1.1", "x", None, error="boom")
    b.half_close("c1.1")
    b.end("c1.1")
    (r,) = track(b.records).requests
    assert (r.outcome, r.notes, r.violations, r.final, r.error) == ("error", ("missing_final",), (), False, "boom")


def test_stream_cancel_cancels_only_what_is_in_flight() -> None:
    """A stream-wide cancel ends every in-flight request as cancelled; the one finished before stays completed."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "early", max_tokens=1)
    b.response("c1.1", "early", None, final=True)
    b.request("c1.1", "late")
    b.request("c1.1", "queued")
    b.response("c1.1", "late", "l-0")
    b.cancel("c1.1", "client_cancel", rst_code=8)
    b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
    assert _outcomes(b) == [("early", "completed", []), ("late", "cancelled", []), ("queued", "cancelled", [])]


def test_call_end_after_cancel_does_not_apply_twice() -> None:
    """The cancel record ends the call; its call_end adds status/details but no second end input."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r")
    b.cancel("c1.1", "deadline")
    b.end("c1.1", "DEADLINE_EXCEEDED", "deadline", ms=0)
    (r,) = track(b.records).requests
    assert (r.outcome, r.status, r.error, r.violations) == ("deadline", "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED", ())


def test_error_without_final_when_final_was_due_is_error_and_missing_final() -> None:
    """An in-band error stays the outcome; the final that never came is still a violation."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r", empty_final=True)
    b.response("c1.1", "r", None, error="boom")
    b.half_close("c1.1")
    b.end("c1.1")
    (r,) = track(b.records).requests
    assert (r.outcome, r.error, r.final, [v.name for v in r.violations]) == ("error", "boom", False, ["missing_final"])


def test_restart_after_cancel_matches_payload_hash_for_requests_without_id() -> None:
    """With --payload full, a request without id re-sent byte-identical after its cancel is flagged."""
    b = Builder(payload="full").start()
    b.call("c1.1")
    b.request("c1.1", "", prompt="same")
    b.cancel("c1.1", "client_cancel", rst_code=8)
    b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
    b.call("c1.3")
    b.request("c1.3", "", prompt="same")
    b.request("c1.3", "other", prompt="different")
    b.response("c1.3", "", None, final=True)
    b.response("c1.3", "other", None, final=True)
    b.half_close("c1.3")
    b.end("c1.3")
    assert _outcomes(b) == [
        ("", "cancelled", []),
        ("", "completed", ["restarted_after_cancel"]),
        ("other", "completed", []),
    ]


def test_empty_ids_are_not_matched_for_restarts_without_payload() -> None:
    """Without a payload hash, two different requests without id are not taken for a restart."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", prompt="a")
    b.cancel("c1.1", "client_cancel", rst_code=8)
    b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
    b.call("c1.3")
    b.request("c1.3", "", prompt="b")
    b.response("c1.3", "", None, final=True)
    b.end("c1.3")
    assert _outcomes(b)[1] == ("", "completed", [])


def test_unary_calls_outcome_final_and_response_count() -> None:
    """Unary ModelInfer: one request, responses 1 when answered, final is the raw flag, outcome from the status."""
    b = Builder().start()
    b.call("c1.1", method=INFER)
    b.request("c1.1", "u1", model="echo", empty_final=None)
    b.response("c1.1", "u1", "x", final=None, model="echo")
    b.end("c1.1")
    b.call("c1.3", method=INFER, timeout_ms=100)
    b.request("c1.3", "u2", model="echo", empty_final=None)
    b.cancel("c1.3", "deadline")
    b.end("c1.3", "DEADLINE_EXCEEDED", "deadline", ms=0)
    b.call("c1.5", method=INFER)
    b.request("c1.5", "u3", model="echo", empty_final=None)
    b.response("c1.5", "u3", "x", final=True, model="echo")
    b.end("c1.5", "INTERNAL", "error", details="bad trailer")
    got = [(r.kind, r.outcome, r.responses, r.final, r.error) for r in track(b.records).requests]
    assert got == [
        ("unary", "completed", 1, None, None),
        ("unary", "deadline", 0, None, "DEADLINE_EXCEEDED"),
        ("unary", "error", 1, True, "bad trailer"),
    ]


def test_timing_fields_are_relative_to_the_request() -> None:
    """first_response_ms and duration_ms run from the request record to the first response / the final."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r")
    b.response("c1.1", "r", "a", ms=12)
    b.response("c1.1", "r", None, final=True, ms=30)
    b.half_close("c1.1", ms=100)
    b.end("c1.1")
    (r,) = track(b.records).requests
    assert (r.first_response_ms, r.duration_ms) == (12.0, 42.0)


def test_capture_end_with_requests_open_is_incomplete_without_violation() -> None:
    """A capture that stops while a request is open (proxy killed) reports it incomplete, not as a violation."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r", empty_final=True)
    b.response("c1.1", "r", "a")
    result = track(b.records)
    (r,) = result.requests
    assert (r.outcome, r.violations, r.duration_ms, r.status) == ("incomplete", (), None, None)
    assert [g.kind for g in result.gaps] == ["missing_capture_end"]
    assert result.summary()["calls_by_cause"] == {"open_at_capture_end": 1}


def test_second_capture_in_one_run_keeps_call_ids_apart() -> None:
    """Two captures read together restart call ids; the second's calls are prefixed, not merged."""
    first = Builder().start()
    first.call("c1.1")
    first.request("c1.1", "r")
    second = Builder().start()
    second.call("c1.1")
    second.request("c1.1", "r")
    second.response("c1.1", "r", None, final=True)
    second.end("c1.1")
    records = [*enumerate(first.records), *enumerate(second.finish().records)]
    result = track(records)
    assert [(r.call, r.outcome) for r in result.requests] == [("c1.1", "incomplete"), ("2:c1.1", "completed")]
    assert result.captures == 2
    assert [g.kind for g in result.gaps] == ["missing_capture_end"]


def test_records_of_a_call_without_call_start_are_ignored_with_a_warning() -> None:
    """Messages whose call_start was lost are not guessed at: one warning per call."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r")
    b.records = [r for r in b.records if not isinstance(r, ev.CallStarted)]
    b.response("c1.1", "r", None, final=True)
    result = track(b.records)
    assert result.requests == ()
    assert len([w for w in result.warnings if "without its call_start" in w]) == 1


def test_unlabelled_messages_are_counted_not_tracked() -> None:
    """Messages without labels (compressed, cut, undecodable): counted with one warning, no requests, no unattributable."""
    b = Builder().start()
    b.call("c1.1")
    b.records.append(ev.MessageSeen(t_ns=b.tick(), call="c1.1", dir="c2s", index=0, size=10, compressed=False))
    b.records.append(ev.MessageSeen(t_ns=b.tick(), call="c1.1", dir="s2c", index=0, size=10, compressed=False))
    b.end("c1.1")
    result = track(b.records)
    assert (result.requests, result.unattributable, result.unlabelled_messages) == ((), (), 2)
    assert len([w for w in result.warnings if "carry no Triton labels" in w]) == 1


def test_undecoded_response_is_unattributable() -> None:
    """A response the proxy could not decode is listed as unattributable (reason undecoded)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r")
    b.records.append(
        ev.MessageSeen(t_ns=b.tick(), call="c1.1", dir="s2c", index=0, size=10, compressed=True,
                       decode_error="compressed message: not decoded")
    )  # fmt: skip
    b.end("c1.1")
    assert [u.reason for u in track(b.records).unattributable] == ["undecoded"]


def test_tracker_is_fed_one_record_at_a_time() -> None:
    """The pure Tracker works incrementally: outcomes are ready after finish() without any I/O."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r")
    b.response("c1.1", "r", None, final=True)
    b.end("c1.1")
    tracker = Tracker()
    for seq, record in enumerate(b.finish().records):
        tracker.feed(seq, record)
    result = tracker.finish()
    assert [r.outcome for r in result.requests] == ["completed"]
    assert result.summary()["outcomes"] == {"completed": 1}


def _no_final_flag(rid: str, *, requests: int, due: bool) -> Builder:
    """``requests`` in flight under ``rid``; responses whose ``triton_final_response`` is absent; OK end."""
    b = Builder().start()
    b.call("c1.1")
    for _ in range(requests):
        b.request("c1.1", rid, empty_final=due)
    b.response("c1.1", rid, "x", final=None)
    for _ in range(requests):
        b.response("c1.1", rid, None, final=None)
    b.half_close("c1.1")
    b.end("c1.1")
    return b


def test_a_response_without_the_final_flag_is_not_final() -> None:
    """Completion is the flag: a stream response whose triton_final_response is absent completes nothing.

    Without empty finals the protocol gave no completion signal (`unconfirmed`); with them a final
    was due and never came (`incomplete` + missing_final). Never `completed`, never final=True.
    """
    for due, outcome, violations in ((False, "unconfirmed", []), (True, "incomplete", ["missing_final"])):
        (r,) = track(_no_final_flag("r1", requests=1, due=due).records).requests
        assert (r.outcome, r.final, [v.name for v in r.violations]) == (outcome, False, violations), due


def test_id_less_requests_without_final_flags_each_miss_their_own_final_once() -> None:
    """Two id-less requests in flight, no response carries the final flag: neither completed; with
    finals due each request has one missing_final (they all ended alike, so each is its own)."""
    for due, outcome in ((False, "unconfirmed"), (True, "incomplete")):
        result = track(_no_final_flag("", requests=2, due=due).records)
        assert [(r.outcome, r.final) for r in result.requests] == [(outcome, False)] * 2, due
        assert [[v.name for v in r.violations] for r in result.requests] == [["missing_final"] * due] * 2, due
        group = result.requests[0].group
        assert group is not None and (group.ended, group.per_request) == ({outcome: 2}, True)


def test_the_summary_check_json_prints_counts_what_the_capture_holds() -> None:
    """stream_cancel.jsonl (12 records, one stream cancelled by its client: `done` had finished, `a` and
    `b` had not): every count of `check --json`'s summary as a user reads it."""
    from tests.support.paths import DATA

    assert track(str(DATA / "stream_cancel.jsonl")).summary() == {
        "records": 12, "captures": 1, "complete": True, "calls": 1,
        "calls_by_method": {"ModelStreamInfer": 1}, "calls_by_cause": {"client_cancel": 1},
        "requests": 3, "outcomes": {"completed": 1, "cancelled": 2}, "violations": 0, "violations_by_name": {},
        "unattributable": 0, "groups": 0, "known_only_for_group": 0, "unlabelled_messages": 0, "gaps": 0,
        "warnings": [],
    }  # fmt: skip
    summary = track(str(DATA / "missing_final.jsonl")).summary()
    assert (summary["violations"], summary["violations_by_name"]) == (1, {"missing_final": 1})
    killed = track(str(DATA / "proxy_killed.jsonl")).summary()  # no capture_end: one call still open
    assert (killed["complete"], killed["gaps"], killed["outcomes"]) == (False, 1, {"incomplete": 1, "completed": 1})
    assert killed["calls_by_cause"].get("open_at_capture_end") == 1


def _pair(rid: str, script: list[tuple[str | None, bool, str | None]], status: str = "OK", cause: str = "ok") -> object:
    """Two requests in flight under ``rid``, then (text, final, error) responses, then the call's end."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", rid, empty_final=None)
    b.request("c1.1", rid, empty_final=None)
    for text, final, error in script:
        b.response("c1.1", rid, text, final=final, error=error)
    b.half_close("c1.1")
    b.end("c1.1", status=status, cause=cause)
    return track(b.records)


def test_what_check_reports_for_an_id_group_by_how_its_requests_ended() -> None:
    """Per request (outcome, final flag, error) and the group's own counts, for each way a group ends."""
    from replay.machine.outcomes import GroupOutcome

    def seen(result: Any) -> tuple[list[tuple[str, bool | None, str | None]], GroupOutcome]:
        assert all(not r.violations for r in result.requests)
        return [(r.outcome, r.final, r.error) for r in result.requests], result.requests[0].group

    def group(rid: str, responses: int, text: int, ended: dict[str, int], errors: int, per: bool) -> GroupOutcome:
        return GroupOutcome(first_seq=2, request_id=rid, requests=2, responses=responses, text_responses=text,
                            ended=ended, errors_without_final=errors, per_request=per)  # fmt: skip

    # One final, one error final: mixed, known only for the group.
    assert seen(_pair("g", [("a", False, None), (None, True, None), (None, True, "boom")])) == (
        [("group", None, "boom")] * 2, group("g", 3, 1, {"completed": 1, "error": 1}, 0, False))
    # Both finals: each request completed.
    assert seen(_pair("", [("a", False, None), (None, True, None), (None, True, None)])) == (
        [("completed", True, None)] * 2, group("", 3, 1, {"completed": 2}, 0, True))
    # An error without final, then two plain finals: one of them failed, which is unknown.
    assert seen(_pair("", [(None, False, "bad"), (None, True, None), (None, True, None)])) == (
        [("group", None, "bad")] * 2, group("", 3, 0, {"completed": 2}, 1, False))
    # An error, then the client cancels: an error and cancels, mixed.
    assert seen(_pair("", [(None, False, "bad")], "CANCELLED", "client_cancel")) == (
        [("group", None, "bad")] * 2, group("", 1, 0, {"cancelled": 2}, 1, False))
    # An error, then the call fails: every request ended in error.
    assert seen(_pair("", [(None, False, "bad")], "INTERNAL", "error")) == (
        [("error", False, "bad")] * 2, group("", 1, 0, {"error": 2}, 1, True))


def test_check_json_and_text_show_a_groups_request_as_documented() -> None:
    """The `check --json` object of a group's request (docs/outcomes.md) and the group's text line."""
    from replay.machine.outcomes import GroupOutcome

    result: Any = _pair("", [(None, False, "bad")], "CANCELLED", "client_cancel")
    assert result.to_json()["requests"][0] == {
        "call": "c1.1", "kind": "stream", "model": "tokens", "request_id": "", "occurrence": 0, "seq": 2,
        "outcome": "group", "responses": 0, "text_responses": 0, "final": None, "first_response_ms": None,
        "duration_ms": 8.0, "status": "CANCELLED", "error": "bad", "violations": [],
        "group": {"first_seq": 2, "request_id": "", "requests": 2, "responses": 1, "text_responses": 0,
                  "ended": {"cancelled": 2}, "errors_without_final": 1, "per_request": False},
        "notes": [],
    }  # fmt: skip
    assert result.requests[0].group.describe() == "group of 2 (ended: 2 cancelled; 1 error(s) without final; 1 response(s))"
    nothing = GroupOutcome(first_seq=1, request_id="", requests=2, responses=0, text_responses=0,
                           ended={"completed": 0}, errors_without_final=0, per_request=True)  # fmt: skip
    assert nothing.describe() == "group of 2 (ended: none; 0 response(s))"


def test_check_json_lists_unattributable_responses_and_violations_as_documented() -> None:
    """unattributable.jsonl's two strays and missing_final.jsonl's violation, as `check --json` prints them;
    counts by name and by cause add up over requests and calls."""
    from tests.support.paths import DATA

    assert track(str(DATA / "unattributable.jsonl")).to_json()["unattributable"] == [
        {"call": "c1.1", "seq": 5, "request_id": "ghost", "reason": "unknown_id", "final": False, "error": None},
        {"call": "c1.1", "seq": 6, "request_id": "", "reason": "empty_id", "final": False, "error": None},
    ]
    assert [r["violations"] for r in track(str(DATA / "missing_final.jsonl")).to_json()["requests"]] == [
        [{"violation": "missing_final", "seq": 8, "detail": "end_ok_final_due in state receiving"}], [],
    ]  # fmt: skip
    b = Builder().start()
    for call in ("c1.1", "c1.2"):
        b.call(call)
        b.request(call, "r", empty_final=True)
        b.half_close(call)
        b.end(call)
    summary = track(b.records).summary()
    assert (summary["violations_by_name"], summary["calls_by_cause"]) == ({"missing_final": 2}, {"ok": 2})


def test_each_response_is_reported_on_the_request_it_answers() -> None:
    """What the report draws and serve replays: (call, request record, response record) for every
    response; a shared group's response goes to the latest request of the group sent before it."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "a")  # seq 2
    b.response("c1.1", "a", "x")  # 3
    b.request("c1.1", "", empty_final=None)  # 4
    b.request("c1.1", "", empty_final=None)  # 5: a shared id group
    b.response("c1.1", "", None, final=True, error="e1")  # 6
    b.response("c1.1", "a", None, final=True)  # 7
    b.response("c1.1", "", None, final=True)  # 8
    b.half_close("c1.1")
    b.end("c1.1")
    seen: list[tuple[str, int, int, str | None]] = []
    tracker = Tracker(on_response=lambda call, req, seq, rec: seen.append((call, req, seq, rec.request_id)))
    for seq, record in enumerate(b.records):
        tracker.feed(seq, record)
    result = tracker.finish()
    assert seen == [("c1.1", 2, 3, "a"), ("c1.1", 5, 6, ""), ("c1.1", 2, 7, "a"), ("c1.1", 5, 8, "")]
    assert [(r.outcome, r.error) for r in result.requests] == [("completed", None), ("group", "e1"), ("group", "e1")]


def test_a_unary_response_without_its_request_and_a_late_response_are_reported_where_they_are() -> None:
    """A unary response whose request was not seen is unattributable (`no_request`) at its record; a
    response after the final is a violation at the response's record."""
    b = Builder().start()
    b.call("c1.1", method=INFER)
    b.response("c1.1", "u", "x", final=None)
    b.end("c1.1")
    assert track(b.records).to_json()["unattributable"] == [
        {"call": "c1.1", "seq": 2, "request_id": "u", "reason": "no_request", "final": None, "error": None}
    ]
    from tests.support.paths import DATA

    (late,) = track(str(DATA / "response_after_final.jsonl")).requests
    assert (late.outcome, [(v.name, v.seq) for v in late.violations]) == ("completed", [("response_after_final", 5)])


def test_a_groups_counts_add_up_finals_ends_and_errors() -> None:
    """One error final, then the call fails: both requests ended in error (1 by its final + 1 by the end);
    two errors without final are two."""
    one_final: Any = _pair("", [(None, True, "boom")], "INTERNAL", "error")
    assert [r.outcome for r in one_final.requests] == ["error", "error"]
    assert (one_final.requests[0].group.ended, one_final.requests[0].group.errors_without_final) == ({"error": 2}, 0)
    two_errors: Any = _pair("", [(None, False, "e1"), (None, False, "e2")], "INTERNAL", "error")
    assert (two_errors.requests[0].group.ended, two_errors.requests[0].group.errors_without_final) == ({"error": 2}, 2)

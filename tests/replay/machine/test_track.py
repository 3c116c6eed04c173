"""Attribution and outcomes of the pure tracker, fed records built in memory (no files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replay.capture import events as ev
from replay.machine.groups import KEEP_ERROR_TEXTS
from replay.machine.tracker import Tracker, track
from tests.data.make_golden import INFER, Builder


def _outcomes(b: Builder) -> list[tuple[str | None, str, list[str]]]:
    return [(r.request_id, r.outcome, [v.name for v in r.violations]) for r in track(b.records).requests]


def test_the_same_bytes_on_another_connection_are_a_note_and_another_capture_is_no_evidence(tmp_path: Path) -> None:
    """--payload full: a request with the bytes of one cancelled on another connection gets the note
    `same_as_cancelled` (no violation). Two captures read together (the proxy restarted into the same
    directory, the same client run once per proxy run) are two sessions: a cancel in the first is no
    evidence against a request of the second, by id or by bytes (it was `restarted_after_cancel`, exit 1)."""

    def run() -> Builder:
        b = Builder(payload="full").start()
        b.call("c1.1")
        b.request("c1.1", "long", prompt="one")
        b.cancel("c1.1", "client_cancel", rst_code=8)
        b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
        b.call("c2.1")
        b.request("c2.1", "long", prompt="one")
        b.response("c2.1", "long", None, final=True)
        b.half_close("c2.1")
        b.end("c2.1")
        return b.finish()

    first = run()
    (_, again) = track(first.records).requests
    assert (again.outcome, again.violations, again.notes) == ("completed", (), ("same_as_cancelled",))
    later = Builder(payload="full").start()  # the next proxy run: the same client sends its request again
    later.call("c1.1")
    later.request("c1.1", "long", prompt="one")
    later.response("c1.1", "long", None, final=True)
    later.half_close("c1.1")
    later.end("c1.1")
    (tmp_path / "capture-20261206T100000-1.jsonl").write_bytes(first.render())
    (tmp_path / "capture-20261206T100500-2.jsonl").write_bytes(later.finish().render())
    result = track(tmp_path)
    assert result.captures == 2
    assert [(r.outcome, [v.name for v in r.violations], r.notes) for r in result.requests] == [
        ("cancelled", [], ()), ("completed", [], ("same_as_cancelled",)), ("completed", [], ())]  # fmt: skip


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


def test_a_response_the_calls_end_cut_is_no_response_and_nothing_unattributable() -> None:
    """What arrived of a response when the call's end cut it (the proxy records it, never labelled): no client had
    it whole, so it answers no request (the one in flight is cancelled, as without it) and is not reported as a
    response nobody asked for; one warning counts such records."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "a")
    b.request("c1.1", "b")
    b.response("c1.1", "a", None, final=True)
    b.cut("c1.1", "s2c", 95, 2071)
    b.cancel("c1.1", "client_cancel", rst_code=8)
    b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
    result = track(b.records)
    assert [(r.request_id, r.outcome, r.responses) for r in result.requests] == [("a", "completed", 1), ("b", "cancelled", 0)]
    assert result.unattributable == ()
    assert [w for w in result.warnings if "cut by their call's end" in w] == [
        "1 response message(s) cut by their call's end (the bytes that arrived are recorded; no client had them "
        "whole): not counted as responses"
    ]


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
    """A model's error without the final flag after its first responses: the error stays the outcome;
    the final that empty finals promised and never came is still a violation."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r", empty_final=True)
    b.response("c1.1", "r", "t-0")
    b.response("c1.1", "r", None, error="boom")
    b.half_close("c1.1")
    b.end("c1.1")
    (r,) = track(b.records).requests
    assert (r.outcome, r.error, r.final, [v.name for v in r.violations]) == ("error", "boom", False, ["missing_final"])


def test_a_request_triton_refused_owes_no_final_even_when_empty_finals_were_enabled() -> None:
    """Triton answers a request it cannot run (an unknown model, a missing input) with one error
    without the final flag and nothing more, whatever the request asked: `error` with the
    `missing_final` note, no violation (it was one: a healthy server failed the check). The others on
    the stream are judged as usual: one of them, due a final, still gets its violation."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "unknown", empty_final=True, model="nosuch")
    b.response("c1.1", "unknown", None, error="Request for unknown model: 'nosuch' is not found", model="")
    b.request("c1.1", "good", empty_final=True)
    b.response("c1.1", "good", "g-0")
    b.response("c1.1", "good", None, final=True)
    b.request("c1.1", "cut", empty_final=True)
    b.response("c1.1", "cut", "c-0")
    b.half_close("c1.1")
    b.end("c1.1")
    rows = [(r.request_id, r.outcome, r.notes, [v.name for v in r.violations]) for r in track(b.records).requests]
    assert rows == [
        ("unknown", "error", ("missing_final",), []),
        ("good", "completed", (), []),
        ("cut", "incomplete", (), ["missing_final"]),
    ]
    # A request answered on after an error without the flag was not refused: its final is still due.
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r", empty_final=True)
    b.response("c1.1", "r", None, error="boom")
    b.response("c1.1", "r", "t-1")
    b.response("c1.1", "r", "t-2")
    b.half_close("c1.1")
    b.end("c1.1")
    (r,) = track(b.records).requests
    assert (r.outcome, r.responses, [v.name for v in r.violations]) == ("error", 3, ["missing_final"])


def test_an_id_group_owes_only_the_finals_its_requests_asked_for() -> None:
    """Two id-less requests in flight together, only the first asking for empty finals, one final seen:
    whose it was the wire does not say, so no final is provably missing (it was a `missing_final`):
    the group's counts say one completed and one unconfirmed. With both asking, one final is missing
    for sure; and an error without the flag may be Triton's refusal, which owes none."""

    def group(asks: tuple[bool, bool], error: bool = False) -> list[tuple[str, tuple[str, ...], dict[str, int]]]:
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "", empty_final=asks[0])
        b.request("c1.1", "", empty_final=asks[1])
        if error:
            b.response("c1.1", "", None, error="refused", model="")
        b.response("c1.1", "", "t-0")
        b.response("c1.1", "", None, final=True)
        b.half_close("c1.1")
        b.end("c1.1")
        out = []
        for r in track(b.records).requests:
            assert r.group is not None
            out.append((r.outcome, tuple(v.name for v in r.violations), r.group.ended))
        return out

    mixed = {"completed": 1, "unconfirmed": 1}
    assert group((True, False)) == [("group", (), mixed), ("group", (), mixed)]
    assert group((False, True)) == [("group", (), mixed), ("group", (), mixed)]
    missing = {"completed": 1, "incomplete": 1}
    assert group((True, True)) == [("group", ("missing_final",), missing), ("group", (), missing)]
    # The error names no model: Triton's refusal, one request's one answer, so the one without a final.
    refused = {"completed": 1, "error": 1}
    assert group((True, True), error=True) == [("group", (), refused), ("group", (), refused)]
    # A request refused while alone with its id owes no final, and excuses no other's: nothing follows a
    # refusal, so the next request of its id and model is a group of its own, which asked for a final and
    # got nothing: missing one for sure.
    for asks in (True, False, None):
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "", empty_final=asks, model="nosuch")
        b.response("c1.1", "", None, error="Request for unknown model", model="")
        b.request("c1.1", "", empty_final=True, model="nosuch")  # (the same model: one group)
        b.half_close("c1.1")
        b.end("c1.1")
        rows = [(r.outcome, [v.name for v in r.violations], r.group) for r in track(b.records).requests]
        assert rows == [("error", [], None), ("incomplete", ["missing_final"], None)], asks


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


def test_an_id_is_evidence_of_a_restart_only_from_the_same_client_connection() -> None:
    """Ids such as "1" are reused by unrelated clients (Triton does not require unique ones): a cancelled
    "1" and another client's "1" on another connection is no restart (it was `restarted_after_cancel`,
    exit 1, found live). From the same connection it is, unless the messages differ (in size, or with
    `--payload full` in bytes); the same bytes from another connection are the note `same_as_cancelled`."""

    def later(conn: str, payload: str = "meta", prompt: str = "one") -> list[tuple[str, str, list[str]]]:
        b = Builder(payload=payload).start()
        b.call("c1.1")
        b.request("c1.1", "1", prompt="one")
        b.cancel("c1.1", "client_cancel", rst_code=8)
        b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
        b.call(f"{conn}.3")
        b.request(f"{conn}.3", "1", prompt=prompt)
        b.response(f"{conn}.3", "1", None, final=True)
        b.half_close(f"{conn}.3")
        b.end(f"{conn}.3")
        return _outcomes(b)

    assert later("c2") == [("1", "cancelled", []), ("1", "completed", [])]
    assert later("c1") == [("1", "cancelled", []), ("1", "completed", ["restarted_after_cancel"])]
    # The same bytes from another connection: a retry, or another client sending the same request (load
    # generators send one request many times): a note, not a violation (it was exit 1 for unrelated clients).
    assert later("c2", "full") == [("1", "cancelled", []), ("1", "completed", [])]
    assert later("c1", "full") == [("1", "cancelled", []), ("1", "completed", ["restarted_after_cancel"])]
    assert later("c2", "full", "two") == [("1", "cancelled", []), ("1", "completed", [])]
    # Two clients of one process share one HTTP/2 connection (grpc's default): with the bytes recorded,
    # an id whose message differs is not the cancelled request again.
    assert later("c1", "full", "two") == [("1", "cancelled", []), ("1", "completed", [])]
    # Without the bytes, their sizes still tell two messages apart: a longer prompt is another request (a
    # client numbering each new stream's requests from "1" after a cancel was exit 1); one of the same
    # length cannot be told from the cancelled one.
    assert later("c1", "meta", "a longer one") == [("1", "cancelled", []), ("1", "completed", [])]
    assert later("c1", "meta", "two") == [("1", "cancelled", []), ("1", "completed", ["restarted_after_cancel"])]


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


def test_a_call_without_its_call_start_is_judged_from_its_first_message_with_one_warning() -> None:
    """Messages whose call_start was lost are judged, not dropped, as a stream's after records were lost:
    one warning per call (its method is not claimed)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r")
    b.records = [r for r in b.records if not isinstance(r, ev.CallStarted)]
    b.response("c1.1", "r", None, final=True)
    result = track(b.records)
    assert [(r.request_id, r.outcome, r.recorded_as) for r in result.requests] == [("r", "completed", None)]
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
        "violations_after_loss": 0, "unattributable": 0, "unattributable_after_loss": 0, "groups": 0, "known_only_for_group": 0, "unlabelled_messages": 0,
        "protocol_errors": 0, "late_after_end": 0, "gaps": 0, "warnings": [],
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

    def group(rid: str, responses: int, text: int, ended: dict[str, int], errors: int, per: bool,
              texts: tuple[str, ...] = ()) -> GroupOutcome:  # fmt: skip
        return GroupOutcome(first_seq=2, request_id=rid, requests=2, responses=responses, text_responses=text,
                            ended=ended, errors_without_final=errors, per_request=per,
                            first_response_ms=6.0, error_texts=texts)  # fmt: skip

    # One final, one error final: mixed, known only for the group.
    assert seen(_pair("g", [("a", False, None), (None, True, None), (None, True, "boom")])) == (
        [("group", None, "boom")] * 2, group("g", 3, 1, {"completed": 1, "error": 1}, 0, False, ("boom",)))
    # Both finals: each request completed.
    assert seen(_pair("", [("a", False, None), (None, True, None), (None, True, None)])) == (
        [("completed", True, None)] * 2, group("", 3, 1, {"completed": 2}, 0, True))
    # An error without final, then two plain finals: exactly one of them failed, which is unknown.
    assert seen(_pair("", [(None, False, "bad"), (None, True, None), (None, True, None)])) == (
        [("group", None, "bad")] * 2, group("", 3, 0, {"completed": 1, "error": 1}, 1, False, ("bad",)))
    # An error, then the client cancels: one error and one cancel, mixed.
    assert seen(_pair("", [(None, False, "bad")], "CANCELLED", "client_cancel")) == (
        [("group", None, "bad")] * 2, group("", 1, 0, {"cancelled": 1, "error": 1}, 1, False, ("bad",)))
    # Two errors without final, then an OK end (Triton's decoupled_execute_error): one request's
    # two errors, or one each: the wire cannot say, so neither `unconfirmed` nor `error` for both.
    assert seen(_pair("", [(None, False, "e1"), (None, False, "e2")])) == (
        [("group", None, "e1")] * 2, group("", 2, 0, {"unconfirmed or error": 2}, 2, False, ("e1", "e2")))
    # Two errors, then two finals: each final's request may or may not have had one of them.
    assert seen(_pair("", [(None, False, "e1"), (None, False, "e2"), (None, True, None), (None, True, None)])) == (
        [("group", None, "e1")] * 2, group("", 4, 0, {"completed or error": 2}, 2, False, ("e1", "e2")))
    # An error, then the call fails: every request ended in error.
    assert seen(_pair("", [(None, False, "bad")], "INTERNAL", "error")) == (
        [("error", False, "bad")] * 2, group("", 1, 0, {"error": 2}, 1, True, ("bad",)))


def test_check_json_and_text_show_a_groups_request_as_documented() -> None:
    """The `check --json` object of a group's request (docs/outcomes.md) and the group's text line."""
    from replay.machine.outcomes import GroupOutcome

    result: Any = _pair("", [(None, False, "bad")], "CANCELLED", "client_cancel")
    assert result.to_json()["requests"][0] == {
        "call": "c1.1", "protocol": "grpc", "method": "ModelStreamInfer", "kind": "stream", "model": "tokens",
        "request_id": "", "occurrence": 0, "seq": 2, "outcome": "group", "responses": 0, "text_responses": 0, "final": None, "first_response_ms": None,
        "last_response_ms": None,
        "duration_ms": 8.0, "status": "CANCELLED", "error": "bad", "violations": [],
        "group": {"first_seq": 2, "request_id": "", "requests": 2, "responses": 1, "text_responses": 0,
                  "ended": {"cancelled": 1, "error": 1}, "errors_without_final": 1, "per_request": False,
                  "first_response_ms": 6.0, "error_texts": ["bad"]},
        "notes": [], "recorded_as": None, "violations_after_loss": [],
    }  # fmt: skip
    assert result.requests[0].group.describe() == "group of 2 (ended: 1 cancelled, 1 error; 1 error(s) without final)"
    nothing = GroupOutcome(first_seq=1, request_id="", requests=2, responses=0, text_responses=0,
                           ended={"completed": 0}, errors_without_final=0, per_request=True)  # fmt: skip
    assert nothing.describe() == "group of 2 (ended: none)"


def test_check_json_lists_unattributable_responses_and_violations_as_documented() -> None:
    """unattributable.jsonl's two strays and missing_final.jsonl's violation, as `check --json` prints them;
    counts by name and by cause add up over requests and calls."""
    from tests.support.paths import DATA

    assert track(str(DATA / "unattributable.jsonl")).to_json()["unattributable"] == [
        {"call": "c1.1", "seq": 5, "request_id": "ghost", "reason": "unknown_id", "final": False, "error": None,
         "after_loss": False},
        {"call": "c1.1", "seq": 6, "request_id": "", "reason": "empty_id", "final": False, "error": None,
         "after_loss": False},
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
        {"call": "c1.1", "seq": 2, "request_id": "u", "reason": "no_request", "final": None, "error": None,
         "after_loss": False}
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


def test_warnings_say_which_record_was_ignored_and_why() -> None:
    """Records the tracker cannot use are not guessed at: one warning each, naming the record and the call,
    in capture order after the reader's own warnings; what was tracked is unaffected."""
    b = Builder().start()
    b.call("c1.1")  # seq 1
    b.call("c1.1")  # 2: a second start of the same call
    b.request("c1.1", "r")  # 3
    b.records.append(ev.MessageSeen(t_ns=b.tick(), call="c1.1", dir="c2s", index=1, size=9, compressed=True,
                                    decode_error="compressed message: not decoded"))  # 4  # fmt: skip
    b.response("c1.1", "r", None, final=True)  # 5
    b.half_close("c1.1")  # 6
    b.end("c1.1")  # 7
    b.response("c1.1", "r", "late")  # 8: after the call's end
    b.call("c1.3", method=INFER)  # 9
    b.request("c1.3", "u", model="echo", empty_final=None)  # 10
    b.request("c1.3", "v", model="echo", empty_final=None)  # 11: a second request on a unary call
    b.response("c1.3", "u", "x", final=None, model="echo")  # 12
    b.end("c1.3")  # 13
    # Calls whose call_start is not in the capture (lost in a gap), whatever their first record: one warning each.
    b.records.append(ev.MessageSeen(t_ns=b.tick(), call="c9.1", dir="s2c", index=0, size=9, compressed=False,
                                    request_id="z", final=True))  # 14  # fmt: skip
    b.records.append(ev.HalfClosed(t_ns=b.tick(), call="c9.1"))  # 15: the same call, not warned about again
    b.records.append(ev.HalfClosed(t_ns=b.tick(), call="c9.3"))  # 16
    b.records.append(ev.CallCancelled(t_ns=b.tick(), call="c9.5", cause="client_cancel", in_flight=[], responded=[],
                                      rst_code=8, elapsed_ms=1.0, forwarded_upstream=True))  # 17  # fmt: skip
    tracker = Tracker()
    for seq, record in enumerate(b.records):
        tracker.feed(seq, record)
    result = tracker.finish(warnings=["from the reader"])
    assert result.warnings == (
        "from the reader",
        "seq 2: call c1.1 started twice; the second start is ignored",
        "seq 4: request on call c1.1 not decoded (compressed message: not decoded): not tracked",
        "seq 8: message on call c1.1 after its end: ignored",
        "seq 11: second request message on unary call c1.3: ignored",
        "seq 14: call c9.1 without its call_start (lost, or in a file not given): its records from here are "
        "judged as a stream's, as after records lost",
        "seq 16: records of call c9.3 without its call_start (lost in a gap?): ignored",
        "seq 17: records of call c9.5 without its call_start (lost in a gap?): ignored",
    )
    assert [(r.call, r.request_id, r.outcome, r.responses) for r in result.requests] == [
        ("c1.1", "r", "completed", 1), ("c1.3", "u", "completed", 1),
    ]  # fmt: skip
    # The response on c9.1 answers a request not read: listed apart, not counted.
    assert [(u.call, u.request_id, u.after_loss) for u in result.unattributable] == [("c9.1", "z", True)]
    assert result.unlabelled_messages == 0 and result.records == len(b.records)


def test_check_passes_on_what_the_reader_tolerated() -> None:
    """A capture whose last line was cut short: `check` reports the reader's warning with the outcomes."""
    from tests.support.paths import DATA

    result = track(str(DATA / "truncated_last_line.jsonl"))
    assert len(result.warnings) == 1 and "last line cut short" in result.warnings[0]


def test_every_call_is_listed_with_how_it_ended() -> None:
    """`track().calls`: each call in capture order, inference or not, with its method, status, cause,
    details, duration and how many requests it carried; a call open at the capture's end has no status."""
    b = Builder().start()
    b.call("c1.1", method="/inference.GRPCInferenceService/ServerReady")
    b.end("c1.1", ms=2)
    b.call("c1.3", method=INFER)
    b.request("c1.3", "u", model="echo", empty_final=None)
    b.end("c1.3", "INTERNAL", "error", details="boom", ms=3)
    b.call("c1.5")
    b.request("c1.5", "a")
    b.request("c1.5", "b")
    result = track(b.records)
    assert [(c.call, c.method, c.status, c.cause, c.details, c.duration_ms, c.requests) for c in result.calls] == [
        ("c1.1", "/inference.GRPCInferenceService/ServerReady", "OK", "ok", None, 2.0, 0),
        ("c1.3", INFER, "INTERNAL", "error", "boom", 4.0, 1),
        ("c1.5", "/inference.GRPCInferenceService/ModelStreamInfer", None, None, None, None, 2),
    ]
    (unary,) = [r for r in result.requests if r.call == "c1.3"]
    assert (unary.outcome, unary.status, unary.error) == ("error", "INTERNAL", "boom")


def test_timings_are_milliseconds_to_the_microsecond() -> None:
    """first_response_ms / duration_ms keep three decimals (nanosecond clocks, millisecond report)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r")
    b.response("c1.1", "r", "a", ms=1.23456)
    b.response("c1.1", "r", None, final=True, ms=4000)
    b.end("c1.1")
    (r,) = track(b.records).requests
    assert (r.first_response_ms, r.duration_ms) == (1.235, 4001.235)


def test_the_missing_final_note_is_only_for_an_error_without_final_at_a_clean_end() -> None:
    """No note when the error carried the final flag, or when the call did not end OK (its end explains
    the missing final); with an OK end and no final it is noted (the test above)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "x", empty_final=None)
    b.response("c1.1", "x", None, final=True, error="boom")
    b.half_close("c1.1")
    b.end("c1.1")
    b.call("c1.3")
    b.request("c1.3", "y", empty_final=None)
    b.response("c1.3", "y", None, error="boom")
    b.cancel("c1.3", "client_cancel", rst_code=8)
    b.end("c1.3", "CANCELLED", "client_cancel", ms=0)
    got = [(r.request_id, r.outcome, r.final, r.notes) for r in track(b.records).requests]
    assert got == [("x", "error", True, ()), ("y", "error", False, ())]


def test_a_restart_after_cancel_says_where_the_cancelled_request_was() -> None:
    """The violation is at the re-sent request's record and names the cancelled one's call and record."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "job", model="tokens")  # seq 2
    b.cancel("c1.1", "client_cancel", rst_code=8)
    b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
    b.call("c1.3")
    b.request("c1.3", "job", model="other")  # 6: same id, another model: not a restart
    b.request("c1.3", "job", model="tokens")  # 7: the restart
    result = track(b.records)
    assert [[(v.name, v.seq, v.detail) for v in r.violations] for r in result.requests] == [
        [], [], [("restarted_after_cancel", 7, "request 'job' of model 'tokens' was cancelled before (call c1.1, seq 2)")],
    ]  # fmt: skip


def test_a_capture_missing_a_rotated_file_is_not_complete() -> None:
    """`complete` is false whenever a file of the capture was not given: its first (the records start at
    rotated file 1) or its next (the last file says where it continues)."""
    import dataclasses

    b = Builder().start()
    b.call("c1.1")
    b.end("c1.1")
    b.finish()
    later = [dataclasses.replace(b.records[0], file_index=1), *b.records[1:]]
    summary = track(later).summary()
    assert (summary["complete"], summary["gaps"]) == (False, 1)
    cut = [*b.records[:-1], dataclasses.replace(b.records[-1], reason="rotate", next_file="capture-x-0001.jsonl")]
    summary = track(cut).summary()
    assert (summary["complete"], summary["gaps"]) == (False, 1)
    assert track(b.records).summary()["complete"] is True


def test_messages_without_labels_are_counted_one_by_one() -> None:
    """Requests and responses without Triton labels add up, each one counted."""
    b = Builder().start()
    b.call("c1.1")
    for i in range(3):
        b.records.append(ev.MessageSeen(t_ns=b.tick(), call="c1.1", dir="c2s", index=i, size=10, compressed=False))
    b.records.append(ev.MessageSeen(t_ns=b.tick(), call="c1.1", dir="s2c", index=0, size=10, compressed=False))
    b.end("c1.1")
    result = track(b.records)
    assert result.unlabelled_messages == 4
    assert result.warnings[-1].startswith("4 inference message(s) carry no Triton labels")


def test_an_unattributable_error_keeps_its_error_text() -> None:
    """An error response for an id no request used is listed with its error (what the server said)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r")
    b.response("c1.1", "ghost", None, final=True, error="model is gone")
    b.response("c1.1", "r", None, final=True)
    b.end("c1.1")
    assert [u.to_json() for u in track(b.records).unattributable] == [
        {"call": "c1.1", "seq": 3, "request_id": "ghost", "reason": "unknown_id", "final": True, "error": "model is gone",
         "after_loss": False}
    ]


def test_several_paths_or_nothing_can_be_tracked() -> None:
    """track() takes a list of capture paths (each its own capture) or an empty iterable (nothing to report)."""
    from tests.support.paths import DATA

    both = track([str(DATA / "one_response.jsonl"), DATA / "no_text.jsonl"])
    assert (both.captures, [r.call for r in both.requests]) == (2, ["c1.1", "2:c1.1"])
    nothing = track([])
    assert (nothing.requests, nothing.calls, nothing.gaps, nothing.records) == ((), (), (), 0)


def test_records_in_memory_are_checked_for_holes_like_a_file() -> None:
    """Records given as (seq, record): a missing seq is a hole named `<records>`; an exactly repeated
    record is reported and skipped, and what follows it is still tracked."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r")
    b.response("c1.1", "r", "a")
    b.response("c1.1", "r", None, final=True)
    b.end("c1.1")
    b.finish()
    numbered = list(enumerate(b.records))
    repeated = [*numbered[:4], numbered[3], *numbered[4:]]
    result = track(repeated)
    assert [(g.kind, g.file, g.line, g.first_seq) for g in result.gaps] == [("duplicate_seq", "<records>", None, 3)]
    assert [(r.outcome, r.responses) for r in result.requests] == [("completed", 2)]
    holed = [*numbered[:3], *numbered[4:]]
    result = track(holed)
    assert [(g.kind, g.file, g.first_seq, g.count) for g in result.gaps] == [("seq_gap", "<records>", 3, 1)]


def test_a_capture_ending_twice_in_one_run_ends_its_open_requests_once() -> None:
    """The first of two captures read together ends (at the second's start) with a request open: it is
    incomplete, without a violation when the run ends too."""
    first = Builder().start()
    first.call("c1.1")
    first.request("c1.1", "r")
    second = Builder().start()
    second.call("c1.1")
    second.end("c1.1")
    result = track([*enumerate(first.records), *enumerate(second.finish().records)])
    assert [(r.call, r.outcome, r.violations) for r in result.requests] == [("c1.1", "incomplete", ())]


def test_a_rotated_file_does_not_end_the_calls_still_open() -> None:
    """A stream open across a rotation (capture_end `rotate`, then file 1's capture_start) goes on in
    the next file: its request completes there, in one capture."""
    import dataclasses

    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r")
    b.records.append(ev.CaptureEnded(t_ns=b.tick(), reason="rotate", counts={}, next_file="capture-x-0001.jsonl"))
    b.records.append(dataclasses.replace(b.records[0], t_ns=b.tick(), file_index=1))
    b.response("c1.1", "r", None, final=True)
    b.end("c1.1")
    b.finish()
    result = track(b.records)
    assert [(r.outcome, r.violations) for r in result.requests] == [("completed", ())]
    assert (result.captures, result.gaps) == (1, ())


def test_a_groups_missing_final_says_how_many_and_where() -> None:
    """Two requests with one id in flight together, finals due, one final: the group's violation is at
    the call's end record and says how many of the group got no final."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "d", empty_final=True)
    b.request("c1.1", "d", empty_final=True)
    b.response("c1.1", "d", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")  # seq 6
    (first, _) = track(b.records).requests
    assert [(v.name, v.seq, v.detail) for v in first.violations] == [
        ("missing_final", 6, "1 of the 2 requests with id 'd' sent together got no final flag before the call ended OK")
    ]


def test_a_shared_group_reports_its_first_error_and_ends_at_its_last_final() -> None:
    """Three id-less requests in flight: the group's error is the first error text seen; each request's
    duration runs to the group's last final (not to the call's end, 100 ms later); every response is
    reported on the latest request of the group sent before it."""
    b = Builder().start()
    b.call("c1.1")
    for _ in range(3):
        b.request("c1.1", "", empty_final=None)  # seq 2, 3, 4
    b.response("c1.1", "", None, final=True, error="first")  # 5
    b.response("c1.1", "", None, final=True, error="second")  # 6
    b.response("c1.1", "", None, final=True, ms=10)  # 7
    b.half_close("c1.1", ms=100)
    b.end("c1.1")
    seen: list[tuple[int, int]] = []
    tracker = Tracker(on_response=lambda call, req, seq, rec: seen.append((req, seq)))
    for seq, record in enumerate(b.records):
        tracker.feed(seq, record)
    result = tracker.finish()
    assert [(r.outcome, r.error, r.duration_ms) for r in result.requests] == [
        ("group", "first", 22.0), ("group", "first", 21.0), ("group", "first", 20.0),
    ]  # fmt: skip
    assert seen == [(4, 5), (4, 6), (4, 7)]
    assert result.requests[0].group is not None and result.requests[0].group.error_texts == ("first", "second")


def test_a_group_keeps_its_first_error_texts_in_text_order_whatever_order_they_came() -> None:
    """A group's errors, the same texts in two orders: the first by arrival differs (the row's error), the
    texts kept do not; past the bound the group keeps the first in text order, never the first that came."""

    def group(texts: list[str]) -> Any:
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "", empty_final=None)
        b.request("c1.1", "", empty_final=None)
        for t in texts:
            b.response("c1.1", "", None, error=t)
        b.response("c1.1", "", None, final=True)
        b.response("c1.1", "", None, final=True)
        b.end("c1.1")
        return track(b.records).requests[0]

    texts = [f"e{i:02d}" for i in range(KEEP_ERROR_TEXTS + 4)]
    up, down = group(texts), group(texts[::-1])
    assert (up.error, down.error) == ("e00", f"e{KEEP_ERROR_TEXTS + 3:02d}")
    assert up.group.error_texts == down.group.error_texts == tuple(texts[:KEEP_ERROR_TEXTS])
    assert group(["b", "a", "b"]).group.to_json()["error_texts"] == ["a", "b"]


def test_occurrences_are_counted_per_id() -> None:
    """The occurrence counts earlier requests with the same id on the call only."""
    b = Builder().start()
    b.call("c1.1")
    for rid in ("a", "b", "a"):
        b.request("c1.1", rid)
        b.response("c1.1", rid, None, final=True)
    b.end("c1.1")
    assert [(r.request_id, r.occurrence) for r in track(b.records).requests] == [("a", 0), ("b", 0), ("a", 1)]


def test_a_cancelled_request_ends_at_the_cancel_not_at_the_later_call_end() -> None:
    """The cancel record ends the call (duration to it); its call_end, 50 ms later, only adds the status."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r")
    b.cancel("c1.1", "client_cancel", rst_code=8, ms=20)
    b.end("c1.1", "CANCELLED", "client_cancel", ms=50)
    (r,) = track(b.records).requests
    assert (r.outcome, r.duration_ms, r.status) == ("cancelled", 20.0, "CANCELLED")


def test_a_raw_call_id_is_qualified_as_check_reports_it() -> None:
    """Tracker.qualified (what serve and diff use to find a call): the id as reported, prefixed from the
    second capture of a run on."""
    tracker = Tracker()
    tracker.feed(0, Builder().start().records[0])
    assert tracker.qualified("c1.1") == "c1.1"
    tracker.feed(0, Builder().start().records[0])
    assert tracker.qualified("c1.1") == "2:c1.1"


def test_a_stream_whose_first_message_is_a_response_lists_it_and_tracks_what_follows() -> None:
    """The request was lost (a gap): the stream's first record after its start is a response. It is the
    `unknown_id` it is, and the stream's next request and its responses are tracked as usual (this first
    message takes the tracker's general path, not the hot one: the call is not looked up yet)."""
    b = Builder().start()
    b.call("c1.1")
    b.response("c1.1", "lost", "t")
    b.request("c1.1", "r")
    b.response("c1.1", "r", "t")
    b.response("c1.1", "r", None, final=True)
    b.end("c1.1")
    result = track(b.records)
    assert [(u.request_id, u.reason) for u in result.unattributable] == [("lost", "unknown_id")]
    assert [(r.request_id, r.outcome, r.responses, r.text_responses) for r in result.requests] == [("r", "completed", 2, 1)]



def test_messages_without_labels_on_a_call_whose_start_was_not_read_are_not_called_inference() -> None:
    """A call taken up at its first message (its call_start lost) may be any method's, a health check's
    or a metadata call's: its unlabelled messages are counted apart, and the warning says what they may be."""
    b = Builder().start()
    for i in range(2):
        b.records.append(ev.MessageSeen(t_ns=b.tick(), call="c1.7", dir="c2s", index=i, size=0, compressed=False))
    b.records.append(ev.MessageSeen(t_ns=b.tick(), call="c1.7", dir="s2c", index=0, size=4, compressed=False))
    result = track(b.records)
    assert result.unlabelled_messages == 0
    assert not any("inference message(s)" in w for w in result.warnings)
    assert result.warnings[-1].startswith("3 message(s) on calls whose call_start was not read carry no Triton labels")

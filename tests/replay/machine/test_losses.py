"""What records lost in a hole do to the outcomes `check` reports: nothing open then is judged as if whole.

Records built in memory and numbered as the proxy numbers them; a hole is records taken out of the
numbering (a ``seq_gap``, as a file missing lines reads), or a ``gap`` record where the proxy
dropped them. Each test's capture also says, in its own records, what the wire saw (the request
that was lost is still counted by its call's ``call_end``): the tracker must not call success
what the records kept cannot show.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import orjson

from replay.capture import events as ev
from replay.capture.holes import Gap
from replay.capture.methods import START_NOT_READ
from replay.capture.reader import read_capture, skipping_damaged
from replay.capture.schema import encode
from replay.cli.check import check
from replay.cli.report import build_report
from replay.machine.tracker import Tracker, track
from replay.tools.captured import summarize
from replay.tools.diff import diff
from tests.data.make_golden import INFER, Builder


def _losing(b: Builder, *lost: int) -> list[tuple[int, Any]]:
    """The capture's records numbered as written, without those at the positions ``lost``: a seq hole."""
    return [(seq, r) for seq, r in enumerate(b.records) if seq not in lost]


def _rows(result: Any) -> list[tuple[str | None, str, str | None, list[str], list[str]]]:
    return [
        (r.request_id, r.outcome, r.recorded_as, [v.name for v in r.violations],
         [v.name for v in r.violations_after_loss])
        for r in result.requests
    ]  # fmt: skip


def _idless_second_request_lost() -> Builder:
    """Two id-less requests on a stream, the second and its first response at positions 4-5 (to lose)."""
    b = Builder().start()  # 0
    b.call("c1.1")  # 1
    b.request("c1.1", "", empty_final=None)  # 2
    b.response("c1.1", "", "a")  # 3
    b.request("c1.1", "", empty_final=None)  # 4: lost
    b.response("c1.1", "", "b")  # 5: lost
    b.response("c1.1", "", "c")  # 6
    b.response("c1.1", "", None, final=True)  # 7
    b.response("c1.1", "", None, final=True)  # 8
    b.half_close("c1.1")  # 9
    b.end("c1.1")  # 10
    return b.finish()


def test_an_idless_request_open_when_records_were_lost_is_unknown_not_completed() -> None:
    """The second id-less request and a response are in a seq hole: what is left reads as one request
    with 3 responses, a final and a response after it. It was open when records were lost, so its
    outcome is unknown (recorded as completed), and the second final is not held against the server."""
    whole = track(_idless_second_request_lost().records)
    assert _rows(whole) == [("", "completed", None, [], []), ("", "completed", None, [], [])] and whole.ok
    result = track(_losing(_idless_second_request_lost(), 4, 5))
    assert [g.kind for g in result.gaps] == ["seq_gap"]
    assert _rows(result) == [("", "unknown", "completed", [], ["response_after_final"])]
    assert result.ok  # a hole is the recorder's problem: not a violation of the server
    summary = result.summary()
    assert (summary["outcomes"], summary["violations"], summary["violations_after_loss"]) == ({"unknown": 1}, 0, 1)
    doc = result.requests[0].to_json()
    assert (doc["outcome"], doc["recorded_as"], [v["violation"] for v in doc["violations_after_loss"]]) == (
        "unknown", "completed", ["response_after_final"],
    )  # fmt: skip


def test_a_gap_record_is_a_loss_like_a_seq_hole() -> None:
    """The proxy dropped the second request and a response (its `gap` record where they were)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", empty_final=None)
    b.response("c1.1", "", "a")
    b.gap(2)
    b.response("c1.1", "", "c")
    b.response("c1.1", "", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(b.finish().records)
    assert [g.kind for g in result.gaps] == ["gap_record"]
    assert _rows(result) == [("", "unknown", "completed", [], [])]
    assert result.summary()["outcomes"] == {"unknown": 1}


def test_a_final_lost_when_it_was_due_is_not_a_missing_final_violation() -> None:
    """Empty finals enabled, the final in the hole: the OK end reads as `missing_final`; the loss explains it."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r", empty_final=True)
    b.response("c1.1", "r", "a")
    b.response("c1.1", "r", None, final=True)  # 4: lost
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(_losing(b.finish(), 4))
    assert _rows(result) == [("r", "unknown", "incomplete", [], ["missing_final"])]
    assert result.ok
    # Without the hole the same records are the server's violation: counted, exit 1.
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r", empty_final=True)
    b.response("c1.1", "r", "a")
    b.half_close("c1.1")
    b.end("c1.1")
    whole = track(b.finish().records)
    assert _rows(whole) == [("r", "incomplete", None, ["missing_final"], [])] and not whole.ok


def test_a_request_done_before_the_loss_keeps_its_outcome_and_later_violations_are_not_counted() -> None:
    """`a` completed before the hole; a second `a` and its first response were lost; the rest of the
    second's responses read as two responses after the first's final: shown, not counted, and the
    first is still completed (its final was recorded before anything was lost)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "a")
    b.response("c1.1", "a", None, final=True)
    b.request("c1.1", "a")  # 4: lost
    b.response("c1.1", "a", "x")  # 5: lost
    b.response("c1.1", "a", "y")
    b.response("c1.1", "a", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(_losing(b.finish(), 4, 5))
    assert _rows(result) == [("a", "completed", None, [], ["response_after_final", "response_after_final"])]
    assert result.ok and result.summary()["violations_after_loss"] == 2


def test_a_request_sent_after_the_loss_is_unknown_only_if_it_then_breaks_a_rule() -> None:
    """On a stream that lost records: a request with its own id that completes cleanly is completed;
    one answered by what a lost request of its id would explain (a final, then a response after it)
    is unknown, its violation not counted."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "x")
    b.response("c1.1", "x", None, final=True)
    b.request("c1.1", "")  # 4: lost (id-less, in flight over what follows)
    b.request("c1.1", "y")
    b.response("c1.1", "y", None, final=True)
    b.request("c1.1", "")
    b.response("c1.1", "", None, final=True)  # the lost request's final, read as the new one's
    b.response("c1.1", "", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    result = track(_losing(b.finish(), 4))
    assert _rows(result) == [
        ("x", "completed", None, [], []),
        ("y", "completed", None, [], []),
        ("", "unknown", "completed", [], ["response_after_final"]),
    ]
    assert result.ok


def test_calls_not_open_at_the_loss_are_judged_as_before() -> None:
    """A call that ended before the hole and one that started after it: their violations count."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "a")
    b.response("c1.1", "a", None, final=True)
    b.response("c1.1", "a", None, final=True)  # response after final, before anything was lost
    b.half_close("c1.1")
    b.end("c1.1")
    b.call("c2.1")  # 7: lost (a call of its own, wholly lost)
    b.call("c3.1")
    b.request("c3.1", "b")
    b.response("c3.1", "b", None, final=True)
    b.response("c3.1", "b", None, final=True)
    b.half_close("c3.1")
    b.end("c3.1")
    result = track(_losing(b.finish(), 7))
    assert _rows(result) == [
        ("a", "completed", None, ["response_after_final"], []),
        ("b", "completed", None, ["response_after_final"], []),
    ]
    assert not result.ok


def test_a_unary_request_whose_reply_was_recorded_after_the_loss_is_whole() -> None:
    """A unary call has one request and one reply: recorded, the loss took nothing of it. Without its
    reply (lost), what the OK end says is not evidence: unknown."""
    b = Builder().start()
    b.call("c1.1", INFER)
    b.request("c1.1", "u", empty_final=None)
    b.call("c2.1", INFER)  # 3: lost
    b.response("c1.1", "u", "a", final=None)
    b.end("c1.1")
    b.call("c3.1", INFER)
    b.request("c3.1", "v", empty_final=None)
    b.response("c3.1", "v", "a", final=None)  # 8: lost
    b.end("c3.1")
    result = track(_losing(b.finish(), 3, 8))
    assert [(r.request_id, r.outcome, r.recorded_as) for r in result.requests] == [
        ("u", "completed", None), ("v", "unknown", "unconfirmed"),
    ]  # fmt: skip


def test_a_response_no_request_can_have_after_a_loss_is_listed_not_counted() -> None:
    """An id never sent on the call: after a loss on the call its request may have been lost."""
    alone = track(_losing(_lost_b(), 3))
    assert [u.after_loss for u in alone.unattributable] == [True] and alone.ok
    b = _lost_b()
    b.call("c2.1")
    b.request("c2.1", "c")
    b.response("c2.1", "d", None, final=True)  # after the loss, but its call started after it: counted
    b.response("c2.1", "c", None, final=True)
    b.half_close("c2.1")
    b.end("c2.1")
    result = track(_losing(b, 3))
    assert [(u.call, u.request_id, u.reason, u.after_loss) for u in result.unattributable] == [
        ("c1.1", "b", "unknown_id", True), ("c2.1", "d", "unknown_id", False),
    ]  # fmt: skip
    assert not result.ok
    summary = result.summary()
    assert (summary["unattributable"], summary["unattributable_after_loss"]) == (2, 1)


def _lost_b() -> Builder:
    """Requests `a` and `b` on a stream, `b`'s request at position 3 (to lose), both answered."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "a")
    b.request("c1.1", "b")  # 3: lost
    b.response("c1.1", "b", None, final=True)
    b.response("c1.1", "a", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    return b


def test_an_http_event_stream_that_lost_an_event_is_unknown() -> None:
    """A generate_stream whose second event is lost: its clean end still gives the last event the final
    flag, but the request was open when an event was lost: unknown, recorded as completed."""
    from tests.support.paths import DATA

    kept = list(read_capture(DATA / "http" / "generate_stream_completed.jsonl"))
    events = [seq for seq, r in kept if isinstance(r, ev.MessageSeen) and r.dir == "s2c"]
    assert len(events) == 3
    result = track([(seq, r) for seq, r in kept if seq != events[1]])
    assert [(r.outcome, r.recorded_as, r.responses, r.final) for r in result.requests] == [
        ("unknown", "completed", 2, True),
    ]  # fmt: skip
    assert [(r.outcome, r.recorded_as) for r in track(kept).requests] == [("completed", None)]


def test_check_says_it_in_its_table_and_exit_code(tmp_path: Path) -> None:
    """`check` (through its sink, as users run it): the unknown outcome with what was recorded, the
    violation after the loss named so, the summary's counts, exit 0; the same capture without its hole
    (every record numbered) is the server's violation and the response nobody sent: exit 1."""
    import io

    b = _idless_second_request_lost()
    holed = tmp_path / "holed.jsonl"
    holed.write_bytes(_render_losing(b, 4, 5))
    out = io.StringIO()
    assert check([str(holed)], out=out, err=io.StringIO()) == 0
    text = out.getvalue()
    # (The table wraps its cells: each checked piece is one line of one.)
    assert "unknown (records were lost on its call;" in text and "recorded as completed)" in text
    assert "response_after_final (after records" in text
    assert "not counted, as records of their calls were lost before them: 1 violation(s)" in text
    assert "1 request(s) have the outcome unknown" in text
    out = io.StringIO()
    assert check([str(holed)], as_json=True, out=out, err=io.StringIO()) == 0
    summary = orjson.loads(out.getvalue())["summary"]
    assert (summary["outcomes"], summary["violations"], summary["violations_after_loss"]) == ({"unknown": 1}, 0, 1)


def _render_losing(b: Builder, *lost: int) -> bytes:
    """``b``'s file as the proxy wrote it, without the lines of the records at positions ``lost``."""
    from replay.capture.schema import encode

    return b"".join(encode(r, seq) for seq, r in enumerate(b.records) if seq not in lost)


def test_a_tracker_fed_without_being_told_of_losses_judges_as_before() -> None:
    """The tracker learns of holes only through `lost` (a reader's `on_loss`): a caller that does not
    wire it gets the old judgement, which is why every command wires it (check, report, serve, diff)."""
    kept = _losing(_idless_second_request_lost(), 4, 5)
    tracker = Tracker()
    for seq, r in kept:
        tracker.feed(seq, r)
    assert _rows(tracker.finish()) == [("", "completed", None, ["response_after_final"], [])]
    told = Tracker()
    for seq, r in kept:
        if seq == 6:
            told.lost(Gap(kind="seq_gap", file="", line=None, first_seq=4, last_seq=5, count=2, detail=""))
        told.feed(seq, r)
    assert _rows(told.finish()) == [("", "unknown", "completed", [], ["response_after_final"])]


def test_diff_compares_what_both_captures_recorded(tmp_path: Path) -> None:
    """`diff`'s verdict is about the records both captures hold: a request `check` calls unknown for
    a loss around it is compared on what its records show (the same as B's: equivalent), and its
    violations after the loss are compared too (a B without them differs)."""
    from replay.tools.captured import summarize
    from replay.tools.diff import diff

    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "a")
    b.response("c1.1", "a", "x")
    b.call("c2.1")  # 4: lost (another call's start)
    b.response("c1.1", "a", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    holed = tmp_path / "holed.jsonl"
    holed.write_bytes(_render_losing(b.finish(), 4))
    whole = tmp_path / "whole.jsonl"
    whole.write_bytes(b"".join(_renumbered(b, 4)))  # the same records, numbered without a hole
    a_side, b_side = summarize(holed), summarize(whole)
    assert [(r.outcome, r.recorded_as) for r in a_side.outcomes.requests] == [("unknown", "completed")]
    assert [(r.outcome, r.recorded_as) for r in b_side.outcomes.requests] == [("completed", None)]
    result = diff(a_side, b_side)
    assert result.equivalent and [g.kind for g in result.holes_a] == ["seq_gap"]
    lost = tmp_path / "lost.jsonl"
    lost.write_bytes(_render_losing(_idless_second_request_lost(), 4, 5))
    kept = tmp_path / "kept.jsonl"
    kept.write_bytes(b"".join(_renumbered(_idless_second_request_lost(), 4, 5, 8)))  # without the extra final
    changes = {c.field: (c.a, c.b) for p in diff(summarize(lost), summarize(kept)).pairs for c in p.changes}
    assert changes["violations"] == (["response_after_final"], [])


def _renumbered(b: Builder, *lost: int) -> list[bytes]:
    """``b``'s records without those at positions ``lost``, numbered without a hole."""
    from replay.capture.schema import encode

    return [encode(r, seq) for seq, r in enumerate(r for i, r in enumerate(b.records) if i not in lost)]


def test_a_loss_walks_only_the_calls_open_then() -> None:
    """What a loss looks at is the calls open at it: a call is let go at its end, and a capture's calls
    when the next capture starts (a long capture with many holes costs per open call, not per call)."""
    b = Builder().start()
    for call in ("c1.1", "c1.2"):
        b.call(call)
    b.request("c1.2", "r")
    b.end("c1.1")
    tracker = Tracker()
    for seq, r in enumerate(b.records):
        tracker.feed(seq, r)
    assert list(tracker._open) == ["c1.2"]
    tracker.feed(len(b.records), Builder().start().records[0])  # a second capture starts
    assert tracker._open == {}


def test_a_cancel_of_a_request_open_at_a_loss_is_no_evidence_of_a_restart() -> None:
    """`r` was open when its final was lost, then its stream was cancelled: whether it was still in
    flight at the cancel is not on record, so the same id sent on a later call is no counted
    `restarted_after_cancel` (it is when the cancel is whole)."""

    def capture() -> Builder:
        b = Builder().start()
        b.call("c1.1")
        b.request("c1.1", "r")
        b.response("c1.1", "r", "x")
        b.response("c1.1", "r", None, final=True)  # 4: lost
        b.cancel("c1.1", "client_cancel", rst_code=8)
        b.end("c1.1", "CANCELLED", "client_cancel")
        b.call("c1.3")  # the same client connection
        b.request("c1.3", "r")
        b.response("c1.3", "r", None, final=True)
        b.half_close("c1.3")
        b.end("c1.3")
        return b.finish()

    result = track(_losing(capture(), 4))
    assert _rows(result) == [("r", "unknown", "cancelled", [], []), ("r", "completed", None, [], [])]
    assert result.ok
    whole = capture()
    whole.records.pop(4)  # the same without the final, numbered whole: the cancel is whole evidence
    assert _rows(track(whole.records))[1] == ("r", "completed", None, ["restarted_after_cancel"], [])


def test_a_unary_request_whose_end_was_lost_is_unknown_though_its_reply_came_before() -> None:
    """The reply recorded before the loss, the call's end lost in it: not `incomplete` (the call did
    end), unknown."""
    b = Builder().start()
    b.call("c1.1", INFER)
    b.request("c1.1", "u", empty_final=None)
    b.response("c1.1", "u", "a", final=None)
    b.end("c1.1")  # 4: lost
    b.call("c2.1", INFER)
    b.request("c2.1", "v", empty_final=None)
    b.response("c2.1", "v", "a", final=None)
    b.end("c2.1")
    result = track(_losing(b.finish(), 4))
    assert [(r.request_id, r.outcome, r.recorded_as) for r in result.requests] == [
        ("u", "unknown", "incomplete"), ("v", "completed", None),
    ]  # fmt: skip


def test_a_hole_before_a_captures_first_record_touches_no_earlier_capture(tmp_path: Path) -> None:
    """Capture A killed with a request open (no capture_end), then capture B, read in the same run,
    whose first file retention removed: B's hole lost B's records, none of A's: A's request is
    `incomplete`, as when A is read alone."""
    import dataclasses

    from replay.capture.schema import encode

    a = Builder().start()
    a.call("c1.1")
    a.request("c1.1", "r")
    a.response("c1.1", "r", "x")
    (tmp_path / "capture-20260528T000000-100.jsonl").write_bytes(
        b"".join(encode(r, s) for s, r in enumerate(a.records))
    )
    b = Builder(t=a.t + 10**9).start()
    b.records[0] = dataclasses.replace(b.records[0], file_index=1)
    b.call("c9.1")
    b.request("c9.1", "s")
    b.response("c9.1", "s", None, final=True)
    b.end("c9.1")
    (tmp_path / "capture-20260528T000100-200-0001.jsonl").write_bytes(
        b"".join(encode(r, s + 500) for s, r in enumerate(b.finish().records))
    )
    result = track(tmp_path)
    assert [g.kind for g in result.gaps] == ["missing_capture_end", "missing_file"]
    assert [(r.request_id, r.outcome, r.recorded_as) for r in result.requests] == [
        ("r", "incomplete", None), ("s", "completed", None),
    ]  # fmt: skip


def test_check_table_keeps_a_request_whose_violations_came_after_a_loss(tmp_path: Path) -> None:
    """More requests than --rows: the one with a violation after the loss (not counted) is still a
    row, so the summary's "not counted: 1 violation(s)" points at something shown."""
    import io

    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "a")
    b.response("c1.1", "a", None, final=True)
    b.request("c1.1", "a")  # 4: lost
    b.response("c1.1", "a", None, final=True)
    for i in range(2, 5):
        b.call(f"c{i}.1")
        b.request(f"c{i}.1", "z")
        b.response(f"c{i}.1", "z", None, final=True)
        b.half_close(f"c{i}.1")
        b.end(f"c{i}.1")
    b.half_close("c1.1")
    b.end("c1.1")
    path = tmp_path / "x.jsonl"
    path.write_bytes(_render_losing(b.finish(), 4))
    out = io.StringIO()
    assert check([str(path)], rows=2, out=out, err=io.StringIO()) == 0
    assert "response_after_final (after records" in out.getvalue()


def test_records_in_memory_are_judged_as_a_file_is_by_every_tool() -> None:
    """`summarize` (what serve and diff read) given records, not paths: the same holes and the same
    judgement as `track` and as the file (it saw no hole and counted the violation)."""
    from replay.tools.captured import summarize

    kept = _losing(_idless_second_request_lost(), 4, 5)
    summary = summarize(kept).outcomes
    assert [g.kind for g in summary.gaps] == ["seq_gap"]
    assert _rows(summary) == _rows(track(kept)) == [("", "unknown", "completed", [], ["response_after_final"])]


def _stream_across_a_cut(tmp_path: Path, *, first_file_gone: bool) -> Path:
    """One stream with requests a, b, c; its capture rotated after b was sent. With ``first_file_gone``
    the first file (the call's start, a, b) is not given (a retention cut); else the call's start line
    is damaged (read with --skip-damaged)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "a")
    b.response("c1.1", "a", None, final=True)
    b.request("c1.1", "b")
    cut = len(b.records)
    b.response("c1.1", "b", "b-0")
    b.response("c1.1", "b", None, final=True)
    b.request("c1.1", "c")
    b.response("c1.1", "c", "c-0")
    b.response("c1.1", "c", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    b.finish()
    stem = "capture-20260101T000000-7"
    first, later = b.records[:cut], b.records[cut:]
    start = first[0]
    assert isinstance(start, ev.CaptureStarted)
    rotated = ev.CaptureEnded(t_ns=later[0].t_ns, reason="rotate", counts={}, next_file=f"{stem}-0001.jsonl")
    second = [dataclasses.replace(start, t_ns=later[0].t_ns, file_index=1), *later]
    lines = [encode(r, seq) for seq, r in enumerate([*first, rotated])]
    rest = [encode(r, len(lines) + i) for i, r in enumerate(second)]
    if first_file_gone:
        (tmp_path / f"{stem}-0001.jsonl").write_bytes(b"".join(rest))
        return tmp_path
    lines[1] = lines[1][:20] + b"\n"  # the call_start cut short: a damaged line
    path = tmp_path / f"{stem}.jsonl"
    path.write_bytes(b"".join([*lines, *rest]))
    return path


def test_a_call_whose_start_was_not_read_is_judged_from_what_was_read(tmp_path: Path) -> None:
    """A stream whose call_start is in a file retention removed, or on a damaged line: what was read of
    it is judged (before, its records were ignored: 0 requests, exit 0, one warning). A request read
    whole keeps its outcome; responses whose request was not read are listed apart, not counted; the
    call's method is not claimed. The report draws it."""
    for gone in (True, False):
        where = tmp_path / ("gone" if gone else "damaged")
        where.mkdir()
        capture = _stream_across_a_cut(where, first_file_gone=gone)
        with skipping_damaged():
            result = track(capture)
            model = build_report([str(capture)], where / "r.html", err=io.StringIO())
        # A damaged line lost only the call's start: a and b were read, and are whole.
        whole = [] if gone else [("a", "completed", None, [], []), ("b", "completed", None, [], [])]
        assert _rows(result) == [*whole, ("c", "completed", None, [], [])], gone
        assert [(u.request_id, u.after_loss) for u in result.unattributable] == ([("b", True)] * 2 if gone else [])
        assert [(c.call, c.method, c.requests) for c in result.calls] == [("c1.1", START_NOT_READ, len(whole) + 1)]
        assert result.summary()["violations"] == 0
        assert sorted(rid for rid in model["lanes"]["rid"] if rid) == [r.request_id for r in result.requests]
        # Judged as a gRPC stream, shown so (not as HTTP), and matched as well as judged: the capture
        # against itself is equivalent (its requests were only in A: every diff of it said different).
        assert [r.to_json()["protocol"] for r in result.requests] == ["grpc"] * len(result.requests)
        with skipping_damaged():
            same = diff(summarize(capture), summarize(capture))
        assert same.equivalent and len(same.pairs) == len(result.requests), gone


def test_an_id_group_sent_after_a_loss_is_unknown_though_it_broke_no_rule() -> None:
    """A long id-less request lost with the call's start (a retention cut), then two id-less requests of
    which one asks for empty finals: the lost request's responses and its final are counted for their
    group without breaking any rule (a final of a request that did not ask may come), so the group's
    counts are not what its requests got: `unknown`, recorded as what the records show (before: the
    group's `ended` said 2 completed, exit 0)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", prompt="long")
    b.response("c1.1", "", "l-0")
    cut = len(b.records)
    b.request("c1.1", "", prompt="a", empty_final=True)
    b.request("c1.1", "", prompt="b", empty_final=None)
    b.response("c1.1", "", "x-0")
    b.response("c1.1", "", None, final=True)  # the long request's
    b.response("c1.1", "", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    b.finish()
    after = [(seq, r) for seq, r in enumerate(b.records) if seq >= cut or isinstance(r, ev.CaptureStarted)]
    result = track(after)
    assert [(r.outcome, r.recorded_as) for r in result.requests] == [("unknown", "completed")] * 2
    assert result.ok

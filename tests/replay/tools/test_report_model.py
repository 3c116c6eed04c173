"""The report model (replay/report.py): lanes, ticks, cancels and statistics from the tracker."""

from __future__ import annotations

from typing import Any

import pytest

from replay.capture.reader import read_capture
from replay.tools.report.model import ERROR, FINAL, TEXT, UNATTRIBUTED, ReportBuilder, percentile
from replay.tools.report.page import render_html
from tests.support.paths import DATA


def model_of(*names: str) -> dict[str, Any]:
    reader = read_capture([DATA / n for n in names])
    b = ReportBuilder()
    reader.on_loss = b.tracker.lost  # as `report` reads it
    for seq, rec in reader:
        b.feed(seq, rec)
    return b.finish(files=[str(p) for p in reader.files], gaps=reader.gaps, warnings=reader.warnings)


def lane_names(m: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    calls, lanes = m["calls"], m["lanes"]
    return [(calls["id"][c], rid, out) for c, rid, out in zip(lanes["call"], lanes["rid"], lanes["outcome"], strict=True)]


def test_one_lane_per_request_with_the_trackers_outcomes() -> None:
    """stream_cancel: lanes done/a/b on call c1.1 with the outcomes `replay check` reports."""
    m = model_of("stream_cancel.jsonl")
    assert lane_names(m) == [("c1.1", "done", "completed"), ("c1.1", "a", "cancelled"), ("c1.1", "b", "cancelled")]
    assert m["calls"]["conn"] == ["c1"]
    assert m["summary"]["outcomes"] == {"completed": 1, "cancelled": 2}


def test_an_id_groups_responses_are_counted_for_its_model_and_shown_on_its_lanes() -> None:
    """idless_mixed_ends: 10 id-less requests in flight together, 10 responses the wire cannot place:
    the model's row counts them (it said 0), and each lane shows its own (none) and the group's, as
    `check`'s table does; a request alone with its id keeps its own count (idless_mixed_ids)."""
    from replay.machine.tracker import track

    m = model_of("idless_mixed_ends.jsonl")
    (row,) = m["models"]
    assert (row["requests"], row["responses"], row["text"]) == (10, 10, 7)
    assert set(m["lanes"]["group"]) == {"group 10 (7)"} and set(m["lanes"]["responses"]) == {0}
    mixed = model_of("idless_mixed_ids.jsonl")
    checked = track(str(DATA / "idless_mixed_ids.jsonl")).requests
    groups = {(r.group.first_seq, r.group.responses) for r in checked if r.group is not None}
    assert mixed["models"][0]["responses"] == sum(r.responses for r in checked) + sum(n for _, n in groups)
    assert mixed["lanes"]["group"] == [None, "group 4 (2)", "group 4 (2)"]


def test_an_id_groups_lanes_have_no_gaps_and_no_per_request_count_in_the_overview() -> None:
    """Responses of an id group that came together are drawn on its latest request, whose they are the wire does
    not say: neighbours there are no one request's gaps (a lane's p50/p99, the model's, the overview's gap
    chart), and no member's own count (0) goes into the responses-per-request histogram; a request alone with
    its id keeps both (idless_mixed_ids: the lane without a group)."""
    m = model_of("idless_mixed_ids.jsonl")
    lanes = m["lanes"]
    assert lanes["group"] == [None, "group 4 (2)", "group 4 (2)"]
    assert [p is None for p in lanes["inter_p50_ms"]] == [False, True, True]
    assert [p is None for p in lanes["inter_p99_ms"]] == [False, True, True]
    alone = model_of("idless_mixed_ends.jsonl")  # every lane a group's: nothing per request to show
    assert set(alone["lanes"]["inter_p50_ms"]) == {None} and alone["models"][0]["inter_p50_ms"] is None
    sketch = alone["overview"]["sketch"]
    assert sum(sketch["gap_us"]) == 0 and sum(sketch["responses"]) == 0, sketch


def test_cancel_marks_its_in_flight_set_and_cause() -> None:
    """The cancel names its cause and the lanes of the requests in flight (a executing, b queued)."""
    m = model_of("stream_cancel.jsonl")
    (cancel,) = m["cancels"]
    assert cancel["cause"] == "client_cancel" and cancel["rst_code"] == 8
    assert cancel["in_flight"] == ["a", "b"]
    assert [m["lanes"]["rid"][i] for i in cancel["lanes"]] == ["a", "b"]
    assert [m["lanes"]["rid"][i] for i in cancel["responded_lanes"]] == ["a"]
    assert cancel["t"] == 27_000  # µs after the first record


@pytest.mark.parametrize(("sent_ns", "cancel_after_ns"), [(0, 10_001_000), (900, 10_000_400), (123, 7_654_321)])
def test_a_cancel_marks_the_lanes_it_ended_whatever_their_sub_microsecond_times(sent_ns: int,
                                                                             cancel_after_ns: int) -> None:  # fmt: skip
    """A lane ends at its start plus its duration, which is kept to the microsecond: the end read up to 1 us
    before the cancel that ended the request (10.001 ms * 1e6 is 10000999.99...), and the cancel's lanes and
    responded lanes left it out (no mark on 1 cancel in 8, an empty responded column)."""
    from replay.capture import events as ev
    from tests.data.make_golden import Builder

    b = Builder().start()
    b.call("c1.1")
    b.t += sent_ns
    b.request("c1.1", "a", ms=0)
    b.response("c1.1", "a", None, final=False)
    t_sent = next(r.t_ns for r in b.records if isinstance(r, ev.MessageSeen) and r.dir == "c2s")
    b.t = t_sent + cancel_after_ns
    b.cancel("c1.1", "client_cancel", rst_code=8, ms=0)
    b.end("c1.1", ms=0, status="CANCELLED", cause="client_cancel")
    rb = ReportBuilder()
    for seq, rec in enumerate(b.finish().records):
        rb.feed(seq, rec)
    m = rb.finish(files=[], gaps=[], warnings=[])
    (cancel,) = m["cancels"]
    assert cancel["lanes"] == cancel["responded_lanes"] == [0], (cancel, m["lanes"]["end"])


def test_ticks_are_attributed_and_flagged_text_empty_final() -> None:
    """Each response is a tick on its request's lane: text, then the empty final flagged FINAL."""
    m = model_of("stream_cancel.jsonl")
    t = m["ticks"]
    done = [(t["t"][k], t["flags"][k]) for k in range(len(t["t"])) if t["lane"][k] == 0]
    assert done == [(7_000, TEXT), (12_000, FINAL)]
    a = [t["flags"][k] for k in range(len(t["t"])) if t["lane"][k] == 1]
    assert a == [TEXT, TEXT]


def test_in_band_error_and_deadline_and_half_close_are_marked() -> None:
    """error_midstream flags its error tick; deadline.jsonl carries the call's deadline time."""
    m = model_of("error_midstream.jsonl", "deadline.jsonl")
    flags = m["ticks"]["flags"]
    assert any(f & ERROR and f & FINAL for f in flags)
    calls = m["calls"]
    dl = [d for d in calls["deadline"] if d is not None]
    assert len(dl) == 1
    i = calls["deadline"].index(dl[0])
    assert dl[0] - calls["start"][i] == 500_000
    assert [c["cause"] for c in m["cancels"]] == ["deadline"]


def test_unattributable_responses_get_their_own_lane() -> None:
    """Responses the tracker cannot attribute are drawn on an `(unattributed)` lane, never on a request."""
    m = model_of("unattributable.jsonl")
    names = lane_names(m)
    assert names[-1][2] == "unattributable"
    lane = len(names) - 1
    t = m["ticks"]
    un = [t["flags"][k] for k in range(len(t["t"])) if t["lane"][k] == lane]
    assert len(un) == 2 and all(f & UNATTRIBUTED for f in un)  # unknown_id, empty_id (the `dup` one is its group's)
    assert m["unattributable"] == 2


def test_non_inference_calls_are_lanes_of_their_own() -> None:
    """unary.jsonl: ServerLive is a call lane (no request id), the two ModelInfer calls request lanes."""
    m = model_of("unary.jsonl")
    assert [(rid, out) for _, rid, out in lane_names(m)] == [(None, "ok"), ("e1", "completed"), ("e2", "error")]
    assert m["calls"]["method"][0] == "ServerLive"


def test_two_captures_keep_their_connections_apart() -> None:
    """Two captures with the same call/connection ids become separate groups, in the order given."""
    m = model_of("one_response.jsonl", "no_text.jsonl")
    assert m["calls"]["conn"] == ["c1", "2:c1"]
    assert m["calls"]["id"] == ["c1.1", "2:c1.1"]


def test_per_request_and_per_model_statistics() -> None:
    """many_responses: 6 responses 5 ms apart -> inter-response p50 = p99 = 5 ms; per-model counts."""
    m = model_of("many_responses.jsonl")
    lanes = m["lanes"]
    assert lanes["responses"] == [6] and lanes["text"] == [5]
    assert lanes["inter_p50_ms"] == [5.0] and lanes["inter_p99_ms"] == [5.0]
    assert lanes["ttfr_ms"] == [5.0]
    (model,) = m["models"]
    assert model["model"] == "tokens" and model["requests"] == 1 and model["outcomes"] == {"completed": 1}
    assert model["inter_p50_ms"] == 5.0


def test_percentile_is_nearest_rank() -> None:
    """p50 of 1..4 is 2, p99 of 1..100 is 99, empty is None."""
    assert percentile([4, 1, 3, 2], 50) == 2
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([], 50) is None


def test_records_are_embedded_for_hover_only_up_to_the_limit() -> None:
    """Small captures embed each record (payload bytes omitted); beyond the limit none are kept."""
    m = model_of("many_responses.jsonl")
    views = m["record_view"]
    assert views is not None and views[0]["kind"] == "capture_start"
    assert all("omitted" in v["payload"] for v in views if v.get("payload"))
    reader = read_capture(DATA / "many_responses.jsonl")
    b = ReportBuilder(record_limit=3)
    for seq, rec in reader:
        b.feed(seq, rec)
    assert b.finish()["record_view"] is None


def test_page_embeds_the_model_safely() -> None:
    """A `</script>` inside a captured string cannot end the embedded JSON early."""
    m = model_of("one_response.jsonl")
    m["title"] = "x</script><b>"
    page = render_html(m).decode()
    assert page.count("</script>") == 4  # the error collector, uPlot, the data, the page script
    assert "x&lt;/script>" in page
    assert "__REPORT_DATA__" not in page


def test_cancel_highlights_only_the_open_occurrence_of_a_reused_id() -> None:
    """Id `x` completes, is sent again on the same stream and cancelled: only the second lane is in flight."""
    from tests.data.make_golden import Builder

    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "x")
    b.response("c1.1", "x", "t0", final=True)
    b.request("c1.1", "x")
    b.response("c1.1", "x", "t1")
    b.cancel("c1.1", "client_cancel", rst_code=8)
    b.end("c1.1", "CANCELLED", "client_cancel")
    b.finish()
    m = ReportBuilder()
    for seq, rec in enumerate(b.records):
        m.feed(seq, rec)
    model = m.finish()
    assert model["lanes"]["outcome"] == ["completed", "cancelled"]
    (cancel,) = model["cancels"]
    assert cancel["in_flight"] == ["x"]
    assert cancel["lanes"] == [1] and cancel["responded_lanes"] == [1]


def test_page_escapes_every_angle_bracket_in_the_data() -> None:
    """`<!--` and `</script` inside captured strings never reach the page raw."""
    m = model_of("one_response.jsonl")
    m["warnings"] = ["<!--<script>", "</script>"]
    page = render_html(m).decode()
    data = page.split('type="application/json">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and "\\u003c!--\\u003cscript>" in data


def test_dropped_records_are_a_span_across_the_timeline() -> None:
    """gaps.jsonl: the `gap` record becomes a dropped-records span (its time range, count and reason)."""
    m = model_of("gaps.jsonl")
    (span,) = m["dropped"]
    assert span["count"] == 3 and span["reason"].startswith("queue_full")
    assert span["t1"] - span["t0"] == 1000  # first_t_ns .. last_t_ns, in µs
    assert [g["kind"] for g in m["gaps"]] == ["gap_record", "seq_gap"]


@pytest.mark.parametrize("name", ["idless_mixed_ends.jsonl", "idless_mixed_ids.jsonl", "idless_interleaved_texts.jsonl"])
def test_an_id_groups_lanes_carry_its_first_response_where_the_request_has_none_of_its_own(name: str) -> None:
    """check's table shows `group 2.2` as such a request's first response; the report's row was blank. Each
    lane's first response is its own, or its group's where check shows the group's (and null elsewhere)."""
    from replay.cli.checktable import _counts
    from replay.machine.tracker import track

    m = model_of(name)
    rows = {(r.call, r.request_id, r.seq): _counts(r)[1] for r in track(str(DATA / name)).requests}
    lanes = m["lanes"]
    shown = [(None, None) if own is None and grp is None else ("group", grp) if own is None else ("own", own)
             for own, grp in zip(lanes["ttfr_ms"], lanes["group_first_ms"], strict=True)]  # fmt: skip

    def cell(text: str) -> tuple[str | None, float | None]:
        if not text:
            return None, None
        return ("group", float(text[6:])) if text.startswith("group ") else ("own", float(text))

    assert sorted(shown, key=repr) == sorted((cell(c) for c in rows.values()), key=repr)
    assert any(kind == "group" for kind, _ in shown)

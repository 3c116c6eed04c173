"""`replay check`'s table keeps only the requests it shows (replay/cli/checktable.py), and prints the
same bytes as when it was built from every request in memory: the stored output of main before the
change (tests/replay/cli/checktable_cases.py) for goldens and synthetic captures, and, for
Hypothesis-generated captures, that in-memory rendering done here (the tracker without a sink,
every request selected as the table did)."""

from __future__ import annotations

import io
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.capture import events as ev
from replay.capture.reader import read_capture
from replay.cli.check import render_marks
from replay.cli.checktable import TableSink, needs_attention, render_human
from replay.machine.outcomes import RequestOutcome
from replay.machine.tracker import Tracker
from tests.data.make_golden import INFER, STREAM, Builder, exchanges
from tests.replay.cli import checktable_cases as cases
from tests.support.tracking import track_in_memory

EXPECTED: dict[str, dict[str, Any]] = orjson.loads(cases.EXPECTED.read_bytes())


@pytest.fixture(scope="module")
def all_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[Path], int]]:
    return cases.cases(tmp_path_factory.mktemp("synthetic"))


def test_every_stored_case_is_checked(all_cases: dict[str, tuple[list[Path], int]]) -> None:
    """The stored outputs and the cases are the same set, and they include cut tables with rows hidden."""
    assert set(all_cases) == set(EXPECTED)
    assert sum("request(s) not shown" in e["out"] for e in EXPECTED.values()) >= 20


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_table_is_what_main_printed(name: str, all_cases: dict[str, tuple[list[Path], int]]) -> None:
    paths, rows = all_cases[name]
    assert cases.run(paths, rows) == EXPECTED[name]


@pytest.mark.parametrize("name", ["truncated_last_line", "proxy_killed", "gaps"])
def test_table_does_not_depend_on_where_the_capture_lives(name: str, tmp_path: Path) -> None:
    """A hole's line names its file whole, never wrapped at the console's width: the stored output
    holds for a capture at any path (a checkout in a longer directory than the one that made them)."""
    deep = tmp_path / ("a-much-longer-directory-name-for-checking-" * 3) / "x"
    deep.mkdir(parents=True)
    (deep / f"{name}.jsonl").write_bytes((cases.DATA / f"{name}.jsonl").read_bytes())
    for rows in cases.GOLDEN_ROWS:
        assert cases.run([deep / f"{name}.jsonl"], rows) == EXPECTED[f"{name} --rows {rows}"]


def _in_memory(paths: list[Path], rows: int) -> dict[str, object]:
    """What the table printed when it was built from every request (main at 2e82fd7, its selection here)."""
    result, marks = track_in_memory(paths)
    shown: Sequence[RequestOutcome] = result.requests
    hidden = 0
    if rows and len(shown) > rows:
        picked = [r for r in shown if needs_attention(r)][:rows]
        hidden = len(shown) - len(picked)
        shown = picked
    out = io.StringIO()
    render_human(result, out, shown=shown, hidden=hidden)
    render_marks(marks, out)
    err = "".join(f"triton-tap: warning: {w}\n" for w in result.warnings)
    return cases.printed(paths, out.getvalue(), err, 0 if result.ok else 1)


_ENDS = [("OK", "ok", None), ("INTERNAL", "error", "bad"), *((s, c, None) for c, s in ev.STATUS_FOR_CAUSE.items())]


@st.composite
def captures(draw: st.DrawFn) -> bytes:
    """Streams and unary calls with requests of a few ids, responses of every kind, every way of ending."""
    b = Builder().start()
    calls: list[str] = []
    ended: set[str] = set()
    ops = st.tuples(st.sampled_from(["call", "request", "request", "response", "response", "response",
                                     "half_close", "end"]),
                    st.integers(0, 5), st.sampled_from(["", "", "a", "b"]), st.integers(0, 63))  # fmt: skip
    for op, which, rid, v in draw(st.lists(ops, max_size=80)):
        if op == "call" or not calls:
            call = f"c{len(calls) + 1}.1"
            b.call(call, method=INFER if v % 4 == 0 else STREAM)
            calls.append(call)
            continue
        call = calls[which % len(calls)]
        if call in ended:
            continue
        if op == "request":
            b.request(call, rid, empty_final=(True, False, None)[v % 3])
        elif op == "response":
            b.response(call, rid, "t" if v & 1 else None, final=(False, True, None)[(v >> 1) % 3],
                       error="boom" if v & 8 else None)  # fmt: skip
        elif op == "half_close":
            b.half_close(call)
        else:
            status, cause, details = _ENDS[v % len(_ENDS)]
            if cause not in ("ok", "error"):
                b.cancel(call, cause)
            b.end(call, status=status, cause=cause, details=details)
            ended.add(call)
    if draw(st.booleans()):
        b.finish()  # else the capture stops short: open requests are incomplete
    return b.render()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=captures(), rows=st.integers(0, 8))
def test_generated_captures_print_what_the_in_memory_table_printed(blob: bytes, rows: int, tmp_path: Path) -> None:
    path = tmp_path / "capture-gen.jsonl"
    path.write_bytes(blob)
    assert cases.run([path], rows) == _in_memory([path], rows)


@settings(max_examples=300, deadline=None)
@given(calls=st.lists(st.lists(st.booleans(), max_size=12), max_size=8), rows=st.integers(0, 10), seed=st.integers())
def test_sink_keeps_at_most_rows_plus_one_and_shows_them_in_capture_order(
    calls: list[list[bool]], rows: int, seed: int
) -> None:
    """Calls' requests arrive interleaved (calls end in any order, a call's own in order): the sink
    holds at most rows + 1 (rows > 0) and shows what selecting from all of them in order shows."""
    everything = [
        (pos, _outcome(f"c{pos}", i, attention)) for pos, flags in enumerate(calls) for i, attention in enumerate(flags)
    ]
    rng = random.Random(seed)
    pending = [list(reversed([o for p, o in everything if p == pos])) for pos in range(len(calls))]
    sink = TableSink(rows)
    most = 0
    while any(pending):
        pos = rng.choice([p for p, left in enumerate(pending) if left])
        sink.settled(pos, pending[pos].pop())
        most = max(most, len(sink._kept))
    expected = [o for _, o in everything]
    hidden = 0
    if rows and len(expected) > rows:
        picked = [o for o in expected if needs_attention(o)][:rows]
        hidden, expected = len(expected) - len(picked), picked
    assert sink.shown() == expected
    assert sink.hidden == hidden
    assert sink.tally.requests == len(everything)
    if rows:
        assert most <= rows + 1


def _outcome(call: str, seq: int, attention: bool) -> RequestOutcome:
    return RequestOutcome(
        call=call, kind="stream", model="m", request_id="", occurrence=seq, seq=seq,
        outcome="cancelled" if attention else "completed", responses=1, text_responses=1, final=True,
        first_response_ms=1.0, duration_ms=2.0, status=None, error=None, violations=(),
    )  # fmt: skip


def test_a_big_capture_keeps_only_the_rows(tmp_path: Path) -> None:
    """1,301 requests (1,200 on streams, 100 unary, 1 left open), many needing attention, --rows 7: the sink never holds more than 8."""
    path = tmp_path / "capture-big.jsonl"
    path.write_bytes(cases.mixed(400))
    sink = TableSink(7)
    tracker = Tracker(sink=sink)
    most = 0
    for seq, record in read_capture(path):
        tracker.feed(seq, record)
        most = max(most, len(sink._kept))
    tracker.finish()
    assert sink.tally.requests == 1301 and most <= 8
    assert len(sink.shown()) == 7 and sink.hidden == 1301 - 7


def test_a_mark_is_shown_in_the_second_it_was_made() -> None:
    """1 ns before a second: that second, not the next (a float t_ns / 1e9 rounds it up)."""
    out = io.StringIO()
    render_marks([{"seq": 4, "t_ns": 1_780_000_000 * 10**9 - 1, "note": "n", "labels": {"run": "3"}}], out)
    assert out.getvalue() == "mark seq 4 at 2026-05-28T20:26:39Z: n run=3\n"


def test_a_request_settled_before_its_call_ended_shows_its_calls_status(tmp_path: Path) -> None:
    """A capture with HTTP calls has a status column. On a stream whose id `r` is used twice, the first `r` is
    settled when the second comes, before the call's status is known; the stream is then cancelled. Its row
    showed an empty status where `--json` (and the in-memory table) said CANCELLED."""
    b = Builder().start(grpc=True, http=True)
    b.http_exchange("c1.1", exchanges("01_unary_infer_tritonclient")[0])
    b.call("c2.1")
    b.request("c2.1", "r")
    b.response("c2.1", "r", "t-0")
    b.response("c2.1", "r", None, final=True)
    b.request("c2.1", "r")
    b.response("c2.1", "r", "t-1")
    b.cancel("c2.1", "client_cancel", rst_code=8)
    b.end("c2.1", "CANCELLED", "client_cancel", ms=0)
    path = tmp_path / "capture-reused.jsonl"
    path.write_bytes(b.finish().render())
    sink = TableSink(0)
    tracker = Tracker(sink=sink)
    for seq, record in read_capture(path):
        tracker.feed(seq, record)
    tracker.finish()
    assert [(r.call, r.request_id, r.outcome, r.status) for r in sink.shown()] == [
        ("c1.1", "req-binary-False", "completed", "200"),
        ("c2.1", "r", "completed", "CANCELLED"), ("c2.1", "r", "cancelled", "CANCELLED"),
    ]  # fmt: skip
    assert cases.run([path], 0) == _in_memory([path], 0)

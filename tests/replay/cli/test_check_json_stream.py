"""`replay check --json` streams request outcomes through a sink: the same bytes as the whole document
built in memory, for every golden capture, spilled or not; and the tracker keeps no finished request."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest

from replay.cli import checkjson
from replay.cli.check import check
from replay.machine.outcomes import RequestOutcome
from replay.machine.tracker import Tracker
from tests.data.make_golden import INFER, Builder
from tests.support.paths import DATA
from tests.support.tracking import track_in_memory

GOLDEN = sorted(p for p in DATA.glob("*.jsonl") if p.name not in ("garbled_middle.jsonl", "too_new.jsonl"))


def _in_memory(paths: list[Path]) -> tuple[str, int]:
    """The document as `check --json` wrote it before it streamed (all outcomes kept), and the exit code."""
    result, marks = track_in_memory(paths)
    doc = {**result.to_json(), "marks": marks}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n", 0 if result.ok else 1


def _streamed(paths: list[Path]) -> tuple[str, int]:
    out = io.StringIO()
    code = check([str(p) for p in paths], as_json=True, out=out, err=io.StringIO())
    return out.getvalue(), code


@pytest.mark.parametrize("budget", [checkjson.SpillSink.BUDGET, 1], ids=["in-memory", "spilled"])
@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_streamed_document_is_the_in_memory_one(path: Path, budget: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkjson.SpillSink, "BUDGET", budget)
    assert _streamed([path]) == _in_memory([path])


def test_several_captures_at_once_stream_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkjson.SpillSink, "BUDGET", 100)
    paths = [DATA / "interleaved.jsonl", DATA / "stream_cancel.jsonl", DATA / "unattributable.jsonl"]
    assert _streamed(paths) == _in_memory(paths)


class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []  # (what, call position, requests)

    def settled(self, call_pos: int, outcome: RequestOutcome) -> None:
        self.events.append(("settled", call_pos, 1))

    def call_over(self, call_pos: int, status: str | None, outcomes: list[RequestOutcome]) -> None:
        self.events.append(("call_over", call_pos, len(outcomes)))


def test_finished_requests_leave_the_tracker_while_the_stream_is_open() -> None:
    """50 id-less requests one after the other on one stream, and 30 unary calls: with a sink the
    tracker holds at most one finished stream request, and no request of an ended call."""
    b = Builder().start()
    b.call("c1.1")
    for _ in range(50):
        b.request("c1.1", "")
        b.response("c1.1", "", "t", final=False)
        b.response("c1.1", "", None, final=True)
    for i in range(30):
        call = f"c2.{2 * i + 1}"
        b.call(call, method=INFER)
        b.request(call, "x")
        b.response(call, "x", "t", final=None)
        b.end(call)
    b.end("c1.1")
    b.finish()
    sink = _Recorder()
    tracker = Tracker(sink=sink)
    for seq, record in enumerate(b.records):
        tracker.feed(seq, record)
        if seq == len(b.records) - 3:  # before the stream's call_end
            assert len(tracker._calls["c1.1"].requests) <= 1
            assert all(not c.requests for c in tracker._order[1:])
    assert tracker.finish().requests == ()
    assert sink.events.count(("settled", 0, 1)) == 49
    assert sink.events[-1] == ("call_over", 0, 1)
    assert [e for e in sink.events if e[0] == "call_over"][:30] == [("call_over", i + 1, 1) for i in range(30)]


@pytest.mark.parametrize("budget", [checkjson.SpillSink.BUDGET, 1], ids=["in-memory", "spilled"])
def test_text_that_looks_like_the_status_slot_is_left_alone(
    budget: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Entries settled before their call ended get the call's status filled into their encoded text; an id,
    model or error that spells that slot (newlines, quotes, indentation) is data and must come out as sent."""
    monkeypatch.setattr(checkjson.SpillSink, "BUDGET", budget)
    slot = '\n      "status": null,'
    b = Builder().start()
    b.call("c1.1")
    for rid in (slot, slot, "a" + slot, "a" + slot):  # (an id's next request settles the one before)
        b.request("c1.1", rid, model="tokens")
        b.response("c1.1", rid, "t")
        b.response("c1.1", rid, None, final=True, error=slot)
    b.end("c1.1", status="CANCELLED", cause="client_cancel")
    path = tmp_path / "slot.jsonl"
    path.write_bytes(b.finish().render())
    streamed, _ = _streamed([path])
    assert streamed == _in_memory([path])[0]
    entries = orjson.loads(streamed)["requests"]
    assert [(e["request_id"], e["status"], e["error"]) for e in entries] == [
        (rid, "CANCELLED", slot) for rid in (slot, slot, "a" + slot, "a" + slot)
    ]

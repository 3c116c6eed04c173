"""A Tail subscriber's filter (proxy.admin.hub.Subscriber.offer) over records as the writer offers them, no proxy:
what follows a call's end (its ``evidence`` records, ``late`` frames) follows the call as its others did."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from proxy.admin.hub import ENDED_KEPT, Subscriber, TailFilter
from replay.capture import events as ev

STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def _call(call: str, model: str, rid: str) -> list[Any]:
    """A stream call cancelled with one request in flight, then its evidence after the end, and a late frame."""
    return [
        ev.CallStarted(t_ns=1, call=call, conn="c1", method=STREAM, peer="p", metadata=[], timeout_ms=None),
        ev.MessageSeen(t_ns=2, call=call, dir="c2s", index=0, size=9, model=model, request_id=rid),
        ev.CallCancelled(t_ns=3, call=call, cause="client_cancel", in_flight=[rid], responded=[], rst_code=8,
                         elapsed_ms=2.0, forwarded_upstream=True),
        ev.CallEnded(t_ns=4, call=call, status="CANCELLED", details=None, cause="client_cancel", trailers=None,
                     initial_metadata=None, duration_ms=3.0, messages_c2s=1, messages_s2c=0),
        ev.LateFrameSeen(t_ns=5, call=call, frame="message", size=9, since_cancel_ms=2.0, request_id=rid),
        ev.EvidenceRecorded(t_ns=6, call=call, cancel_t_ns=3, source="log", window_ms=1500.0, in_flight=[rid],
                            lines=[], skipped_responses=0),
    ]  # fmt: skip


#: The call filters, each selecting call c1.1 of :func:`_call` (model a, request ra, and a stream's method).
BY_EACH_CALL_FILTER = pytest.mark.parametrize(
    "flt",
    [TailFilter(models=frozenset({"a"})), TailFilter(request_ids=frozenset({"ra"})),
     TailFilter(methods=frozenset({"ModelStreamInfer"}))],
    ids=["model", "request-id", "method"],
)  # fmt: skip


def _kinds(loop: asyncio.AbstractEventLoop, flt: TailFilter, records: list[Any]) -> list[tuple[str, str]]:
    sub = Subscriber(flt, loop, 1000, 1 << 20, {})
    for seq, rec in enumerate(records):
        sub.offer(seq, rec, b"x\n")
    return [(records[item[0]].call, item[1]) for item in sub.items if isinstance(item, tuple)]


@BY_EACH_CALL_FILTER
def test_records_after_a_calls_end_follow_the_call(loop: asyncio.AbstractEventLoop, flt: TailFilter) -> None:
    """The evidence comes seconds after the call's end (--evidence-window), which forgot the call: every filter
    dropped it (and a late frame after the end put the call back in the selected set for good)."""
    every = ["call_start", "message", "cancel", "call_end", "late", "evidence"]
    got = _kinds(loop, flt, _call("c1.1", "a", "ra") + _call("c1.2", "b", "rb"))
    want = [("c1.1", k) for k in every]
    if flt.methods:
        want += [("c1.2", k) for k in every]
    assert got == want


@BY_EACH_CALL_FILTER
def test_a_message_the_calls_end_cut_follows_the_call(loop: asyncio.AbstractEventLoop, flt: TailFilter) -> None:
    """What arrived of a response a cancel cut has no model and no request id: shown with the call the filter
    selected (before its cancel, as in the capture), never with another, nor selecting one by itself."""

    def cut(call: str) -> ev.MessageSeen:
        return ev.MessageSeen(t_ns=2, call=call, dir="s2c", index=0, size=5,
                              decode_error=f"{ev.MESSAGE_CUT} (after 5 of its 90 bytes)")  # fmt: skip

    a, b = _call("c1.1", "a", "ra"), _call("c1.2", "b", "rb")
    lone = [ev.CallStarted(t_ns=1, call="c1.3", conn="c1", method=STREAM, peer="p", metadata=[], timeout_ms=None),
            cut("c1.3")]  # fmt: skip
    got = _kinds(loop, flt, [*a[:2], cut("c1.1"), *a[2:4], *b[:2], cut("c1.2"), *b[2:4], *lone])
    want = [("c1.1", k) for k in ("call_start", "message", "message", "cancel", "call_end")]
    if flt.methods:
        want += [("c1.2", k) for k in ("call_start", "message", "message", "cancel", "call_end")]
        want += [("c1.3", "call_start"), ("c1.3", "message")]
    assert got == want


def test_the_ended_calls_remembered_are_bounded(loop: asyncio.AbstractEventLoop) -> None:
    sub = Subscriber(TailFilter(models=frozenset({"a"})), loop, 10, 1 << 20, {})
    records = [r for i in range(ENDED_KEPT + 5) for r in _call(f"c1.{i}", "a", f"r{i}")[:4]]
    for seq, rec in enumerate(records):
        sub.offer(seq, rec, b"x\n")
    assert len(sub._calls.ended) == ENDED_KEPT and not sub._calls.matched


@pytest.mark.parametrize("seq", ["-5", "x", "1.5"])
def test_tail_from_seq_is_a_record_number(seq: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`tail --from-seq` takes a record number (it took -5, and answered that seq -5 was no longer held)."""
    from proxy.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["tail", "--admin", "127.0.0.1:1", "--from-seq", seq])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--from-seq: must be a record number 0.." in err, err


@pytest.mark.parametrize(
    "flt",
    [TailFilter(models=frozenset({"a"})), TailFilter(request_ids=frozenset({"ra"})),
     TailFilter(methods=frozenset({"ModelStreamInfer"})), TailFilter(kinds=frozenset({"files_removed"}))],
    ids=["model", "request-id", "method", "kind"],
)  # fmt: skip
def test_records_of_no_call_pass_every_call_filter(loop: asyncio.AbstractEventLoop, flt: TailFilter) -> None:
    """A `files_removed` record (retention, or the live file renamed) has no call: a call filter passes it as it
    passes a gap or a mark. Reading its call raised in the writer's thread, which stopped the capture for good."""
    removed = ev.FilesRemoved(t_ns=7, reason="retention", files=["capture-1.jsonl"], size=10, detail="budget 1 MB")
    sub = Subscriber(flt, loop, 1000, 1 << 20, {})
    sub.offer(0, removed, b"x\n")
    assert [item[1] for item in sub.items if isinstance(item, tuple)] == ["files_removed"]


def test_a_filter_that_fails_ends_its_watcher_not_the_capture(loop: asyncio.AbstractEventLoop) -> None:
    """Whatever a filter trips on, the writer's publish goes on: the failing watcher is closed with the reason
    (its Tail ends with it), the other watchers and the recent records get the batch."""
    from proxy.admin.hub import TapHub

    class Odd:
        kind = "message"  # a record of a kind with a call, without one

    hub = TapHub()
    bad = Subscriber(TailFilter(models=frozenset({"a"})), loop, 1000, 1 << 20, {})
    good = Subscriber(TailFilter(), loop, 1000, 1 << 20, {})
    hub.subscribers = [bad, good]
    hub.publish(0, [Odd(), Odd()], [b"a\n", b"b\n"])
    loop.run_until_complete(asyncio.sleep(0))  # (wake's call_soon_threadsafe)
    assert bad.closed and bad.error is not None and "record seq 0" in bad.error and "AttributeError" in bad.error
    assert [item[2] for item in good.items if isinstance(item, tuple)] == [b"a", b"b"]
    assert hub.recent_range() == (0, 2)
    hub.publish(2, [Odd()], [b"c\n"])  # the closed watcher is offered nothing more
    assert len(good.items) == 3


def test_from_seq_beyond_the_newest_record_starts_there(loop: asyncio.AbstractEventLoop) -> None:
    """`tail --from-seq 10` while the newest record is seq 5: records 6..9, when written, are not shown; 10 on
    are (it printed from 6 on, records before the seq asked for)."""
    from proxy.admin.hub import TapHub

    hub = TapHub()
    recs = [r for i in range(3) for r in _call(f"c1.{i}", "a", f"r{i}")[:2]]  # seqs 0..5
    hub.publish(0, recs, [b"x\n"] * len(recs))

    async def subscribe() -> tuple[Subscriber, int, bool]:
        return hub.subscribe(TailFilter(), from_seq=10)

    sub, first, lost = loop.run_until_complete(subscribe())
    assert (first, lost, list(sub.items)) == (10, False, [])
    more = [r for i in range(3, 7) for r in _call(f"c1.{i}", "a", f"r{i}")[:2]]  # seqs 6..13
    hub.publish(6, more, [b"y\n"] * len(more))
    assert [item[0] for item in sub.items if isinstance(item, tuple)] == [10, 11, 12, 13]

"""The writer's pending gap (proxy/capture/gaps.py): what one `gap` record will say about records lost in a row."""

from __future__ import annotations

from proxy.capture.gaps import Gap
from replay.capture import events as ev


def _lost(*t_ns: int) -> list[ev.HalfClosed]:
    return [ev.HalfClosed(t_ns=t, call="c1.1") for t in t_ns]


def test_losses_in_a_row_add_up_to_one_gap_spanning_them_with_the_first_reason() -> None:
    """Several failed batches before the next successful write: one gap, every record counted, from the
    first lost record's time to the last one's, with the reason that started it."""
    gap = Gap()
    gap.add(_lost(10, 11, 12), "write_error: disk full")
    gap.add([], "ignored: nothing was lost")
    gap.add(_lost(20, 21), "queue_full: the capture disk is slower than the traffic")
    assert (gap.dropped, gap.first_t_ns, gap.last_t_ns, gap.reason) == (5, 10, 21, "write_error: disk full")
    # The gap record says what followed too, with how many each: its count is theirs together.
    gap.add(_lost(22), "write_error: disk full")
    gap.add(_lost(23), "queue_full: the capture disk is slower than the traffic")
    assert gap.then == {"queue_full: the capture disk is slower than the traffic": 3}
    assert gap.describe() == ("write_error: disk full; then 3 record(s): queue_full: the capture disk is slower "
                              "than the traffic")  # fmt: skip
    assert gap.describe("write_error: said otherwise").startswith("write_error: said otherwise; then 3 record(s)")


def test_a_joined_gap_says_each_cause_with_its_count() -> None:
    """A deleted file's records (file_unlinked), then records no file could be created for (write_error), and a
    queue overflow: one gap record's reason names all three and how many each lost. (It named only the first,
    with a count of all of them: thousands of records explained nowhere.)"""
    unlinked = Gap(dropped=4, reason="file_unlinked: its 4 record(s) are lost", first_t_ns=1, last_t_ns=4)
    unlinked.add(_lost(5, 6), "write_error: no capture file could be created")
    queue = Gap()
    queue.add(_lost(7), "queue_full: slow disk")
    queue.add(_lost(8), "write_error: no capture file could be created")
    assert Gap().joined(queue) is queue and queue.joined(Gap()) is queue
    gap = unlinked.joined(queue)
    assert (gap.dropped, gap.first_t_ns, gap.last_t_ns, gap.reason) == (8, 1, 8, "file_unlinked: its 4 record(s) are lost")
    assert gap.then == {"write_error: no capture file could be created": 3, "queue_full: slow disk": 1}
    assert gap.describe() == ("file_unlinked: its 4 record(s) are lost; then 3 record(s): write_error: no capture "
                              "file could be created; then 1 record(s): queue_full: slow disk")  # fmt: skip
    same = Gap(dropped=2, reason="r", first_t_ns=1, last_t_ns=2).joined(Gap(dropped=3, reason="r", first_t_ns=3, last_t_ns=9))
    assert (same.dropped, same.last_t_ns, same.then, same.describe()) == (5, 9, {}, "r")


def test_nothing_lost_is_no_gap() -> None:
    """An empty batch leaves the gap empty: no `gap` record will be written for it."""
    gap = Gap()
    gap.add([], "write_error: disk full")
    assert gap == Gap()
    gap.add(_lost(7), "write_error: disk full")
    assert (gap.dropped, gap.first_t_ns, gap.last_t_ns) == (1, 7, 7)


def test_a_gap_spans_its_records_whatever_order_they_were_lost_in() -> None:
    """Records lost out of time order (a burst's tail dropped from a full queue before its head's write
    failed): the span runs from the earliest lost record to the latest, keeping the first reason."""
    gap = Gap()
    gap.add(_lost(13, 19), "queue_full: the capture disk is slower than the traffic")
    gap.add(_lost(10, 12), "write_error: disk full")
    assert (gap.dropped, gap.first_t_ns, gap.last_t_ns) == (4, 10, 19)
    assert gap.reason.startswith("queue_full")
    gap.add(_lost(15), "write_error: disk full")  # inside the span: it stays
    assert (gap.dropped, gap.first_t_ns, gap.last_t_ns) == (5, 10, 19)

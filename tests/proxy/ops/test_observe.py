"""The metrics' forwarding latency (proxy.ops.observe.ProxyMetrics): pure, no loop and no sockets."""

from __future__ import annotations

import time

import pytest

from proxy.ops.observe import LATENCY_BUCKETS, ProxyMetrics, RecordObserver
from replay.capture import events as ev


def test_messages_wait_for_the_end_of_their_read() -> None:
    """Each message is counted at once and timed when its read has been relayed (``forwarded``, the relay's
    ``after_read``): one observation per message, none twice, none for a read without messages."""
    m = ProxyMetrics()
    m.forwarded()
    assert sum(m.latency_counts) == 0
    t = time.time_ns()
    m.message("c2s", 10, t)
    m.message("s2c", 20, t)
    assert m.messages == [1, 1] and m.bytes == [10, 20] and sum(m.latency_counts) == 0
    m.forwarded()
    m.forwarded()
    assert sum(m.latency_counts) == 2 and 0 <= m.latency_sum < 60
    m.message("s2c", 5, time.time_ns() - 15 * 10**7)  # observed 0.15 s ago: the 0.25 s bucket (0.1 s of slack)
    m.forwarded()
    assert m.latency_counts[LATENCY_BUCKETS.index(0.25)] == 1 and m.messages == [1, 2]


def test_a_message_cut_short_is_counted_apart_and_never_timed() -> None:
    """A record of a body or message the call's end cut (``partial body``) is written when the call ends, often
    outside any read: timed, the next read of any connection would book the idle time as its latency. Counted as
    a message, its receiver would be said to have had it; its bytes did cross."""
    m = ProxyMetrics()
    observe = RecordObserver(lambda _r: None, m)
    long_ago = time.time_ns() - 10**9
    observe(ev.MessageSeen(t_ns=long_ago, call="c1.1", dir="c2s", index=0, size=7, compressed=False,
                           decode_error=f"{ev.MESSAGE_CUT} (after 7 of its 100 bytes)"))  # fmt: skip
    m.forwarded()
    assert m.messages == [0, 0] and m.cut == [1, 0] and m.bytes == [7, 0] and sum(m.latency_counts) == 0
    observe(ev.MessageSeen(t_ns=long_ago, call="c1.1", dir="c2s", index=1, size=7, compressed=False))
    m.forwarded()
    assert m.messages == [1, 0] and sum(m.latency_counts) == 1


@pytest.mark.parametrize(
    ("decode_error", "whole", "cut"),
    [
        (None, 1, 0),
        ("not a valid response: truncated", 1, 0),  # undecodable, yet whole on the wire
        (f"{ev.MESSAGE_CUT} (after 7 of its 100 bytes)", 0, 1),
        (ev.BODY_CUT, 0, 1),
        (f"{ev.BODY_CUT}; not JSON", 0, 1),
        (ev.BODY_BEFORE_REPLY, 0, 0),  # its rest's record ends the body
        (ev.BODY_REST, 1, 0),
        (f"{ev.BODY_REST}, cut short by the connection's end", 0, 1),
        (ev.EVENT_UNTERMINATED, 0, 1),
    ],
)
def test_each_kind_of_message_record_is_counted_once_by_how_it_ends(
    decode_error: str | None, whole: int, cut: int
) -> None:
    """Whole messages, cut ones and parts of one: each record's bytes count, each message once at the record
    that ends it, a cut one apart (the metrics a scrape sees, read from one record of each kind)."""
    m = ProxyMetrics()
    RecordObserver(lambda _r: None, m)(ev.MessageSeen(t_ns=time.time_ns(), call="c1.1", dir="s2c", index=0, size=3,
                                                      compressed=False, decode_error=decode_error))  # fmt: skip
    m.forwarded()
    assert (m.messages, m.cut, m.bytes, sum(m.latency_counts)) == ([0, whole], [0, cut], [0, 3], whole)
    scraped = {(f.name, s.labels.get("direction")): s.value for f in m.collect() for s in f.samples}
    assert scraped["triton_tap_messages", "s2c"] == whole and scraped["triton_tap_messages_cut", "s2c"] == cut

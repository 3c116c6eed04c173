"""The metrics' forwarding latency (proxy.ops.observe.ProxyMetrics): pure, no loop and no sockets."""

from __future__ import annotations

import time

from proxy.ops.observe import LATENCY_BUCKETS, ProxyMetrics


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

"""What the proxy tells operators: the call-end log line and Prometheus metrics, from capture records.

One observer sits between the relay and the capture writer (:class:`RecordObserver`): it sees
every record the relay hands to the writer, so metrics and logs say exactly what the capture says
and the relay carries no counters of its own. Per message it only bumps plain ints; Prometheus
reads them at scrape time through a custom collector (:class:`ProxyMetrics`), so the data plane
never takes a prometheus-client lock.

Forwarding latency: a message record is emitted when its last byte was read; the relay writes the
relayed bytes in the same event-loop callback (before the records when every frame of the read
passes unchanged, the common case; after them otherwise), then calls the relay's ``after_read``
hook, :meth:`ProxyMetrics.forwarded`: the histogram is the time from the message being observed to
that point (h2 processing of the whole read included; time spent waiting for the peer's flow-control
window or in the kernel's socket buffer is not). A hook, not a ``call_soon`` per read: an
event-loop handle per read was a few microseconds of the proxy's CPU per response.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from replay.capture.events import ends_cut, ends_whole
from replay.capture.methods import short_method

log = structlog.get_logger("triton_tap.calls")

#: Forwarding latency buckets, seconds (the relay adds tens of µs; a loaded loop milliseconds).
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class ProxyMetrics(Collector):
    """Counters fed by :class:`RecordObserver` on the loop thread, exported at scrape time."""

    def __init__(self) -> None:
        self._writer_stats: Callable[[], tuple[int, int, int]] | None = None
        self._tap_stats: Callable[[], tuple[int, int, int]] | None = None
        self.started: dict[str, int] = {}
        self.ended: dict[tuple[str, str], int] = {}
        self.open: dict[str, int] = {}
        self.messages = [0, 0]  # c2s, s2c: ended whole
        self.cut = [0, 0]  # c2s, s2c: ended by what cut them
        self.bytes = [0, 0]
        self.latency_counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0
        self._pending: list[int] = []
        self._extra: list[Callable[[], Iterator[Any]]] = []

    def attach_tap(self, stats: Callable[[], tuple[int, int, int]]) -> None:
        """``stats() -> (subscribers, records sent, records dropped)`` of the admin Tail streams."""
        self._tap_stats = stats

    def attach_writer(self, stats: Callable[[], tuple[int, int, int]]) -> None:
        """``stats() -> (records written, records dropped, backlog)`` of the capture writer."""
        self._writer_stats = stats

    def attach(self, families: Callable[[], Iterator[Any]]) -> None:
        """More metric families, produced at scrape time (the proxy's upkeep: retention, pauses, TLS)."""
        self._extra.append(families)

    # -- fed on the loop thread ---------------------------------------------------------------------

    def call_started(self, method: str) -> None:
        """A call began."""
        self.started[method] = self.started.get(method, 0) + 1
        self.open[method] = self.open.get(method, 0) + 1

    def call_ended(self, method: str, cause: str) -> None:
        """A call ended with ``cause``."""
        key = (method, cause)
        self.ended[key] = self.ended.get(key, 0) + 1
        self.open[method] = self.open.get(method, 1) - 1

    def message(self, direction: str, size: int, t_ns: int, decode_error: str | None = None) -> None:
        """A message record: ``size`` bytes crossed the proxy. A message is counted at its record that ends it
        whole, and timed (its forwarding latency ends at the next :meth:`forwarded`); one a call's or
        connection's end cut is counted apart and never timed: its record is written when the call ends,
        often outside any read, where the next read of any connection would book the idle time as its
        latency. The start of a body Triton answered early is neither: its rest's record ends it."""
        i = 0 if direction == "c2s" else 1
        self.bytes[i] += size
        if decode_error is None or ends_whole(decode_error):
            self.messages[i] += 1
            self._pending.append(t_ns)
        elif ends_cut(decode_error):
            self.cut[i] += 1

    def forwarded(self) -> None:
        """The read that carried the pending messages has been handled and relayed (the relay's ``after_read``)."""
        if not self._pending:
            return
        now = time.time_ns()
        counts = self.latency_counts
        total = 0.0
        for t in self._pending:
            s = max(0, now - t) / 1e9
            counts[bisect.bisect_left(LATENCY_BUCKETS, s)] += 1
            total += s
        self.latency_sum += total
        self._pending.clear()

    # -- read by the scrape thread --------------------------------------------------------------------

    def collect(self) -> Iterator[Any]:
        """The metric families (ints are read without locking: a scrape may be one message stale)."""
        started = CounterMetricFamily("triton_tap_calls_started", "RPCs opened through the proxy", labels=["method"])
        for m, n in sorted(dict(self.started).items()):
            started.add_metric([m], n)
        yield started
        ended = CounterMetricFamily("triton_tap_calls", "RPCs ended, by method and cause (see docs/recording.md#causes)",
                                    labels=["method", "cause"])  # fmt: skip
        for (m, c), n in sorted(dict(self.ended).items()):
            ended.add_metric([m, c], n)
        yield ended
        open_ = GaugeMetricFamily("triton_tap_open_calls", "RPCs (streams) in flight", labels=["method"])
        for m, n in sorted(dict(self.open).items()):
            open_.add_metric([m], n)
        yield open_
        msgs = CounterMetricFamily("triton_tap_messages", "messages relayed whole (gRPC messages; HTTP bodies and "
                                   "event-stream events)", labels=["direction"])  # fmt: skip
        cut = CounterMetricFamily("triton_tap_messages_cut", "messages a call's or connection's end cut (their "
                                  "receiver never had them whole)", labels=["direction"])  # fmt: skip
        size = CounterMetricFamily("triton_tap_message_bytes", "message bytes relayed, of whole and cut messages "
                                   "(gRPC: without the 5-byte prefix)", labels=["direction"])  # fmt: skip
        for i, d in enumerate(("c2s", "s2c")):
            msgs.add_metric([d], self.messages[i])
            cut.add_metric([d], self.cut[i])
            size.add_metric([d], self.bytes[i])
        yield msgs
        yield cut
        yield size
        counts = list(self.latency_counts)
        cumulative, buckets = 0, []
        for bound, n in zip((*LATENCY_BUCKETS, float("inf")), counts, strict=True):
            cumulative += n
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        yield HistogramMetricFamily(
            "triton_tap_forwarding_latency_seconds",
            "time from a message being observed to the end of the loop callback that relayed it",
            buckets=buckets, sum_value=self.latency_sum,
        )  # fmt: skip
        if self._writer_stats is not None:
            written, dropped, backlog = self._writer_stats()
            yield CounterMetricFamily("triton_tap_capture_records_written", "capture records written", value=written)
            yield CounterMetricFamily("triton_tap_capture_records_dropped", "capture records dropped (gap records say "
                                      "when and why)", value=dropped)  # fmt: skip
            yield GaugeMetricFamily("triton_tap_capture_writer_backlog", "records queued for the writer", value=backlog)
        if self._tap_stats is not None:
            subs, sent, dropped = self._tap_stats()
            yield GaugeMetricFamily("triton_tap_tail_subscribers", "admin Tail streams open", value=subs)
            yield CounterMetricFamily("triton_tap_tail_records_sent", "records handed to admin Tail streams", value=sent)
            yield CounterMetricFamily("triton_tap_tail_records_dropped", "records dropped for Tail streams that read "
                                      "too slowly (each stream is told)", value=dropped)  # fmt: skip
        for extra in self._extra:
            yield from extra()


class RecordObserver:
    """Sits in front of the writer's ``emit``: logs each call's end, feeds the metrics, passes records on."""

    __slots__ = ("_calls", "_metrics", "_sink")

    def __init__(self, sink: Callable[[Any], None], metrics: ProxyMetrics | None = None) -> None:
        self._sink = sink
        self._metrics = metrics
        self._calls: dict[str, tuple[str, str]] = {}  # call -> (method, peer), while open

    def __call__(self, record: Any) -> None:
        """One record on its way to the capture (the relay's ``emit``)."""
        kind = record.kind
        m = self._metrics
        if kind == "message":
            if m is not None:
                m.message(record.dir, record.size, record.t_ns, record.decode_error)
        elif kind == "call_start":
            method = short_method(record.method)
            self._calls[record.call] = (method, record.peer)
            if m is not None:
                m.call_started(method)
        elif kind == "call_end":
            method, peer = self._calls.pop(record.call, ("?", "?"))
            if m is not None:
                m.call_ended(method, record.cause)
            # The one info line per call; nothing per message is logged above debug. Its fields are
            # gathered only when it is written (~1 us a call saved at --log-level warning).
            if log.is_enabled_for(logging.INFO):
                log.info("call_end", call=record.call, method=method, peer=peer, cause=record.cause,
                         status=record.status, duration_ms=round(record.duration_ms, 3),
                         messages_c2s=record.messages_c2s, messages_s2c=record.messages_s2c,
                         **({"details": record.details} if record.details else {}))  # fmt: skip
        self._sink(record)


class MetricsServer:
    """The ``/metrics`` HTTP endpoint on its own daemon thread (prometheus-client's WSGI server)."""

    def __init__(self, metrics: ProxyMetrics, host: str, port: int) -> None:
        from prometheus_client import start_http_server

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(metrics)
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        self._server: Any = server
        self._thread: threading.Thread = thread
        self.port: int = server.server_port

    def close(self) -> None:
        """Stop serving and join the thread."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

"""The tap hub: hands the capture writer's lines to Tail subscribers without ever slowing the traffic.

Where it sits: the capture writer's thread calls :meth:`TapHub.publish` once per batch it has
written, with the records and their lines, self-contained (a streamed response's sticky fields, which
the file leaves out when they repeat, are spelled out: a subscriber may start anywhere). So a subscriber
sees the capture's records (the same values, the same ``seq``), gap records included, and the relay's
event loop (the data plane) does nothing at all for watchers: it only appends to the writer's
queue, as without ``--admin``.

With no subscriber a batch costs two C-level ``deque.extend`` calls (the recent records a Tail may
start from) and no Python work per record. With subscribers, each record is matched against each
subscriber's filter in the writer thread and appended to that subscriber's bounded queue; a full
queue drops the record for that subscriber only and counts it; the subscriber is told how many it
lost, where, in its stream. The writer never waits for a subscriber.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import structlog

from replay.capture import events as ev
from replay.capture.methods import short_method

#: Records kept for Tails that start from a recent seq.
RECENT = 4096
#: Per-subscriber bound, records and bytes (whichever is reached first).
MAX_QUEUE = 10_000
MAX_QUEUE_BYTES = 16 * 1024 * 1024

log = structlog.get_logger("triton_tap.admin")

#: Records about the capture as a whole (the kinds with no `call`): model/method/request-id filters let them through.
_CAPTURE_LEVEL = frozenset(cls.kind for cls in ev.RECORD_TYPES if "call" not in {f.name for f in fields(cls)})


@dataclass(frozen=True, kw_only=True, slots=True)
class TailFilter:
    """What a subscriber wants; each empty set means any."""

    models: frozenset[str] = frozenset()
    methods: frozenset[str] = frozenset()
    request_ids: frozenset[str] = frozenset()
    kinds: frozenset[str] = frozenset()

    @property
    def by_call(self) -> bool:
        """Whether the filter selects calls (so a call's own records follow its matching messages)."""
        return bool(self.models or self.methods or self.request_ids)


@dataclass(frozen=True, kw_only=True, slots=True)
class Dropped:
    """Records this subscriber lost (its queue was full), in seq order between the records it got."""

    count: int
    first_seq: int
    last_seq: int


@dataclass
class _Calls:
    """Per subscriber: which open calls the filter selected (calls only; bounded by open calls)."""

    method: dict[str, str] = field(default_factory=dict)
    matched: set[str] = field(default_factory=set)
    #: call_start lines held back until the call shows a matching message (model/request-id filters).
    held: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    #: Calls ended lately -> whether the filter had selected them: the records that come after a call's end
    #: (``evidence`` after its window, ``late`` frames) follow it as its others did (the newest ENDED_KEPT).
    ended: dict[str, bool] = field(default_factory=dict)


#: How many ended calls a subscriber remembers for the records that come after their end.
ENDED_KEPT = 4096


class Subscriber:
    """One Tail stream's queue: filled by the writer thread, emptied by the stream's coroutine."""

    def __init__(self, flt: TailFilter, loop: asyncio.AbstractEventLoop, max_queue: int, max_bytes: int,
                 open_methods: dict[str, str]) -> None:  # fmt: skip
        self.filter = flt
        self.max_queue = max_queue
        self.max_bytes = max_bytes
        self.items: collections.deque[tuple[int, str, bytes] | Dropped] = collections.deque()
        self.queued_bytes = 0
        self.sent = 0
        self.dropped = 0
        self._loop = loop
        self._event = asyncio.Event()
        self.waiting = False
        self.closed = False
        #: Why the stream was ended by the hub (its filter failed on a record), else None.
        self.error: str | None = None
        #: Records before this seq are not offered (``--from-seq`` beyond the newest record: from there on).
        self.min_seq = 0
        self._calls = _Calls(method=dict(open_methods))

    # -- writer thread --------------------------------------------------------------------------

    def offer(self, seq: int, record: Any, line: bytes) -> bool:
        """Queue one record if the filter wants it; False when it was dropped (queue full)."""
        if seq < self.min_seq:
            return True
        kind = record.kind
        flt = self.filter
        if flt.by_call and kind not in _CAPTURE_LEVEL:
            out = self._by_call(seq, record, line)
            if not out:
                return True
            ok = True
            for s, r_kind, ln in out:
                if not flt.kinds or r_kind in flt.kinds:
                    ok = self._put(s, r_kind, ln) and ok
            return ok
        if flt.kinds and kind not in flt.kinds:
            return True
        return self._put(seq, kind, line)

    def _by_call(self, seq: int, record: Any, line: bytes) -> list[tuple[int, str, bytes]]:
        flt, calls = self.filter, self._calls
        kind = record.kind
        call = record.call
        if kind in ("evidence", "late") and call in calls.ended:
            # After the call's end, which forgot it: selected as the call was, an evidence record by
            # its in-flight ids, a late frame by its own id, as before the end.
            hit = calls.ended[call]
            if hit and flt.request_ids:
                ids = record.in_flight if kind == "evidence" else (record.request_id,)
                hit = not flt.request_ids.isdisjoint(ids)
            return [(seq, kind, line)] if hit else []
        if kind == "call_start":
            calls.method[call] = record.method
            if not self._method_ok(call):
                return []
            if flt.models or flt.request_ids:
                calls.held[call] = (seq, line)
                return []
            calls.matched.add(call)
            return [(seq, kind, line)]
        if not self._method_ok(call):
            if kind == "call_end":
                calls.method.pop(call, None)
            return []
        if kind == "message" and ev.message_cut(record.decode_error):
            # What arrived of a message the call's end cut has no labels (no one had it whole): it is the
            # call's, shown as the call's cancel and end are, when the filter selected the call.
            return [(seq, kind, line)] if call in calls.matched else []
        if kind in ("message", "late"):
            model = getattr(record, "model", None)
            if flt.models and model not in flt.models and not (kind == "late" and call in calls.matched):
                return []
            if flt.request_ids and record.request_id not in flt.request_ids:
                return []
            out: list[tuple[int, str, bytes]] = []
            held = calls.held.pop(call, None)
            if held is not None:
                out.append((held[0], "call_start", held[1]))
            calls.matched.add(call)
            out.append((seq, kind, line))
            return out
        if not (flt.models or flt.request_ids):
            hit = True  # a method filter alone: every record of the call
        elif kind in ("cancel", "evidence") and flt.request_ids:
            hit = call in calls.matched and not flt.request_ids.isdisjoint(record.in_flight)
        else:
            hit = call in calls.matched
        if kind == "call_end":
            calls.matched.discard(call)
            calls.held.pop(call, None)
            calls.method.pop(call, None)
            calls.ended[call] = hit
            if len(calls.ended) > ENDED_KEPT:
                del calls.ended[next(iter(calls.ended))]
        return [(seq, kind, line)] if hit else []

    def _method_ok(self, call: str) -> bool:
        methods = self.filter.methods
        if not methods:
            return True
        m = self._calls.method.get(call)
        return m is not None and (m in methods or short_method(m) in methods)

    def _put(self, seq: int, kind: str, line: bytes) -> bool:
        items = self.items
        if len(items) >= self.max_queue or self.queued_bytes + len(line) > self.max_bytes:
            self.dropped += 1
            last = items[-1] if items else None
            if isinstance(last, Dropped):
                items[-1] = Dropped(count=last.count + 1, first_seq=last.first_seq, last_seq=seq)
            else:
                # One marker per run of drops: the queue holds at most max_queue records + markers between them.
                items.append(Dropped(count=1, first_seq=seq, last_seq=seq))
            return False
        items.append((seq, kind, line))
        self.queued_bytes += len(line)
        return True

    def wake(self, force: bool = False) -> None:
        """After a batch: wake the stream's coroutine if it sleeps (one cross-thread call per batch)."""
        if self.waiting or force:
            self.waiting = False
            self._loop.call_soon_threadsafe(self._event.set)

    # -- the stream's coroutine (event loop) -------------------------------------------------------

    async def next_items(self) -> list[tuple[int, str, bytes] | Dropped]:
        """What is queued, waiting until something is."""
        while True:
            if self.items:
                out: list[tuple[int, str, bytes] | Dropped] = []
                items = self.items
                while items:
                    item = items.popleft()
                    if not isinstance(item, Dropped):
                        self.queued_bytes -= len(item[2])
                        self.sent += 1
                    out.append(item)
                return out
            if self.closed:
                return []
            self._event.clear()
            self.waiting = True
            # Re-check after announcing we wait: the writer thread may have queued in between.
            if self.items:
                self.waiting = False
                continue
            await self._event.wait()


class TapHub:
    """Recent records and the Tail subscribers of one proxy."""

    def __init__(self, recent: int = RECENT) -> None:
        self._lock = threading.Lock()
        self._recent_records: collections.deque[Any] = collections.deque(maxlen=recent)
        self._recent_lines: collections.deque[bytes] = collections.deque(maxlen=recent)
        self.next_seq = 0
        self.subscribers: list[Subscriber] = []
        self._ids = itertools.count(1)
        # Totals of subscribers that already left (for the metrics).
        self._gone_sent = 0
        self._gone_dropped = 0

    # -- writer thread ----------------------------------------------------------------------------

    def publish(self, first_seq: int, records: Sequence[Any], lines: Sequence[bytes]) -> None:
        """A batch was written: records ``first_seq``.. with their lines (newline included)."""
        with self._lock:
            self._recent_records.extend(records)
            self._recent_lines.extend(lines)
            self.next_seq = first_seq + len(records)
            subs = self.subscribers
            if not subs:
                return
            for sub in subs:
                if sub.closed:
                    continue
                seq = first_seq
                try:
                    for rec, line in zip(records, lines, strict=True):
                        sub.offer(seq, rec, line[:-1])
                        seq += 1
                except Exception as e:  # a watcher must never stop the capture: its stream ends, saying why
                    sub.error = f"the watcher's filter failed on record seq {seq}: {type(e).__name__}: {e}"
                    sub.closed = True
                    sub.wake(force=True)
                    log.error("tail_filter_failed", seq=seq, error=f"{type(e).__name__}: {e}")
                    continue
                sub.wake()

    # -- event loop ---------------------------------------------------------------------------------

    def subscribe(self, flt: TailFilter, *, from_seq: int | None = None, max_queue: int = MAX_QUEUE,
                  max_bytes: int = MAX_QUEUE_BYTES, open_methods: dict[str, str] | None = None,
                  ) -> tuple[Subscriber, int, bool]:  # fmt: skip
        """A new subscriber, its first seq, and whether ``from_seq`` was asked for but is gone."""
        loop = asyncio.get_running_loop()
        sub = Subscriber(flt, loop, max_queue, max_bytes, open_methods or {})
        with self._lock:
            oldest = self.next_seq - len(self._recent_records)
            first, lost = self.next_seq, False
            if from_seq is not None:
                lost = from_seq < oldest
                first = max(from_seq, oldest)
                sub.min_seq = first  # (beyond the newest record: those before it, when written, are not shown)
                skip = first - oldest
                seq = first
                for rec, line in itertools.islice(zip(self._recent_records, self._recent_lines, strict=True), skip, None):
                    sub.offer(seq, rec, line[:-1])
                    seq += 1
            self.subscribers = [*self.subscribers, sub]  # copied: publish iterates without copying
        return sub, first, lost

    def close(self) -> None:
        """No more records (the capture is closed): streams end once they delivered what is queued."""
        with self._lock:
            for sub in self.subscribers:
                sub.closed = True
                sub.wake(force=True)

    def unsubscribe(self, sub: Subscriber) -> None:
        """The stream ended."""
        with self._lock:
            self.subscribers = [s for s in self.subscribers if s is not sub]
            self._gone_sent += sub.sent
            self._gone_dropped += sub.dropped

    def stats(self) -> tuple[int, int, int]:
        """(subscribers, records sent, records dropped) over the proxy's life (any thread)."""
        subs = self.subscribers
        return (len(subs), self._gone_sent + sum(s.sent for s in subs),
                self._gone_dropped + sum(s.dropped for s in subs))  # fmt: skip

    def recent_range(self) -> tuple[int, int]:
        """(oldest seq still in memory, next seq)."""
        with self._lock:
            return self.next_seq - len(self._recent_records), self.next_seq

    def recent_models(self, wanted: dict[str, set[str]]) -> dict[str, tuple[str, dict[str, str]]]:
        """Per call of ``wanted`` (call -> request ids in flight on it): the model of its latest request still
        in memory, and the model of each wanted id's latest request (Status; scans the recent records)."""
        found: dict[str, tuple[str, dict[str, str]]] = {}
        left = {call: set(ids) for call, ids in wanted.items()}
        with self._lock:
            records = list(self._recent_records)
        for r in reversed(records):
            if not left:
                break
            if r.kind == "message" and r.dir == "c2s" and r.model is not None and (ids := left.get(r.call)) is not None:
                _latest, by_id = found.setdefault(r.call, (r.model, {}))
                rid = r.request_id if r.request_id is not None else ""
                if rid in ids:
                    by_id[rid] = r.model
                    ids.discard(rid)
                if not ids:
                    del left[r.call]
        return found

"""The data behind ``triton-tap report``: a capture turned into one compact, self-describing model.

Pure: fed ``(seq, record)`` one at a time (:meth:`ReportBuilder.feed`), never reads a file and
never awaits. The shell (:mod:`replay.cli.report`) reads the captures with progress and pours the
model into the self-contained page (``template.html``, :func:`~replay.tools.report.page.render_html`).

Nothing here decides what a record means on its own: requests, their outcomes and which request
each response belongs to come from :class:`~replay.machine.tracker.Tracker` (its ``on_response`` hook),
so the report and ``replay check`` can never disagree. Responses the tracker cannot attribute are
drawn on a separate lane of their call, never on a guessed request.

The overview (time-series, latency sketches, histograms per model/method/outcome group) is
computed from the finished lanes and ticks by :mod:`replay.tools.report.overview`, so the page
never aggregates records itself.

Why columnar arrays: a 100k-record capture has ~100k response ticks; one JSON array per field
keeps the embedded model at a few bytes per tick (no repeated keys), and the page draws ticks on
a canvas from those arrays instead of creating a DOM node per record.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from replay.capture import events as ev
from replay.capture.holes import Gap
from replay.capture.methods import START_NOT_READ, short_method
from replay.capture.schema import encode
from replay.machine.outcomes import RequestOutcome, status_ok
from replay.machine.tracker import Tracker
from replay.tools.report.overview import CUT, ERROR, FINAL, TEXT, UNATTRIBUTED, build_overview
from replay.tools.report.stats import IntArray, ModelStats, group_percentiles
from replay.tools.report.stats import percentile as percentile  # re-exported: tests and callers know it here

#: Embed every record (for hover) only up to this many; larger captures show the compact fields.
RECORD_LIMIT = 20_000


@dataclass
class _CallInfo:
    id: str
    conn: str
    method: str
    t_start: int
    timeout_ms: float | None
    ri: int
    t_half_close: int | None = None
    t_end: int | None = None
    status: str | None = None
    ok: bool | None = None  # the status is a success (gRPC OK, HTTP < 400); None while open
    cause: str | None = None
    details: str | None = None
    end_ri: int | None = None
    unattributed: list[tuple[int, int, int]] = field(default_factory=list)  # (t_ns, flags, ri)


@dataclass
class _Cancel:
    call: str
    t_ns: int
    cause: str
    in_flight: list[str]
    responded: list[str]
    rst_code: int | None
    ri: int


def _flags(rec: ev.MessageSeen) -> int:
    f = TEXT if rec.outputs else 0
    if rec.final is True:
        f |= FINAL
    if rec.error:
        f |= ERROR
    if rec.decode_error is not None and ev.never_received(rec.decode_error):
        f |= CUT
    return f


def _record_view(rec: ev.Record, seq: int) -> dict[str, Any]:
    """The record as it is in the capture, minus tensor bytes (hover text, not evidence)."""
    raw: dict[str, Any] = orjson.loads(encode(rec, seq))
    if raw.get("payload") is not None:
        raw["payload"] = f"<{len(raw['payload'])} base64 chars omitted>"
    return raw


_LANE_COLUMNS = ("call", "rid", "model", "outcome", "start", "end", "responses", "text", "ttfr_ms", "inter_p50_ms",
                 "inter_p99_ms", "duration_ms", "violations", "error", "ri", "group", "group_first_ms")  # fmt: skip


class _Lanes:
    """The drawn lanes (one per request, or one per call that carried none) and their ticks, columnar."""

    def __init__(self, t0: int, calls: Sequence[_CallInfo]) -> None:
        self.t0 = t0
        self.call_index = {c.id: i for i, c in enumerate(calls)}
        self.columns: dict[str, list[Any]] = {k: [] for k in _LANE_COLUMNS}  # filled by laid_out()
        self._rows: list[tuple[Any, ...]] = []
        self.ticks: dict[str, list[int]] = {"lane": [], "t": [], "flags": [], "ri": []}
        self.tick_arrays: dict[str, IntArray] = {}
        self._of: dict[tuple[str, str | None], list[int]] = {}  # (call, request id) -> lanes
        self._extra: list[tuple[int, int, int, int]] = []  # unattributed ticks: (lane, t_ns, flags, ri)

    def us(self, t_ns: int | None) -> int | None:
        """Microseconds since the capture's first record."""
        return None if t_ns is None else (t_ns - self.t0) // 1000

    def add(self, call: _CallInfo, **values: Any) -> int:
        """A new lane of ``call`` (columns not given are null); returns its index."""
        values["call"] = self.call_index[call.id]
        # One row now (map runs in C), columns once at the end: ~30k request lanes at 1M records.
        self._rows.append(tuple(map(values.get, _LANE_COLUMNS)))
        return len(self._rows) - 1

    def laid_out(self) -> None:
        """Every lane is added: the rows become the columns."""
        cols = list(zip(*self._rows, strict=True)) or [() for _ in _LANE_COLUMNS]
        self.columns = {k: list(col) for k, col in zip(_LANE_COLUMNS, cols, strict=True)}

    def name(self, lane: int, call: str, request_id: str | None) -> None:
        """``lane`` draws request ``request_id`` of ``call`` (cancels find their lanes by id)."""
        self._of.setdefault((call, request_id), []).append(lane)

    def add_ticks(self, lane: int, items: list[tuple[int, int, int]]) -> None:
        """Response ticks ``(t_ns, flags, record index)`` on ``lane`` (unattributed ones: few, kept as tuples)."""
        self._extra.extend((lane, t_ns, flags, ri) for t_ns, flags, ri in items)

    def assemble(self, lane_of_req: npt.NDArray[np.int64], ticks: array[int]) -> None:
        """All ticks grouped by lane, in capture order within a lane (the page relies on both).

        ``ticks``: the attributed responses, four numbers each: request number, t_ns, flags, record index.
        """
        rows = np.frombuffer(ticks, dtype=np.int64).reshape(-1, 4)
        lane = lane_of_req[rows[:, 0]] if len(rows) else np.zeros(0, dtype=np.int64)
        cols = [lane, rows[:, 1], rows[:, 2], rows[:, 3]]
        if self._extra:
            extra = np.array(self._extra, dtype=np.int64).T
            cols = [np.concatenate((a, e)) for a, e in zip(cols, extra, strict=True)]
        keep = cols[0] >= 0
        cols = [c[keep] for c in cols]
        order = np.argsort(cols[0], kind="stable")
        lane_s, t_s, f_s, ri_s = (c[order] for c in cols)
        # Kept as arrays too: the gaps and the overview compute on them, the model carries lists.
        self.tick_arrays = {"lane": lane_s, "t": (t_s - self.t0) // 1000, "flags": f_s, "ri": ri_s}
        self.ticks = {k: v.tolist() for k, v in self.tick_arrays.items()}

    def open_at(self, call: str, ids: list[str], at: int | None) -> list[int]:
        """The lanes of request ``ids`` on ``call`` still open at ``at`` (sorted, once each)."""
        # An id re-used on the call: only its occurrence still open at the cancel counts.
        # A lane's end is its start plus the duration, which is kept to the microsecond (rounded): it can read up to
        # 1 us before the true end, and the cancel that ended the request is at that end.
        ends = self.columns["end"]
        return sorted({ln for rid in ids for ln in self._of.get((call, rid), [])
                       if at is None or ends[ln] is None or ends[ln] >= at - 1})  # fmt: skip


def _violations(r: RequestOutcome) -> list[str] | None:
    """A lane's violations: those after records of its call were lost are named so (not the server's for sure)."""
    names = [v.name for v in r.violations] + [f"{v.name} (after records were lost)" for v in r.violations_after_loss]
    return names or None


def shared(r: RequestOutcome) -> bool:
    """``r`` is a request of an id group that got responses together: which were its own the wire does not say."""
    return r.group is not None and r.group.responses > 0


def _group_first(r: RequestOutcome) -> float | None:
    """A lane's first response when it is its id group's, not its own (``check``'s ``group 2.2``), else null."""
    g = r.group
    return g.first_response_ms if g is not None and shared(r) and r.first_response_ms is None else None


def _group(r: RequestOutcome) -> str | None:
    """A lane's group cell: the responses of its id group, which the wire cannot place on one request
    (``responses`` counts only its own: ``group 5 (3)``, as ``check``'s table shows them); else null."""
    g = r.group
    return f"group {g.responses} ({g.text_responses})" if g is not None and shared(r) else None


class ReportBuilder:
    """Collects what the report shows while a capture is read; :meth:`finish` returns the model."""

    def __init__(self, *, record_limit: int = RECORD_LIMIT) -> None:
        self.tracker = Tracker(on_response=self._response, on_adopt=self._adopt)
        self._limit = record_limit
        self._pending: list[tuple[ev.Record, int]] = []  # the first records, for hover (small captures)
        self._ri = 0  # index of the record being fed, across every file given
        self._t0: int | None = None
        self._t_last = 0
        self._calls: dict[str, _CallInfo] = {}
        self._order: list[_CallInfo] = []
        self._sent: dict[tuple[str, int], int] = {}  # (call, request seq) -> t_ns
        # Every attributed response, columnar (a 1M-record capture has ~1M of them: arrays, not tuples).
        self._req_key: dict[tuple[str, int], int] = {}  # (call, request seq) -> request number
        # Four numbers a response (request number, t_ns, flags, record index): one `extend` a response
        # rather than four appends (issue 19).
        self._ticks = array("q")
        self._add_tick = self._ticks.extend
        self._last_call: str | None = None  # the last response's request and its number (_response)
        self._last_seq = self._last_req = -1
        self._cancels: list[_Cancel] = []
        self._dropped: list[tuple[int, int, int, str, int]] = []  # gap records: first, last t_ns, count, reason, ri
        self._attributed = False  # set by _response while the tracker takes the current record

    @property
    def records(self) -> int:
        """Records fed so far."""
        return self._ri

    def feed(self, seq: int, record: ev.Record) -> None:
        """One capture record, in capture order."""
        # Hot loop: one call per record (1M at production scale); messages, ~all of them, come first
        # and take the short way.
        ri = self._ri
        self._ri = ri + 1
        if ri < self._limit:
            # Kept as they are, turned into hover views at finish only if the capture stays small.
            self._pending.append((record, seq))
        elif ri == self._limit:
            self._pending.clear()
        if type(record) is ev.MessageSeen:
            t = record.t_ns
            if isinstance(t, int):
                if self._t0 is None or t < self._t0:
                    self._t0 = t
                if t > self._t_last:
                    self._t_last = t
            self.tracker.feed(seq, record)
            if record.request_id is None:
                pass
            elif record.dir == "c2s":
                self._sent[self.tracker.qualified(record.call), seq] = t
            elif not self._attributed:
                # Attributed responses came through _response during tracker.feed; the rest did not.
                call = self._calls.get(self.tracker.qualified(record.call))
                if call is not None:
                    call.unattributed.append((t, _flags(record) | UNATTRIBUTED, ri))
            self._attributed = False
            return
        at = getattr(record, "t_ns", None)
        if isinstance(at, int):
            if self._t0 is None or at < self._t0:
                self._t0 = at
            if at > self._t_last:
                self._t_last = at
        self.tracker.feed(seq, record)
        self._other(ri, record)

    def _other(self, ri: int, record: ev.Record) -> None:
        """A record other than a message (after the tracker has taken it)."""
        q = self.tracker.qualified
        if isinstance(record, ev.CallStarted):
            cid = q(record.call)
            if cid not in self._calls:
                info = _CallInfo(id=cid, conn=q(record.conn), method=record.method,
                                 t_start=record.t_ns, timeout_ms=record.timeout_ms, ri=ri)  # fmt: skip
                self._calls[cid] = info
                self._order.append(info)
        elif isinstance(record, ev.HalfClosed):
            call = self._calls.get(q(record.call))
            if call is not None and call.t_half_close is None:
                call.t_half_close = record.t_ns
        elif isinstance(record, ev.CallCancelled):
            self._cancels.append(
                _Cancel(call=q(record.call), t_ns=record.t_ns, cause=record.cause, in_flight=list(record.in_flight),
                        responded=list(record.responded), rst_code=record.rst_code, ri=ri)
            )  # fmt: skip
        elif isinstance(record, ev.CallEnded):
            call = self._calls.get(q(record.call))
            if call is not None:
                call.t_end, call.status, call.cause, call.details = record.t_ns, record.status, record.cause, record.details
                call.ok = status_ok(record.status, record.http_status)
                call.end_ri = ri
        elif isinstance(record, ev.GapRecorded):
            self._dropped.append((record.first_t_ns, record.last_t_ns, record.dropped, record.reason, ri))

    def _adopt(self, cid: str, conn: str, rec: ev.MessageSeen) -> None:
        """A call the tracker took up without its ``call_start`` (see :data:`~replay.capture.methods.START_NOT_READ`):
        drawn from its first message read."""
        if cid not in self._calls:
            info = _CallInfo(id=cid, conn=conn, method=START_NOT_READ, t_start=rec.t_ns, timeout_ms=None, ri=self._ri - 1)
            self._calls[cid] = info
            self._order.append(info)

    def _response(self, call: str, request_seq: int, seq: int, rec: ev.MessageSeen) -> None:
        # Hot loop: once per response. A request's responses mostly come one after the other, so
        # the last request's number is reused without building and hashing a key.
        self._attributed = True
        if request_seq == self._last_seq and call == self._last_call:
            req = self._last_req
        else:
            req = self._req_key.setdefault((call, request_seq), len(self._req_key))
            self._last_call, self._last_seq, self._last_req = call, request_seq, req
        self._add_tick((req, rec.t_ns, _flags(rec), self._ri - 1))

    # -- the model ---------------------------------------------------------------------------------

    def finish(self, *, files: Sequence[str] = (), gaps: Iterable[Gap] = (), warnings: Iterable[str] = (),
               title: str = "triton-tap report") -> dict[str, Any]:  # fmt: skip
        """End of input: the report model (plain JSON-able data, see the module docstring)."""
        gaps = list(gaps)
        result = self.tracker.finish(gaps, warnings)
        t0 = self._t0 or 0
        calls = self._calls_by_connection()
        lanes = _Lanes(t0, calls)
        stats = ModelStats()
        self._lay_out(calls, result.requests, lanes, stats)
        us = lanes.us
        span_us = max(0, (self._t_last - t0) // 1000)
        cancels = self._cancel_rows(lanes)
        call_cols = _call_columns(calls, us)
        return {
            "title": title,
            "files": list(files),
            "records": self._ri,
            "t0_ns": t0,
            "span_us": span_us,
            "calls": call_cols,
            "lanes": lanes.columns,
            "ticks": lanes.ticks,
            "cancels": cancels,
            "models": stats.rows(),
            "overview": self._overview(span_us, lanes, call_cols, cancels),
            "summary": result.summary(),
            "unattributable": len(result.unattributable),
            "gaps": [g.to_json() for g in gaps],
            # Spans of time in which the proxy dropped records (from `gap` records): drawn across
            # every lane, since what was lost there is unknown.
            "dropped": [{"t0": us(a), "t1": us(b), "count": n, "reason": why, "ri": ri}
                        for a, b, n, why, ri in self._dropped],
            "warnings": list(result.warnings),
            "record_view": [_record_view(r, seq) for r, seq in self._pending] if self._ri <= self._limit else None,
        }

    @staticmethod
    def _overview(span_us: int, lanes: _Lanes, calls: dict[str, list[Any]], cancels: list[dict[str, Any]]) -> dict[str, Any]:
        cols = lanes.columns
        method = [calls["method"][c] for c in cols["call"]]
        # A cancel's model: that of its call's first request lane (a call carries one model in practice).
        call_model: dict[int, str | None] = {}
        for c, m in zip(cols["call"], cols["model"], strict=True):
            if call_model.get(c) is None:
                call_model[c] = m
        rows = [(k["t"], call_model.get(k["call"]), calls["method"][k["call"]], k["cause"]) for k in cancels]
        return build_overview(span_us=span_us, lanes=cols, lane_method=method, ticks=lanes.tick_arrays, cancels=rows)

    def _calls_by_connection(self) -> list[_CallInfo]:
        """Calls grouped by connection (in order of first appearance), in start order within it."""
        conn_rank: dict[str, int] = {}
        for c in self._order:
            conn_rank.setdefault(c.conn, len(conn_rank))
        return sorted(self._order, key=lambda c: (conn_rank[c.conn], c.t_start))

    def _lay_out(self, calls: list[_CallInfo], requests: Iterable[RequestOutcome], lanes: _Lanes,
                 stats: ModelStats) -> None:  # fmt: skip
        """Each call's lanes in order: its requests, then its unattributable responses; then the ticks."""
        by_call: dict[str, list[RequestOutcome]] = {}
        for r in requests:
            by_call.setdefault(r.call, []).append(r)
        us = lanes.us
        lane_of_req = np.full(len(self._req_key) + 1, -1, dtype=np.int64)
        drawn: list[tuple[int, RequestOutcome]] = []
        for call in calls:
            reqs = by_call.get(call.id, [])
            if not reqs and not call.unattributed:
                # A call that carried no tracked request (ServerLive, ModelMetadata...): one lane.
                lanes.add(call, rid=None, model=None, outcome=call.cause or "open", start=us(call.t_start),
                          end=us(call.t_end), ri=call.ri, responses=0, text=0)  # fmt: skip
                continue
            for r in reqs:
                lane = self._request_lane(call, r, lanes)
                req = self._req_key.get((call.id, r.seq))
                if req is not None:
                    lane_of_req[req] = lane
                drawn.append((lane, r))
            if call.unattributed:
                lane = lanes.add(call, rid=None, model=None, outcome="unattributable", start=us(call.t_start),
                                 end=us(call.t_end), responses=len(call.unattributed), text=0)  # fmt: skip
                lanes.add_ticks(lane, call.unattributed)
        lanes.laid_out()
        lanes.assemble(lane_of_req, self._ticks)
        self._gaps(drawn, lanes, stats)

    @staticmethod
    def _gaps(drawn: list[tuple[int, RequestOutcome]], lanes: _Lanes, stats: ModelStats) -> None:
        """Each request lane's inter-response gaps: its p50/p99 columns and the per-model p50/p99."""
        n_lanes = len(lanes.columns["call"])
        lane, t = lanes.tick_arrays["lane"], lanes.tick_arrays["t"]
        # Ticks are grouped by lane in capture order (assemble): a gap is a difference of neighbours
        # on the same lane; only request lanes (drawn) have gaps, unattributed lanes do not.
        is_req = np.zeros(n_lanes, dtype=bool)
        model_of = np.full(n_lanes, -1, dtype=np.int64)
        models: dict[str, int] = {}
        for ln, r in drawn:
            # A lane of an id group that got responses together has them drawn on its latest request, whose
            # they are the wire does not say: neighbours there are no one request's gaps.
            is_req[ln] = not shared(r)
            model_of[ln] = models.setdefault(r.model or "(none)", len(models))
            stats.add(r)
        same = lane[1:] == lane[:-1]
        g_lane = lane[1:][same]
        keep = is_req[g_lane]
        g_lane, g_val = g_lane[keep], (t[1:] - t[:-1])[same][keep]
        p50, p99 = group_percentiles(g_lane, g_val, n_lanes, (50, 99))
        col50, col99 = lanes.columns["inter_p50_ms"], lanes.columns["inter_p99_ms"]
        for ln, r in drawn:
            if not shared(r):
                col50[ln], col99[ln] = p50[ln], p99[ln]
        m50, m99 = group_percentiles(model_of[g_lane], g_val, len(models), (50, 99))
        for name, m in models.items():
            stats.set_inter(name, m50[m], m99[m])

    def _request_lane(self, call: _CallInfo, r: RequestOutcome, lanes: _Lanes) -> int:
        """The lane of one tracked request (its ticks and gaps are filled in once every lane is laid out)."""
        t_sent = self._sent.get((call.id, r.seq), call.t_start)
        end_ns = t_sent + round(r.duration_ms * 1e6) if r.duration_ms is not None else None  # (int() of 10.001 * 1e6: 10000999)
        lane = lanes.add(
            call, rid=r.request_id, model=r.model, outcome=r.outcome, start=lanes.us(t_sent), end=lanes.us(end_ns),
            responses=r.responses, text=r.text_responses, ttfr_ms=r.first_response_ms,
            duration_ms=r.duration_ms, violations=_violations(r), error=r.error,
            ri=None, group=_group(r), group_first_ms=_group_first(r),
        )  # fmt: skip
        lanes.name(lane, call.id, r.request_id)
        return lane

    def _cancel_rows(self, lanes: _Lanes) -> list[dict[str, Any]]:
        """The captured cancels of drawn calls, with the lanes they hit (in flight, responded) at that time."""
        rows = []
        for k in self._cancels:
            if k.call not in lanes.call_index:
                continue
            at = lanes.us(k.t_ns)
            rows.append({"call": lanes.call_index[k.call], "t": at, "cause": k.cause, "in_flight": k.in_flight,
                         "lanes": lanes.open_at(k.call, k.in_flight, at),
                         "responded_lanes": lanes.open_at(k.call, k.responded, at),
                         "rst_code": k.rst_code, "ri": k.ri})  # fmt: skip
        return rows


def _call_columns(calls: list[_CallInfo], us: Callable[[int | None], int | None]) -> dict[str, list[Any]]:
    """The calls, one column per field (see the module docstring for why columnar)."""
    return {
        "id": [c.id for c in calls],
        "conn": [c.conn for c in calls],
        "method": [short_method(c.method) for c in calls],
        "start": [us(c.t_start) for c in calls],
        "end": [us(c.t_end) for c in calls],
        "half_close": [us(c.t_half_close) for c in calls],
        "deadline": [us(c.t_start + int(c.timeout_ms * 1e6)) if c.timeout_ms is not None else None for c in calls],
        "status": [c.status for c in calls],
        "ok": [c.ok for c in calls],
        "cause": [c.cause for c in calls],
        "details": [c.details for c in calls],
        "ri": [c.ri for c in calls],
        "end_ri": [c.end_ri for c in calls],
    }

"""From capture records to request outcomes: :class:`Tracker` and :func:`track`.

:class:`Tracker` is pure and synchronous: fed ``(seq, record)`` one at a time, it keeps one
:class:`RequestMachine` per request identity and decides which machine each
response belongs to. :func:`track` is the thin shell that feeds it from files or records.

Attribution rules (why they are what they are):

* Identity is call + Triton request id + occurrence: Triton does not require ids to be unique, so
  an id re-used on a call after its previous request finished starts a new occurrence.
* A stream response goes to the one request in flight with its id and model (Triton names the
  model in its responses). Several in flight with the same id and model are an id group (see
  replay/machine/groups.py); an id no request on the call used is ``unknown_id`` (``empty_id`` when
  it is ``""``). Such responses are listed as *unattributable*, never merged into a guess. A
  response for a request whose final was already seen goes to that request (the
  ``response_after_final`` violation), as it cannot belong to anything else.
* ``""`` is an id like any other: tritonclient sends it by default, and with one request
  without id in flight the responses without id are unambiguously its own.
* The call's end is applied at the first of ``cancel`` / ``call_end`` (the proxy writes both for a
  cancel-like end, the cancel first); the ``call_end`` then only adds status and details.
* A request sent again after an earlier one was ``cancelled`` gets ``restarted_after_cancel``: the
  same model and non-empty id, or with ``--payload full`` the same message hash, from the same client
  connection, in the same capture (unrelated clients reuse ids such as ``"1"``). The same hash from
  another connection is the note ``same_as_cancelled``: a retry and another client look alike there.
* An HTTP request body Triton answered before it ended is two ``c2s`` records (its start, before the
  reply's; then the rest, ``decode_error`` :data:`~replay.capture.events.BODY_REST`): one request.
* An HTTP inference call carries one request: every reply or event on it is that request's, tied by
  call, not id (error events carry none, OpenAI chunks the server's). A reply (``final`` null) is a
  unary reply, or an error with its final when it carries an error JSON (a 200 included); events go
  through the stream rules; a ``generate_stream`` body that ended cleanly with no event gets the
  final flag from that clean end (the recorder puts it on the last event otherwise).
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from replay.capture import events as ev
from replay.capture.holes import Gap
from replay.capture.ids import CaptureIds
from replay.capture.methods import (
    HTTP_INFERENCE,
    INFER,
    PREFIX,
    READINESS,
    START_NOT_READ,
    STREAM_INFER,
    http_kind,
    streaming,
)
from replay.capture.reader import PathLike, RecordsReader, read_capture
from replay.machine.groups import Group, refused
from replay.machine.outcomes import (
    LOST_BEFORE,
    LOST_OPEN,
    LOST_SETTLED,
    CallOutcome,
    ProtocolError,
    RequestOutcome,
    RequestSink,
    TrackResult,
    Unattributable,
    outcome_of,
    status_ok,
)
from replay.machine.table import END_BY_CAUSE, KEPT_BY_RESPONSE, OPEN, Input, RequestMachine, State

#: A capture: path(s) of files/directories, or records (with or without their ``seq``).
CaptureSource = PathLike | Iterable[PathLike] | Iterable[ev.Record] | Iterable[tuple[int, ev.Record]]


class _Request:
    __slots__ = (
        "call", "cut", "error", "errors", "final", "final_due", "group", "hole", "hole_from", "machine", "model", "occurrence",
        "request_id", "resent", "responses", "seq", "sha", "size", "t_done", "t_first", "t_last", "t_sent", "text",
        "was_refused",
    )  # fmt: skip

    def __init__(self, call: _Call, rec: ev.MessageSeen, seq: int, occurrence: int) -> None:
        self.machine = RequestMachine()
        self.call = call
        self.model = rec.model
        self.request_id = rec.request_id
        self.occurrence = occurrence
        self.seq = seq
        self.t_sent = rec.t_ns
        self.final_due = rec.enable_empty_final is True
        self.responses = 0
        self.text = 0
        self.was_refused = False  # its id group's refusals pinned it (groups.py): it owes no final
        self.final: bool | None = None if call.kind == "unary" else False
        self.t_first: int | None = None
        self.t_last: int | None = None  # its last response's time (its own, as t_first)
        self.t_done: int | None = None
        self.error: str | None = None
        self.errors = 0  # its own error responses without the final flag (while alone with its id)
        self.sha = rec.payload_sha256
        self.size = rec.size
        self.group: Group[_Request] | None = None
        #: How records lost on its call touch it (see Tracker.lost): None, or one of LOST_* (outcomes.py).
        self.hole: str | None = None
        self.hole_from = 0  # its violations from this index on came after the loss: not the server's for sure
        self.cut = False  # an HTTP event of it was cut before its end (recorded, never received: no response)
        #: Its bytes are those of a request cancelled on another connection (a retry, or another client
        #: sending the same: the wire cannot tell): a note, not a violation.
        self.resent = False


class _Call:
    __slots__ = (
        "by_id", "by_model", "cause", "client_fin", "conn", "details", "duration_ms", "ended", "failed", "groups",
        "hole", "http", "id", "joined", "kind", "kind_open", "method", "model", "parked", "pos", "ready", "reported",
        "requests", "sent", "status", "stream", "t_start", "unary",
    )  # fmt: skip

    def __init__(self, call_id: str, method: str, t_start: int, pos: int, conn: str) -> None:
        self.id = call_id
        self.conn = conn  # the client connection it came on (as reported)
        self.pos = pos  # the call's place in the capture (calls are reported in this order)
        self.method = method
        self.unary = method == INFER
        self.stream = method == STREAM_INFER or method == START_NOT_READ
        # An HTTP inference call carries exactly one request, and every reply or event on it is that
        # request's (Triton's error events and OpenAI chunks carry no id, or another one): tied by call.
        self.http = http_kind(method) in HTTP_INFERENCE
        # OpenAI endpoints stream only when the request asked: the first reply says which (its `final`).
        self.kind_open = self.http and streaming(method) is None
        self.kind = "unary" if self.unary or (self.http and streaming(method) is False) else "stream"
        self.t_start = t_start
        self.requests: deque[_Request] = deque()  # still tracked (see Tracker's ``sink``), in order
        self.sent = 0  # requests sent on the call, retired ones included
        self.reported = False  # a sink has its requests (see Tracker's ``sink``)
        self.by_id: dict[str, int] = {}  # request id -> requests sent with it (the next one's occurrence)
        # Stream calls' id groups: the latest per request id, whatever its model (and so the latest of its
        # model); for an id sent to several models, each model's latest (most ids never need it).
        self.groups: dict[str, Group[_Request]] = {}
        self.by_model: dict[str, dict[str | None, Group[_Request]]] = {}
        # Errors naming no model that several open groups of their id could have caused (Tracker._streamed).
        self.parked: list[tuple[int, ev.MessageSeen, list[Group[_Request]]]] = []
        # Groups of one that a parked error may be of, joined since by a request of their id and model: what
        # each got as a group, kept until the error is placed (Tracker._split).
        self.joined: list[_Kept] = []
        self.ended = False
        self.status: str | None = None
        self.failed = False  # the call's status is not a success (gRPC: not OK; HTTP: no head or >= 400)
        self.cause: str | None = None
        self.details: str | None = None
        self.duration_ms: float | None = None
        self.hole = False  # records were lost while it was open (see Tracker.lost)
        # A non-inference call: the model its request names (MODEL_NAMED), and a readiness RPC's answer.
        self.model: str | None = None
        self.ready: bool | None = None
        self.client_fin = False  # an HTTP call whose client sent its FIN (a `half_close` record) before its end


class _Kept:
    """What a group joined after an error that may be its refusal got since (see Tracker._split): its
    responses and the holes among them (None), by seq (a hole: between the seqs it fell between)."""

    __slots__ = ("group", "hole", "steps")

    def __init__(self, group: Group[_Request], hole: bool) -> None:
        self.group = group
        self.hole = hole  # records of its call were lost before it was joined
        self.steps: list[tuple[float, ev.MessageSeen | None]] = []

    def lost(self) -> None:
        last = self.steps[-1][0] if self.steps else self.group.members[-1].seq
        self.steps.append((last + 0.5, None))  # (every seq fed later is greater)


#: What :class:`_Kept` keeps of one group at most: beyond, the group stays one (memory stays bounded
#: while an error is parked for long on a busy stream).
KEEP_STEPS = 10_000


def _first_seq(g: Group[_Request]) -> int:
    return g.members[0].seq


def _refusal(rec: ev.MessageSeen) -> bool:
    """Shaped like Triton's refusal of a request (2.51): an error without the final flag naming no model (a
    model's own errors name it). It is the refused request's one answer: nothing follows it."""
    return bool(rec.error) and rec.final is not True and not rec.model


def _refusable(g: Group[_Request]) -> bool:
    """A refusal may still be of ``g``: it is open, and not a request alone with its id that got an answer."""
    return g.open > 0 and (g.shared or not g.members[0].responses)


def _step_seq(step: tuple[float, Any]) -> float:
    return step[0]


def _parked_on(call: _Call, g: Group[_Request]) -> int:
    """How many of the call's parked errors may be of ``g``."""
    return sum(1 for _, _, could in call.parked if any(g is c for c in could))


def _keeps(call: _Call, g: Group[_Request]) -> bool:
    """A request joining ``g`` now is kept apart (:class:`_Kept`): ``g`` is a request alone with its id that one
    parked error, and only one, may be the refusal of (two: whose was which would not be known)."""
    return bool(call.parked) and not g.shared and _refusable(g) and _parked_on(call, g) == 1


def _lost_by(r: _Request) -> None:
    """Records of ``r``'s call were lost now (see Tracker.lost): what that makes of ``r``."""
    if r.hole is None:
        r.hole, r.hole_from = LOST_SETTLED, len(r.machine.violations)
    if r.machine.state in OPEN:
        r.hole = LOST_OPEN


def _unjoin(call: _Call, groups: list[Group[_Request]] | None = None) -> None:
    """Forget what :meth:`Tracker._split` kept of ``groups`` (None: of the groups no parked error may be of)."""
    if groups is None:
        call.joined = [k for k in call.joined if _parked_on(call, k.group)]
    else:
        call.joined = [k for k in call.joined if all(k.group is not c for c in groups)]


_DONE = frozenset({State.FINAL_RECEIVED, State.ERROR})
# Constants: `Input.X` is a lookup through the enum's metaclass, ~160 ns, once a response (issue 15).
_RESPONSE, _FINAL, _ERROR, _ERROR_FINAL = Input.RESPONSE, Input.FINAL, Input.ERROR, Input.ERROR_FINAL
_FINAL_RECEIVED, _COMPLETED, _ERRORED = State.FINAL_RECEIVED, State.COMPLETED, State.ERROR  # (per request: _retire)

#: ``on_response(call, request_seq, seq, record)``: a response was attributed to the request whose
#: request record is ``request_seq`` on ``call`` (the report draws it on that request's lane).
ResponseObserver = Callable[[str, int, int, ev.MessageSeen], None]
#: ``on_adopt(call, conn, record)``: a message of a call whose ``call_start`` was not read made the
#: tracker take the call up (:data:`~replay.capture.methods.START_NOT_READ`), on connection ``conn``.
AdoptObserver = Callable[[str, str, ev.MessageSeen], None]


class Tracker:
    """Feeds every request's state machine from capture records; never awaits, never raises.

    With a ``sink`` (:class:`~replay.machine.outcomes.RequestSink`) outcomes go there as they settle
    and :meth:`finish` returns none: memory is then O(open calls' unsettled requests + calls), not
    O(requests), when ids are re-used (tritonclient's default ``""``) or calls end.
    """

    def __init__(self, on_response: ResponseObserver | None = None, sink: RequestSink | None = None,
                 on_adopt: AdoptObserver | None = None) -> None:  # fmt: skip
        self._on_response = on_response
        self._on_adopt = on_adopt
        self._sink = sink
        self._calls: dict[str, _Call] = {}
        self._order: list[_Call] = []
        self._unattributable: list[Unattributable] = []
        self._protocol_errors: list[ProtocolError] = []
        self._warnings: list[str] = []
        self._orphans: set[str] = set()
        self._ids = CaptureIds()
        #: (connection, model, request id) -> where a request with them was cancelled, its message's size
        #: and hash (``--payload full``): an id alone is evidence of a restart only from the same client
        #: connection (ids such as "1" are reused by unrelated clients), and not when the two messages'
        #: bytes differ (their sizes, or their hashes). The same bytes (hash -> connection, where) are evidence
        #: from the same connection; from another, a note (load generators send one request many times).
        #: Both are forgotten at a new capture: another proxy run, other clients.
        self._cancelled_keys: dict[tuple[str, str | None, str], tuple[str, int, str | None]] = {}
        self._cancelled_hashes: dict[str, tuple[str, str]] = {}
        self._unlabelled = 0
        self._unlabelled_adopted = 0  # the same, on calls whose call_start was not read (their method unknown)
        self._cut_responses = 0  # gRPC responses the call's end cut: recorded as far as they came, no response
        self._late_after_end = 0
        self._records = 0
        self._live: dict[str, _Call] = {}  # raw call id (as written) -> its call, for the current capture
        self._open: dict[str, _Call] = {}  # calls started and not ended, by id: what a loss of records touches

    # -- feeding ---------------------------------------------------------------------------------

    def feed(self, seq: int, record: ev.Record) -> None:
        """One capture record, in capture order."""
        self._records += 1
        if type(record) is ev.MessageSeen:
            # Hot loop: most records are responses on a known open stream (see _streamed), and most
            # of those are plain responses of a request that is alone with its id, in a state the
            # table keeps: only counted here, inline (a method call costs as much as the rest; the
            # same as _answered, for what such a response can change).
            call = self._live.get(record.call)
            if call is not None and record.dir == "s2c" and call.stream and not call.ended and record.request_id is not None:
                group = call.groups.get(record.request_id)
                if (group is not None and not group.shared and not record.error and record.final is not True
                        and group.model == record.model and not call.parked
                        and (target := group.members[-1]).machine.state in KEPT_BY_RESPONSE):  # fmt: skip
                    target.responses += 1
                    if record.outputs:
                        target.text += 1
                    if target.t_first is None:
                        target.t_first = record.t_ns
                    target.t_last = record.t_ns
                    if self._on_response is not None:
                        self._on_response(call.id, target.seq, seq, record)
                    return
                self._streamed(call, seq, record)
                return
            self._message(seq, record, call)
        elif isinstance(record, ev.CallStarted):
            cid = self._ids.of(record.call)
            if cid in self._calls:
                self._warnings.append(f"seq {seq}: call {cid} started twice; the second start is ignored")
                return
            call = _Call(cid, record.method, record.t_ns, len(self._order), self._ids.of(record.conn))
            self._calls[cid] = call
            self._order.append(call)
            self._open[cid] = call
        elif isinstance(record, ev.HalfClosed):
            known = self._call(record.call, seq)
            if known is not None:
                # (The proxy's call_end details say it too; HTTP captures written before they did say it only here.)
                known.client_fin = known.http and not known.ended
                for r in known.requests:
                    r.machine.feed(Input.HALF_CLOSE, seq)
        elif isinstance(record, ev.CallCancelled):
            known = self._call(record.call, seq)
            if known is not None and not known.ended:
                self._end(known, record.cause, seq, record.t_ns)
        elif isinstance(record, ev.CallEnded):
            known = self._call(record.call, seq)
            if known is not None:
                if not known.ended:
                    if known.http and record.details == ev.HALF_CLOSE_ANSWERED:
                        # The client's FIN came first, maybe before this call began (a request pipelined
                        # behind one that was still being answered): the proxy says so at its end.
                        known.client_fin = True
                    self._end(known, record.cause, seq, record.t_ns)
                known.status, known.details, known.duration_ms = record.status, record.details, record.duration_ms
                known.failed = not status_ok(record.status, record.http_status)
                if self._sink is not None and known.sent and not known.reported:
                    self._hand_over(known)
        elif isinstance(record, ev.ProtocolViolated):
            self._protocol_errors.append(
                ProtocolError(seq=seq, conn=self._ids.of(record.conn), side=record.side, error=record.error,
                              error_code=record.error_code, open_calls=tuple(self._ids.of(c) for c in record.open_calls))
            )  # fmt: skip
        elif isinstance(record, ev.LateFrameSeen):
            # Frames on a stream the upstream had ended (RFC 9113 forbids them; Triton 2.51 repeats a
            # deadline's end): information, counted, not a violation of any request.
            if record.after == "end" and record.frame != "overflow":
                self._late_after_end += 1
        elif isinstance(record, ev.CaptureStarted):
            before = self._ids.captures
            if self._ids.starts(record):
                if before:
                    self._capture_over(seq)  # the previous capture ends here (the next one's ids restart)
                    self._cancelled_keys.clear()
                    self._cancelled_hashes.clear()
                self._live.clear()

    def _hand_over(self, call: _Call) -> None:
        """The call ended: its requests cannot change any more, so they go to the sink now (memory stays flat)."""
        self._sink.call_over(call.pos, call.status, [outcome_of(call, r, r.machine.state)  # type: ignore[union-attr]
                                                     for r in call.requests])  # fmt: skip
        for r in call.requests:
            r.group = None  # (a cycle, see _retire)
        call.requests.clear()
        call.groups.clear()
        call.by_model.clear()
        call.reported = True  # (a second call_end, in a damaged capture, changes nothing reported)

    def lost(self, _gap: Gap | None = None) -> None:
        """Records were lost here (a hole: :data:`~replay.capture.holes.LOSSES`), before the next record fed.

        Any call open here may have lost requests, responses, finals or its end, and what is recorded
        after cannot show which: a request open here gets the outcome ``unknown`` (what its records
        show is kept beside it), except a unary request whose reply and call end were both recorded; the
        violations its call's requests get from here on are listed apart and not counted against the
        server (a final lost here would read as ``missing_final``, a lost request's responses as
        another's ``response_after_final``), and so are responses no request can be given; a request
        sent later on the call whose violations came after the loss is ``unknown`` too (a lost
        request with its id may have answered it). Requests settled before it keep their outcome.
        A reader calls this as it finds the hole (:attr:`~replay.capture.reader.CaptureReader.on_loss`).
        """
        for call in self._open.values():
            call.hole = True
            for k in call.joined:
                k.lost()
            for r in call.requests:
                _lost_by(r)

    def watch(self, reader: Any) -> None:
        """Be told by ``reader`` (a capture or records reader, or None) of each hole (:meth:`lost`) and of
        each capture it begins (where a capture whose first files are gone starts)."""
        if reader is None:
            return
        reader.on_loss = self.lost
        self._ids.follow(reader)

    def qualified(self, raw_id: str) -> str:
        """The call id as reported (a second capture in one run prefixes its ids, see :meth:`feed`)."""
        return self._ids.of(raw_id)

    def _call(self, raw_id: str, seq: int, message: ev.MessageSeen | None = None) -> _Call | None:
        cid = self._ids.of(raw_id)
        call = self._calls.get(cid)
        if call is not None:
            self._live[raw_id] = call
        elif message is not None:
            call = self._adopt(raw_id, cid, seq, message)
        elif cid not in self._orphans:
            self._orphans.add(cid)
            self._warnings.append(f"seq {seq}: records of call {cid} without its call_start (lost in a gap?): ignored")
        return call

    def _adopt(self, raw_id: str, cid: str, seq: int, rec: ev.MessageSeen) -> _Call:
        """A message of a call whose ``call_start`` was not read: the call is taken up from here, so what
        was read of it is judged, not dropped (a retention cut or a lost line must not make requests
        vanish). It is judged as a stream (:data:`START_NOT_READ`) and as open where records were lost:
        what came before (a request, a final) may explain what follows, so a request whose violations
        that could explain is ``unknown``, a response no request read can be given is listed apart, and
        a request seen whole keeps its outcome."""
        # (A call id is `<conn>.<n>`: the connection is what comes before its last dot.)
        conn = self._ids.of(raw_id.rpartition(".")[0] or raw_id)
        call = _Call(cid, START_NOT_READ, rec.t_ns, len(self._order), conn)
        call.hole = True
        self._calls[cid] = call
        self._order.append(call)
        self._open[cid] = call
        self._live[raw_id] = call
        self._warnings.append(
            f"seq {seq}: call {cid} without its call_start (lost, or in a file not given): its records from here "
            "are judged as a stream's, as after records lost"
        )
        if self._on_adopt is not None:
            self._on_adopt(cid, conn, rec)
        return call

    def _message(self, seq: int, rec: ev.MessageSeen, known: _Call | None) -> None:
        call = known if known is not None else self._call(rec.call, seq, rec)  # (known: feed's lookup found it)
        if call is None:
            return
        if not (call.unary or call.stream or call.http):
            if rec.dir == "c2s":
                call.model = call.model or rec.model
            elif not rec.compressed and rec.decode_error is None and call.method[len(PREFIX) :] in READINESS:
                call.ready = rec.size > 0  # (proto3 writes a false flag as nothing)
            return
        if call.ended:
            self._warnings.append(f"seq {seq}: message on call {call.id} after its end: ignored")
            return
        if rec.dir == "c2s":
            self._sent(call, seq, rec)
        else:
            self._received(call, seq, rec)

    def _sent(self, call: _Call, seq: int, rec: ev.MessageSeen) -> None:
        if call.http and call.sent and rec.decode_error is not None and rec.decode_error.startswith(ev.BODY_REST):
            return  # the rest of the call's request body, after Triton's early reply: the same request
        if rec.request_id is None and call.http:
            # The call is the tie on HTTP: a body the labeller could not read is still the call's request.
            if rec.decode_error is not None:
                self._warnings.append(
                    f"seq {seq}: request on HTTP call {call.id} not decoded ({rec.decode_error}): tracked by its call"
                )
        elif rec.request_id is None:
            if rec.decode_error is not None:
                self._warnings.append(
                    f"seq {seq}: request on call {call.id} not decoded ({rec.decode_error}): not tracked"
                )
            else:
                self._no_labels(call)
            return
        if (call.unary or call.http) and call.sent:
            self._warnings.append(f"seq {seq}: second request message on unary call {call.id}: ignored")
            return
        occurrence = 0
        if rec.request_id is not None:
            occurrence = call.by_id.get(rec.request_id, 0)
            call.by_id[rec.request_id] = occurrence + 1
        r = _Request(call, rec, seq, occurrence)
        call.requests.append(r)
        call.sent += 1
        if call.stream and rec.request_id is not None:  # (always labelled here: only HTTP tracks id-less ones)
            rid, model = rec.request_id, rec.model
            group = latest = call.groups.get(rid)
            models = call.by_model.get(rid)
            if latest is not None and latest.model != model:
                if models is None:
                    models = call.by_model[rid] = {latest.model: latest}
                group = models.get(model)
            if group is not None and group.open:
                if _keeps(call, group):
                    # Sent after an error that may be its id and model's refusal: if it was, this request
                    # was never in flight with the refused one. What the group gets is kept until then.
                    call.joined.append(_Kept(group, call.hole))
                group.join(r)
                r.group = group
            else:
                r.group = Group(r, rid)
                if models is not None:
                    models[model] = r.group
            call.groups[rid] = r.group
            if self._sink is not None and group is not None and r.group is not group:
                self._retire(call)  # the replaced group's requests can no longer change
        where = None
        if rec.request_id:
            cancelled = self._cancelled_keys.get((call.conn, rec.model, rec.request_id))
            if cancelled is not None and cancelled[1] == rec.size and (cancelled[2] is None or rec.payload_sha256 is None
                                                                       or cancelled[2] == rec.payload_sha256):  # fmt: skip
                where = cancelled[0]
        if where is None and rec.payload_sha256 is not None:
            same = self._cancelled_hashes.get(rec.payload_sha256)
            if same is not None:
                if same[0] == call.conn:
                    where = same[1]
                else:
                    r.resent = True
        if where is not None:
            why = f"request {rec.request_id!r} of model {rec.model!r} was cancelled before ({where})"
            r.machine.add_violation("restarted_after_cancel", seq, why)
        if call.hole:
            # (The restart above is counted: the cancel and this request were both recorded.)
            r.hole, r.hole_from = LOST_BEFORE, len(r.machine.violations)

    def _received(self, call: _Call, seq: int, rec: ev.MessageSeen) -> None:
        if call.http:
            self._http_received(call, seq, rec)
            return
        if rec.request_id is None:
            if ev.message_cut(rec.decode_error):
                # What arrived of a response when the call's end cut it (a reset, a lost connection, a cancel):
                # no client had it whole, so it is no response of any request, and nothing unattributable.
                self._cut_responses += 1
            elif rec.decode_error is not None:
                self._unattributed(call, seq, rec, "undecoded")
            else:
                self._no_labels(call)
            return
        if not call.unary:
            self._streamed(call, seq, rec)
            return
        target = call.requests[0] if call.requests else None
        if target is None:
            self._unattributed(call, seq, rec, "no_request")
            return
        target.machine.feed(Input.REPLY, seq)
        target.final = rec.final
        self._answered(call, target, seq, rec)

    def _no_labels(self, call: _Call) -> None:
        """A message without Triton labels and no decode error: an inference call's (compressed, cut short),
        or, on a call whose start was not read, maybe another method's (a health check's, a metadata call's)."""
        if call.method == START_NOT_READ:
            self._unlabelled_adopted += 1
        else:
            self._unlabelled += 1

    def _http_received(self, call: _Call, seq: int, rec: ev.MessageSeen) -> None:
        """A reply or event of an HTTP inference call: its one request's, whatever id it carries.

        A reply (``final`` null: infer, generate, a non-streaming OpenAI call) is the whole answer:
        an error JSON in it makes the request an error whatever the status (Triton answers 200 with
        an error JSON when generate's model sent no or two responses), so it enters the table as an
        error with the final flag; a plain one is a unary reply (its call's end decides, as gRPC's).
        An event (``final`` true or false, as the recorder set it from the body's end or
        ``[DONE]``) is a stream response, by the table's stream rules; bytes no client got as an
        event (cut, or not ended by a blank line) are none.
        """
        target = call.requests[0] if call.requests else None
        if target is None:
            self._unattributed(call, seq, rec, "no_request")
            return
        error, fin = rec.error, rec.final
        if fin is not None and ev.never_received(rec.decode_error):
            # An event the connection's end cut, or no blank line ended: its bytes are recorded, but an
            # SSE client never got it, so it is no response (noted: `event_cut`). Drawn where it was.
            target.cut = True
            if self._on_response is not None:
                self._on_response(call.id, target.seq, seq, rec)
            return
        if fin is None:
            if call.kind_open and not target.responses:
                call.kind = "unary"  # an OpenAI call that did not ask for a stream
                target.final = None
            inp = _ERROR_FINAL if error else Input.REPLY
        else:
            inp = _ERROR_FINAL if error and fin else _ERROR if error else _FINAL if fin else _RESPONSE
        target.machine.feed(inp, seq)
        if fin is not None:
            target.final = target.final or fin
        call.kind_open = False
        self._answered(call, target, seq, rec)

    def _streamed(self, call: _Call, seq: int, rec: ev.MessageSeen, placed: Group[_Request] | None = None) -> None:
        """A labelled stream response (the plain response of a request alone with its id is `feed`'s own);
        ``placed``: the group a parked error was placed in (the observer was told of it when it came)."""
        group = placed
        if placed is not None and call.joined and _refusal(rec) and self._split(call, seq, rec, placed):
            return
        if group is None:
            rid: str = rec.request_id  # type: ignore[assignment]  # (the callers checked: not None)
            group = call.groups.get(rid)
            if group is None:
                self._unattributed(call, seq, rec, "empty_id" if rid == "" else "unknown_id")
                return
            if group.model != rec.model:
                could = self._could_be(call, rid, rec)
                if len(could) > 1 and _refusal(rec):
                    # Shaped like Triton's refusal of a request, which names no model: whose it was shows
                    # later (a refused request gets nothing more), at the latest by the call's end.
                    call.parked.append((seq, rec, could))
                    if self._on_response is not None:
                        self._on_response(call.id, max(m.seq for g in could for m in g.members), seq, rec)
                    return
                group = could[0] if len(could) == 1 else self._merge(call, rid, could)
            if call.parked:
                self._unpark(call, group, rec)
        drawn = placed is not None
        if group.shared and group.open:
            self._grouped(call, group, seq, rec, drawn)
            return
        # A group of one, or a group already over: the response is its (last) request's own;
        # after the final it is the `response_after_final` violation of that request (of groups made
        # one, of the last request of the model it names, when one went to it).
        target = group.members[-1]
        if group.shared and target.model != rec.model and rec.model:
            target = next((m for m in reversed(group.members) if m.model == rec.model), target)
        machine = target.machine
        error, fin = rec.error, rec.final is True
        inp = _ERROR_FINAL if error and fin else _ERROR if error else _FINAL if fin else _RESPONSE
        if group.open and machine.state in OPEN and (fin or (_refusal(rec) and not target.responses)):
            # Its final, or Triton's refusal of it (an error naming no model as its first answer), after
            # which nothing comes: a request sent later with its id and model starts a group of its own.
            group.open -= 1
            if not fin:
                target.t_done = rec.t_ns  # (refused: done then, not at the call's end)
        machine.feed(inp, seq)
        if fin:
            target.final = True
        self._answered(call, target, seq, rec, drawn)

    @staticmethod
    def _could_be(call: _Call, request_id: str, rec: ev.MessageSeen) -> list[Group[_Request]]:
        """The groups of ``request_id`` a stream response not of its id's latest group may be of (in the order
        their first requests were sent): the latest group of its id and model, when it names one; else
        (Triton's refusal of a request names none) the groups of its id still open, or the latest one when
        none is. A refusal (:func:`_refusal`) is only of those it may still be of (:func:`_refusable`)."""
        models = call.by_model.get(request_id)
        if models is None:  # (every request of the id went to one model)
            return [call.groups[request_id]]
        mine = models.get(rec.model)
        if mine is not None and rec.model:
            return [mine]
        could: list[Group[_Request]] = []
        for g in models.values():
            if g.open and all(g is not c for c in could):
                could.append(g)
        if len(could) > 1 and _refusal(rec):
            could = [g for g in could if _refusable(g)] or could
        could.sort(key=_first_seq)
        return could or [call.groups[request_id]]

    def _merge(self, call: _Call, request_id: str, groups: list[Group[_Request]]) -> Group[_Request]:
        """``groups`` (of ``request_id``, open, in order) are one group from here on (:meth:`Group.absorb`);
        an error parked on them is then that group's."""
        if call.joined:
            _unjoin(call, groups)  # (made one: what each got alone, or as a group, is counted together)
        into = groups[0]
        for g in groups[1:]:
            into.absorb(g)
            for m in g.members:
                m.group = into
        models = call.by_model[request_id]  # (groups of several models: the id has this index)
        for key, g in models.items():
            if any(g is c for c in groups):
                models[key] = into
        if any(call.groups[request_id] is c for c in groups):
            call.groups[request_id] = into
        if call.parked:
            parked, call.parked = call.parked, []
            for seq, rec, could in parked:
                if any(g is c for g in could for c in groups):
                    could = [g for g in could if all(g is not c for c in groups)]
                    could.insert(0, into)
                    could.sort(key=_first_seq)
                if len(could) == 1:
                    self._streamed(call, seq, rec, could[0])
                else:
                    call.parked.append((seq, rec, could))
            if call.joined:
                _unjoin(call)
        return into

    def _unpark(self, call: _Call, group: Group[_Request], rec: ev.MessageSeen) -> None:
        """``group`` is about to get ``rec``: what that says of the errors parked on it (:meth:`_streamed`).

        A refusal is a request's one answer (Triton 2.51 names the model in every other error): a request
        alone with its id that gets an answer, or a shared group whose every request gets its final, was
        not refused. Once one candidate is left, the error is its own, placed before what comes next.
        """
        if group.shared and not (rec.final is True and group.open == 1):
            return  # (which of its requests this answers is unknown: any other may have been refused)
        parked = call.parked  # (walked in place: placing one may re-point the others, see _split)
        i = 0
        while i < len(parked):
            seq, err, could = parked[i]
            if len(could) == 1 or any(g is group or not _refusable(g) for g in could):
                # (a candidate an earlier error was placed on is over: refused, it gets nothing more)
                could = [g for g in could if g is not group and _refusable(g)]
                if len(could) <= 1:
                    # (none left: a server that does not refuse as 2.51 does; the one answered now, then)
                    del parked[i]
                    self._streamed(call, seq, err, could[0] if could else group)
                    continue
                parked[i] = (seq, err, could)
            i += 1
        if call.joined:
            _unjoin(call)

    def _split(self, call: _Call, seq: int, rec: ev.MessageSeen, group: Group[_Request]) -> bool:
        """The refusal ``rec`` is placed on ``group``, which requests of its id and model joined after it came
        (kept in ``call.joined``): it refused the one request sent before it, which got nothing else, so
        the others were never in flight with a request that could still answer. They are taken as they would
        have been had the wire told at once: the refused request alone, the others a group (or a request
        alone) of their own, given again what the group got since, and the holes among it. An error parked
        since on ``group`` may be of the one of them in flight when it came. False: ``group`` was not so joined."""
        at = next((i for i, k in enumerate(call.joined) if k.group is group), None)
        if at is None:
            return False
        kept = call.joined.pop(at)
        refused, later = group.members[0], group.members[1:]
        rid: str = refused.request_id  # type: ignore[assignment]  # (a request of a group: labelled)
        refused.group = Group(refused, rid)
        self._streamed(call, seq, rec, refused.group)
        steps: list[tuple[float, _Request | ev.MessageSeen | int | None]] = [(m.seq, m) for m in later]
        steps.extend(kept.steps)
        # Errors parked since on ``group`` (it was joined before they came): each may be of the one of
        # those requests in flight then, and is parked again as it would have been (by its index).
        steps.extend((e[0], i) for i, e in enumerate(call.parked) if any(g is group for g in e[2]))
        steps.sort(key=_step_seq)
        current: Group[_Request] | None = None
        sent: list[_Request] = []
        made: list[_Kept] = []
        hole = kept.hole
        for when, step in steps:
            if isinstance(step, _Request):
                # Its holes as when it was sent (a hole among the group's steps is taken again below).
                step.hole, step.hole_from = (LOST_BEFORE, len(step.machine.violations)) if hole else (None, 0)
                sent.append(step)
                if current is not None and current.open:
                    if _keeps(call, current):
                        made.append(_Kept(current, hole))  # (as _sent does: split in turn, maybe)
                        call.joined.append(made[-1])
                    current.join(step)
                else:
                    current = Group(step, rid)
                step.group = current
            elif isinstance(step, int):
                e_seq, err, could = call.parked[step]
                could = [g for g in could if g is not group]
                if current is not None and all(g is not current for g in could):
                    could.append(current)
                could.sort(key=_first_seq)
                call.parked[step] = (e_seq, err, could)
            elif step is None:  # records of the call were lost here: as Tracker.lost
                hole = True
                for k in made:
                    k.steps.append((when, None))
                for m in sent:
                    _lost_by(m)
            else:
                self._streamed(call, int(when), step, current)
        models = call.by_model.get(rid)
        for key, g in (models or {}).items():
            if g is group:
                models[key] = current  # type: ignore[index, assignment]
        if call.groups.get(rid) is group:
            call.groups[rid] = current  # type: ignore[assignment]
        return True

    def _settle(self, call: _Call) -> None:
        """The call ends: each error still parked by :meth:`_streamed` goes to its candidates as one group
        (none got an answer or a final since: any of them could have been refused), or to the one left
        once those an earlier error was placed on are over."""
        while call.parked:
            seq, rec, could = call.parked.pop(0)
            could = [g for g in could if _refusable(g)] or could[-1:]  # (none left: as a response after their end)
            group = could[0] if len(could) == 1 else self._merge(call, rec.request_id, could)  # type: ignore[arg-type]
            self._streamed(call, seq, rec, group)
        call.joined.clear()

    def _answered(self, call: _Call, target: _Request, seq: int, rec: ev.MessageSeen, drawn: bool = False) -> None:
        """What any response attributed to ``target`` adds to it (after its state machine took it).

        `feed`'s inline path does the same for a plain response in a state the table keeps (no
        error, no final, state unchanged): keep the two in step.
        """
        target.responses += 1
        if rec.outputs:
            target.text += 1
        if target.t_first is None:
            target.t_first = rec.t_ns
        target.t_last = rec.t_ns
        if rec.error:
            if target.error is None:
                target.error = rec.error
            if rec.final is not True:
                target.errors += 1
        if target.t_done is None and target.machine.state in _DONE:
            target.t_done = rec.t_ns
        if self._on_response is not None and not drawn:
            self._on_response(call.id, target.seq, seq, rec)

    def _grouped(self, call: _Call, group: Group[_Request], seq: int, rec: ev.MessageSeen, drawn: bool = False) -> None:
        """A response of a shared id group: counted for the group; the group closes at its last final."""
        if call.joined:
            for k in call.joined:
                if k.group is group:
                    k.steps.append((seq, rec))  # (kept for _split)
                    if len(k.steps) > KEEP_STEPS:
                        _unjoin(call, [group])
                    break
        if rec.error:
            group.errored(rec.error, seq)
        if group.count(text=bool(rec.outputs), error=bool(rec.error), final=rec.final is True, t_ns=rec.t_ns,
                       refusal=_refusal(rec)):  # fmt: skip
            group.close(None, seq)
            for m in group.members:
                if m.t_done is None:
                    m.t_done = rec.t_ns  # the group's last final: each ended by then
        if self._on_response is not None and not drawn:
            # Which request it answers is unknown; the latest one sent before it could have caused
            # it, so serve replays it no earlier than the wire did and the report draws it there.
            self._on_response(call.id, group.members[-1].seq, seq, rec)

    def _unattributed(self, call: _Call, seq: int, rec: ev.MessageSeen, reason: str) -> None:
        self._unattributable.append(
            Unattributable(call=call.id, seq=seq, request_id=rec.request_id, reason=reason, final=rec.final,
                           error=rec.error, after_loss=call.hole)
        )  # fmt: skip

    def _end(self, call: _Call, cause: str, seq: int, t_ns: int | None) -> None:
        call.ended = True
        self._open.pop(call.id, None)
        call.cause = cause
        base = END_BY_CAUSE.get(cause, Input.END_ERROR)
        if base is Input.END_OK and call.client_fin:
            base = Input.END_OK_AFTER_CLIENT_FIN
        if call.parked:
            self._settle(call)
        self._close_groups(call, base, seq)
        for r in call.requests:
            if call.http and call.kind == "stream" and cause == "ok" and not r.responses and not r.cut:
                # An event stream that ended cleanly with no event (a model that sent only its final
                # flag): the body's clean end is the final signal, there was no response to carry it.
                r.machine.feed(_FINAL, seq)
                r.final = True
            inp = base
            if inp is Input.END_OK and call.stream and r.final_due and not refused(r):
                inp = Input.END_OK_FINAL_DUE
            r.machine.feed(inp, seq)
            if t_ns is not None and (r.t_done is None or (call.http and call.kind == "stream" and cause == "ok")):
                # An event stream's final signal is its clean end, not its last event: Triton ends it after the
                # model's final flag, which may come long after the last event (as a response of its own).
                r.t_done = t_ns
            if r.machine.state is State.CANCELLED and r.hole != LOST_OPEN:
                # (Open where records were lost, it may have ended before the cancel: no evidence that
                # work was cancelled, so none that a later request restarted it.)
                where = f"call {call.id}, seq {r.seq}"
                if r.request_id:
                    self._cancelled_keys[call.conn, r.model, r.request_id] = (where, r.size, r.sha)
                if r.sha is not None:
                    self._cancelled_hashes[r.sha] = (call.conn, where)

    def _retire(self, call: _Call) -> None:
        """Hand the call's oldest requests whose outcome is settled to the sink (see :class:`RequestSink`).

        Settled: final flag seen (or an error with it) and no longer reachable (a newer request took
        over its id and model, so no later response can be its). A request still open keeps those after it.
        """
        requests = call.requests
        while requests:
            r = requests[0]
            state = r.machine.state
            if r.final is not True:
                return
            if (self._latest(call, r) if call.by_model else call.groups.get(r.request_id)) is r.group:  # type: ignore[arg-type]
                return  # (still reached by its id and model's responses)
            if state is _FINAL_RECEIVED:
                state = _COMPLETED  # what any end of a gRPC call makes it (table.py; _retire sees no HTTP call)
            elif state is not _ERRORED or r.error is None:
                return
            requests.popleft()
            self._sink.settled(call.pos, outcome_of(call, r, state))  # type: ignore[union-attr]
            r.group = None  # request <-> group is a cycle: without it the request is freed right away

    @staticmethod
    def _latest(call: _Call, r: _Request) -> Group[_Request] | None:
        """The group a response of ``r``'s id and model would reach now."""
        rid: str = r.request_id  # type: ignore[assignment]  # (a request of a group: labelled)
        models = call.by_model.get(rid)
        return call.groups.get(rid) if models is None else models.get(r.model)

    @staticmethod
    def _close_groups(call: _Call, end: Input, seq: int | None) -> None:
        for group in itertools.chain(call.groups.values(), *(m.values() for m in call.by_model.values())):
            if group.shared and group.outcome is None:  # (a group absorbing others is in several places)
                due = end is Input.END_OK and group.finals_missing() > 0
                group.close(Input.END_OK_FINAL_DUE if due else end, seq)
                if due and group.open and group.outcome is not None and not group.outcome.per_request:
                    # Finals were due and some never came; whose is unknown: one violation for the group.
                    # (When every member ended alike, each request's own missing_final says it.)
                    group.members[0].machine.add_violation(
                        "missing_final", seq, f"{group.open} of the {len(group.members)} requests with id "
                        f"{group.request_id!r} sent together got no final flag before the call ended OK",
                    )  # fmt: skip

    def _capture_over(self, seq: int | None) -> None:
        self._open.clear()
        for call in self._order:
            if not call.ended and (call.unary or call.stream or call.http):
                if call.parked:
                    self._settle(call)
                self._close_groups(call, Input.CAPTURE_ENDED, seq)
                call.ended = True
                for r in call.requests:
                    r.machine.feed(Input.CAPTURE_ENDED, seq)

    # -- result ----------------------------------------------------------------------------------

    def finish(self, gaps: Iterable[Gap] = (), warnings: Iterable[str] = ()) -> TrackResult:
        """End of the capture: requests still open are ``incomplete``; the outcomes (none with a sink)."""
        self._capture_over(None)
        requests: list[RequestOutcome] = []
        calls: list[CallOutcome] = []
        for call in self._order:
            outcomes = [outcome_of(call, r, r.machine.state) for r in call.requests]
            if self._sink is not None:
                if call.sent and not call.reported:
                    self._sink.call_over(call.pos, call.status, outcomes)
            else:
                requests.extend(outcomes)
            calls.append(
                CallOutcome(call=call.id, method=call.method, status=call.status, cause=call.cause,
                            details=call.details, duration_ms=call.duration_ms, requests=call.sent, model=call.model,
                            ready=call.ready)
            )  # fmt: skip
        warns = [*warnings, *self._warnings]
        if self._unlabelled:
            warns.append(
                f"{self._unlabelled} inference message(s) carry no Triton labels (compressed, cut short or undecodable: see decode_error): "
                "they are not tracked per request"
            )
        if self._cut_responses:
            warns.append(
                f"{self._cut_responses} response message(s) cut by their call's end (the bytes that arrived are "
                "recorded; no client had them whole): not counted as responses"
            )
        if self._unlabelled_adopted:
            warns.append(
                f"{self._unlabelled_adopted} message(s) on calls whose call_start was not read carry no Triton labels "
                "(another method's, or an inference message compressed, cut short or undecodable): not tracked"
            )
        return TrackResult(
            requests=tuple(requests), unattributable=tuple(self._unattributable), calls=tuple(calls),
            gaps=tuple(gaps), warnings=tuple(warns), records=self._records, captures=self._ids.captures,
            unlabelled_messages=self._unlabelled, protocol_errors=tuple(self._protocol_errors),
            late_after_end=self._late_after_end,
        )  # fmt: skip


def _records(items: Iterable[Any]) -> Iterator[tuple[int, ev.Record]]:
    for i, item in enumerate(items):
        if isinstance(item, tuple):
            yield item[0], item[1]
        else:
            yield i, item


def open_source(capture: CaptureSource) -> tuple[Iterable[tuple[int, ev.Record]], Any]:
    """``(records, reader-or-None)`` for any :data:`CaptureSource` (paths are read lazily; records in
    memory through a :class:`~replay.capture.reader.RecordsReader`: holes found alike)."""
    if isinstance(capture, str | os.PathLike):
        reader = read_capture(capture)
        return reader, reader
    it = iter(capture)
    first = next(it, None)
    if first is None:
        return [], None
    rest = itertools.chain([first], it)
    if isinstance(first, str | os.PathLike):
        reader = read_capture(rest)  # type: ignore[arg-type]
        return reader, reader
    records = RecordsReader(_records(rest))
    return records, records


def track(capture: CaptureSource) -> TrackResult:
    """Per-request outcomes of a capture (what ``replay check`` reports).

    ``capture``: a file or directory path, several of them, or an iterable of records (each a
    :mod:`replay.capture.events` record or a ``(seq, record)`` pair). Raises
    :class:`~replay.errors.CaptureError` when files are unreadable.
    """
    records, reader = open_source(capture)
    tracker = Tracker()
    if reader is None:
        return tracker.finish()
    tracker.watch(reader)
    for seq, record in records:
        tracker.feed(seq, record)
    return tracker.finish(reader.gaps, reader.warnings)

"""The reference client's view of one Triton request: a state machine written as a table.

One :class:`RequestMachine` per request identity (call + request id + occurrence). It never awaits
and never raises: :class:`Tracker` feeds it :class:`Input` values derived from capture records,
and an input the table does not allow is *recorded* as a violation.

Domain rules the table encodes (docs/replay.md's "Request outcomes" section repeats them):

* Completion is the raw ``final`` flag only. ``final_received`` is "completed, its call still
  open"; any end of the call then makes it ``completed``: the final flag was the request's whole
  completion signal, so a later cancel/deadline/disconnect of the *stream* concerns only the
  requests still in flight.
* An in-band error is sticky: ``error_received`` (error seen, final still to come) and ``error``
  (error and final seen, or the call ended) are never turned into success or into ``cancelled`` by
  what happens to the stream afterwards.
* Unary ModelInfer: the response alone does not decide (a gRPC client ignores a message followed
  by a non-OK status), so ``replied`` waits for the call's end, whose cause decides.
* ``unconfirmed``: the stream ended OK without a final flag for a request that had not enabled
  empty final responses: the protocol gave no completion signal (a fact, not a violation).
  With ``triton_enable_empty_final_response`` on, a final was due: ``incomplete`` plus a
  ``missing_final`` violation. A capture that ends with the request open: ``incomplete``, no
  violation (the proxy saw no more, the server did nothing wrong).

:class:`Tracker` is pure and synchronous: fed ``(seq, record)`` one at a time, it keeps one
:class:`RequestMachine` per request identity and decides which machine each
response belongs to. :func:`track` is the thin shell that feeds it from files or records.

Attribution rules (why they are what they are):

* Identity is call + Triton request id + occurrence: Triton does not require ids to be unique, so
  an id re-used on a call after its previous request finished starts a new occurrence.
* A stream response goes to the one request in flight with its id. Two in flight with the same id
  make it ``ambiguous``; an id no request on the call used is ``unknown_id`` (``empty_id`` when it
  is ``""``). Such responses are listed as *unattributable*, never merged into a guess. A
  response for a request whose final was already seen goes to that request (the
  ``response_after_final`` violation), as it cannot belong to anything else.
* ``""`` is an id like any other: tritonclient sends it by default, and with one request
  without id in flight the responses without id are unambiguously its own.
* The call's end is applied at the first of ``cancel`` / ``call_end`` (the proxy writes both for a
  cancel-like end, the cancel first); the ``call_end`` then only adds status and details.
* A request sent again (same model and non-empty id, or with ``--payload full`` the same message
  hash) after an earlier one was ``cancelled`` gets ``restarted_after_cancel``.
"""

from __future__ import annotations

import enum
import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from replay.capture import events as ev
from replay.capture.methods import INFER, STREAM_INFER, short_method
from replay.capture.reader import Gap, PathLike, SeqWatch, read_capture


class State(enum.StrEnum):
    """Where a request stands; the terminal ones are its reported outcome."""

    SENT = "sent"
    RECEIVING = "receiving"
    FINAL_RECEIVED = "final_received"
    ERROR_RECEIVED = "error_received"
    REPLIED = "replied"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    DEADLINE = "deadline"
    DISCONNECTED = "disconnected"
    INTERRUPTED = "interrupted"
    ERROR = "error"
    UNCONFIRMED = "unconfirmed"
    INCOMPLETE = "incomplete"


class Input(enum.StrEnum):
    """What can happen to a request, derived from capture records by :class:`Tracker`."""

    RESPONSE = "response"  # stream response, no error, final false or absent (text or empty)
    FINAL = "final"  # stream response with final=true and no error
    ERROR = "error"  # stream response with an in-band error, final not true
    ERROR_FINAL = "error_final"  # error and final=true in one response (what Triton sends)
    REPLY = "reply"  # the response of a unary ModelInfer
    HALF_CLOSE = "half_close"  # the client ended its side of the call
    END_OK = "end_ok"
    END_OK_FINAL_DUE = "end_ok_final_due"  # OK end of a stream request that enabled empty finals
    END_ERROR = "end_error"
    END_CLIENT_CANCEL = "end_client_cancel"
    END_DEADLINE = "end_deadline"
    END_CLIENT_DISCONNECT = "end_client_disconnect"
    END_UPSTREAM_DISCONNECT = "end_upstream_disconnect"
    END_PROXY_SHUTDOWN = "end_proxy_shutdown"
    CAPTURE_ENDED = "capture_ended"  # the capture ended while the call was still open


S, In = State, Input

RESPONSE_INPUTS = frozenset({In.RESPONSE, In.FINAL, In.ERROR, In.ERROR_FINAL, In.REPLY})
END_INPUTS = frozenset(
    {
        In.END_OK,
        In.END_OK_FINAL_DUE,
        In.END_ERROR,
        In.END_CLIENT_CANCEL,
        In.END_DEADLINE,
        In.END_CLIENT_DISCONNECT,
        In.END_UPSTREAM_DISCONNECT,
        In.END_PROXY_SHUTDOWN,
        In.CAPTURE_ENDED,
    }
)
#: States in which the request still waits for something from the server.
OPEN = frozenset({S.SENT, S.RECEIVING, S.ERROR_RECEIVED, S.REPLIED})
#: States a request can be left in once its call is over (what ``check`` reports).
TERMINAL = frozenset(
    {S.COMPLETED, S.CANCELLED, S.DEADLINE, S.DISCONNECTED, S.INTERRUPTED, S.ERROR, S.UNCONFIRMED, S.INCOMPLETE}
)

#: Input of the call's end by ``cause`` (``ok`` is split by whether a final flag was due).
END_BY_CAUSE: dict[str, Input] = {
    "ok": In.END_OK,
    "error": In.END_ERROR,
    "client_cancel": In.END_CLIENT_CANCEL,
    "deadline": In.END_DEADLINE,
    "client_disconnect": In.END_CLIENT_DISCONNECT,
    "upstream_disconnect": In.END_UPSTREAM_DISCONNECT,
    "proxy_shutdown": In.END_PROXY_SHUTDOWN,
    # The proxy's own failure: the client got INTERNAL from the proxy; not a success either.
    "proxy_error": In.END_ERROR,
}

# What an open request becomes when its call ends by each cause (an OK end is per state).
_ENDS_OPEN: dict[Input, State] = {
    In.END_ERROR: S.ERROR,
    In.END_CLIENT_CANCEL: S.CANCELLED,
    In.END_DEADLINE: S.DEADLINE,
    In.END_CLIENT_DISCONNECT: S.DISCONNECTED,
    In.END_UPSTREAM_DISCONNECT: S.DISCONNECTED,
    In.END_PROXY_SHUTDOWN: S.INTERRUPTED,
    In.CAPTURE_ENDED: S.INCOMPLETE,
}


def _table() -> dict[tuple[State, Input], State]:
    t: dict[tuple[State, Input], State] = {
        (S.SENT, In.RESPONSE): S.RECEIVING,
        (S.SENT, In.FINAL): S.FINAL_RECEIVED,
        (S.SENT, In.ERROR): S.ERROR_RECEIVED,
        (S.SENT, In.ERROR_FINAL): S.ERROR,
        (S.SENT, In.REPLY): S.REPLIED,
        (S.RECEIVING, In.RESPONSE): S.RECEIVING,
        (S.RECEIVING, In.FINAL): S.FINAL_RECEIVED,
        (S.RECEIVING, In.ERROR): S.ERROR_RECEIVED,
        (S.RECEIVING, In.ERROR_FINAL): S.ERROR,
        # After an in-band error more responses may come until the final flag; the error stays.
        (S.ERROR_RECEIVED, In.RESPONSE): S.ERROR_RECEIVED,
        (S.ERROR_RECEIVED, In.ERROR): S.ERROR_RECEIVED,
        (S.ERROR_RECEIVED, In.FINAL): S.ERROR,
        (S.ERROR_RECEIVED, In.ERROR_FINAL): S.ERROR,
        (S.SENT, In.END_OK): S.UNCONFIRMED,
        (S.RECEIVING, In.END_OK): S.UNCONFIRMED,
        (S.REPLIED, In.END_OK): S.COMPLETED,
        (S.REPLIED, In.END_OK_FINAL_DUE): S.COMPLETED,
        (S.ERROR_RECEIVED, In.END_OK): S.ERROR,
    }
    for state in (S.SENT, S.RECEIVING, S.REPLIED):
        for inp, target in _ENDS_OPEN.items():
            t[state, inp] = target
    for inp in END_INPUTS:
        t[S.FINAL_RECEIVED, inp] = S.COMPLETED
        t[S.ERROR, inp] = S.ERROR
        if inp is not In.END_OK_FINAL_DUE:
            t[S.ERROR_RECEIVED, inp] = S.ERROR
    # The client's half-close says nothing about any request's completion.
    for state in State:
        t[state, In.HALF_CLOSE] = state
    return t


_TRANSITIONS: dict[tuple[State, Input], State] = _table()

#: Where a disallowed input still moves the request (after recording the violation): a call that
#: ended must leave no request open. Every other disallowed input leaves the state unchanged.
_FALLBACK: dict[tuple[State, Input], State] = {
    (S.SENT, In.END_OK_FINAL_DUE): S.INCOMPLETE,
    (S.RECEIVING, In.END_OK_FINAL_DUE): S.INCOMPLETE,
    (S.ERROR_RECEIVED, In.END_OK_FINAL_DUE): S.ERROR,
}


def violation_name(state: State, inp: Input) -> str:
    """The name of the violation recorded when ``inp`` is not allowed in ``state``."""
    if inp is In.END_OK_FINAL_DUE and state in OPEN:
        return "missing_final"
    if inp in RESPONSE_INPUTS:
        if state in (S.FINAL_RECEIVED, S.COMPLETED, S.ERROR, S.REPLIED):
            return "response_after_final"
        if state in TERMINAL:
            return "response_after_end"
        return f"unexpected_{inp.value}"
    if inp in END_INPUTS and state in TERMINAL:
        return "end_after_end"
    return f"unexpected_{inp.value}_in_{state.value}"  # pragma: no cover - the table covers the rest


#: Every (state, input) pair, for the exhaustive tests.
ALL_PAIRS: tuple[tuple[State, Input], ...] = tuple(itertools.product(State, Input))


@dataclass(frozen=True, kw_only=True, slots=True)
class Violation:
    """A protocol violation, with the capture record (``seq``) that revealed it."""

    name: str
    seq: int | None
    detail: str


class RequestMachine:
    """The state of one request; :meth:`feed` applies one input and never raises."""

    __slots__ = ("state", "violations")

    def __init__(self, state: State = State.SENT) -> None:
        self.state = state
        self.violations: list[Violation] = []

    def feed(self, inp: Input, seq: int | None = None) -> bool:
        """Apply ``inp``; returns False (and records a violation) when the table does not allow it."""
        target = _TRANSITIONS.get((self.state, inp))
        if target is not None:
            self.state = target
            return True
        name = violation_name(self.state, inp)
        self.violations.append(Violation(name=name, seq=seq, detail=f"{inp.value} in state {self.state.value}"))
        self.state = _FALLBACK.get((self.state, inp), self.state)
        return False

    def add_violation(self, name: str, seq: int | None, detail: str) -> None:
        """Record a violation found outside the table (e.g. ``restarted_after_cancel``)."""
        self.violations.append(Violation(name=name, seq=seq, detail=detail))


# -- from capture records to request machines ----------------------------------------------------


#: A capture: path(s) of files/directories, or records (with or without their ``seq``).
CaptureSource = PathLike | Iterable[PathLike] | Iterable[ev.Record] | Iterable[tuple[int, ev.Record]]


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestOutcome:
    """What happened to one request, as ``replay check`` reports it."""

    call: str
    kind: str  # "stream" or "unary"
    model: str | None
    request_id: str | None
    occurrence: int  # 0 for the first request with this id on the call, 1 for the next...
    seq: int  # the request's record
    outcome: str  # a terminal State value
    responses: int  # every response attributed to the request, the empty final included
    text_responses: int  # those with outputs
    final: bool | None  # streams: final=true seen; unary: the raw flag of the response (or null)
    first_response_ms: float | None
    duration_ms: float | None  # request to final response, or to the call's end; null if never ended
    status: str | None  # the call's gRPC status name, null when the capture ended first
    error: str | None  # the in-band error message, else the call's details when its status is not OK
    violations: tuple[Violation, ...]

    def to_json(self) -> dict[str, Any]:
        """The entry of ``check --json``'s ``requests`` list."""
        return {
            "call": self.call,
            "kind": self.kind,
            "model": self.model,
            "request_id": self.request_id,
            "occurrence": self.occurrence,
            "seq": self.seq,
            "outcome": self.outcome,
            "responses": self.responses,
            "text_responses": self.text_responses,
            "final": self.final,
            "first_response_ms": self.first_response_ms,
            "duration_ms": self.duration_ms,
            "status": self.status,
            "error": self.error,
            "violations": [{"violation": v.name, "seq": v.seq, "detail": v.detail} for v in self.violations],
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Unattributable:
    """A response no request can be given: listed, never merged."""

    call: str
    seq: int
    request_id: str | None
    reason: str  # ambiguous | unknown_id | empty_id | undecoded | no_request
    final: bool | None
    error: str | None

    def to_json(self) -> dict[str, Any]:
        """The entry of ``check --json``'s ``unattributable`` list."""
        return {
            "call": self.call,
            "seq": self.seq,
            "request_id": self.request_id,
            "reason": self.reason,
            "final": self.final,
            "error": self.error,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class CallOutcome:
    """How one RPC ended (inference or not)."""

    call: str
    method: str
    status: str | None
    cause: str | None
    details: str | None
    duration_ms: float | None
    requests: int


@dataclass(frozen=True, kw_only=True)
class TrackResult:
    """Everything ``replay check`` reports about a capture."""

    requests: tuple[RequestOutcome, ...]
    unattributable: tuple[Unattributable, ...]
    calls: tuple[CallOutcome, ...]
    gaps: tuple[Gap, ...]
    warnings: tuple[str, ...]
    records: int
    captures: int
    unlabelled_messages: int = 0

    @property
    def violations(self) -> list[tuple[RequestOutcome, Violation]]:
        """Every violation with its request."""
        return [(r, v) for r in self.requests for v in r.violations]

    @property
    def ok(self) -> bool:
        """No violation and every response attributed (``check``'s exit 0)."""
        return not self.unattributable and not any(r.violations for r in self.requests)

    def summary(self) -> dict[str, Any]:
        """Counts for the ``summary`` object of ``check --json``."""
        outcomes: dict[str, int] = {}
        for r in self.requests:
            outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
        names: dict[str, int] = {}
        for _, v in self.violations:
            names[v.name] = names.get(v.name, 0) + 1
        methods: dict[str, int] = {}
        for c in self.calls:
            short = short_method(c.method)
            methods[short] = methods.get(short, 0) + 1
        causes: dict[str, int] = {}
        for c in self.calls:
            key = c.cause or "open_at_capture_end"
            causes[key] = causes.get(key, 0) + 1
        return {
            "records": self.records,
            "captures": self.captures,
            "complete": not any(g.kind in ("missing_capture_end", "missing_file") for g in self.gaps),
            "calls": len(self.calls),
            "calls_by_method": methods,
            "calls_by_cause": causes,
            "requests": len(self.requests),
            "outcomes": outcomes,
            "violations": sum(names.values()),
            "violations_by_name": names,
            "unattributable": len(self.unattributable),
            "unlabelled_messages": self.unlabelled_messages,
            "gaps": len(self.gaps),
            "warnings": list(self.warnings),
        }

    def to_json(self) -> dict[str, Any]:
        """The ``check --json`` document."""
        return {
            "requests": [r.to_json() for r in self.requests],
            "unattributable": [u.to_json() for u in self.unattributable],
            "gaps": [g.to_json() for g in self.gaps],
            "summary": self.summary(),
        }


class _Request:
    __slots__ = (
        "call",
        "error",
        "final",
        "final_due",
        "machine",
        "model",
        "occurrence",
        "request_id",
        "responses",
        "seq",
        "sha",
        "t_done",
        "t_first",
        "t_sent",
        "text",
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
        self.final: bool | None = None if call.unary else False
        self.t_first: int | None = None
        self.t_done: int | None = None
        self.error: str | None = None
        self.sha = rec.payload_sha256


class _Call:
    __slots__ = (
        "by_id",
        "cause",
        "details",
        "duration_ms",
        "ended",
        "id",
        "method",
        "requests",
        "status",
        "stream",
        "t_start",
        "unary",
    )  # fmt: skip

    def __init__(self, call_id: str, method: str, t_start: int) -> None:
        self.id = call_id
        self.method = method
        self.unary = method == INFER
        self.stream = method == STREAM_INFER
        self.t_start = t_start
        self.requests: list[_Request] = []
        self.by_id: dict[str, list[_Request]] = {}
        self.ended = False
        self.status: str | None = None
        self.cause: str | None = None
        self.details: str | None = None
        self.duration_ms: float | None = None


def _ms(start: int | None, end: int | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start) / 1e6, 3)


#: ``on_response(call, request_seq, seq, record)``: a response was attributed to the request whose
#: request record is ``request_seq`` on ``call`` (the report draws it on that request's lane).
ResponseObserver = Callable[[str, int, int, ev.MessageSeen], None]


class Tracker:
    """Feeds every request's state machine from capture records; never awaits, never raises."""

    def __init__(self, on_response: ResponseObserver | None = None) -> None:
        self._on_response = on_response
        self._calls: dict[str, _Call] = {}
        self._order: list[_Call] = []
        self._unattributable: list[Unattributable] = []
        self._warnings: list[str] = []
        self._orphans: set[str] = set()
        self._captures = 0
        self._prefix = ""
        self._cancelled_keys: dict[tuple[str | None, str], str] = {}
        self._cancelled_hashes: dict[str, str] = {}
        self._unlabelled = 0
        self._records = 0

    # -- feeding ---------------------------------------------------------------------------------

    def feed(self, seq: int, record: ev.Record) -> None:
        """One capture record, in capture order."""
        self._records += 1
        if isinstance(record, ev.MessageSeen):
            self._message(seq, record)
        elif isinstance(record, ev.CallStarted):
            cid = self._prefix + record.call
            if cid in self._calls:
                self._warnings.append(f"seq {seq}: call {cid} started twice; the second start is ignored")
                return
            call = _Call(cid, record.method, record.t_ns)
            self._calls[cid] = call
            self._order.append(call)
        elif isinstance(record, ev.HalfClosed):
            known = self._call(record.call, seq)
            if known is not None:
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
                    self._end(known, record.cause, seq, record.t_ns)
                known.status, known.details, known.duration_ms = record.status, record.details, record.duration_ms
        elif isinstance(record, ev.CaptureStarted):
            if record.file_index == 0:
                if self._captures:
                    # A second capture in the same run: its call ids restart, so keep them apart.
                    self._capture_over(seq)
                    self._prefix = f"{self._captures + 1}:"
                self._captures += 1

    def qualified(self, raw_id: str) -> str:
        """The call id as reported (a second capture in one run prefixes its ids, see :meth:`feed`)."""
        return self._prefix + raw_id

    def _call(self, raw_id: str, seq: int) -> _Call | None:
        cid = self._prefix + raw_id
        call = self._calls.get(cid)
        if call is None and cid not in self._orphans:
            self._orphans.add(cid)
            self._warnings.append(f"seq {seq}: records of call {cid} without its call_start (lost in a gap?): ignored")
        return call

    def _message(self, seq: int, rec: ev.MessageSeen) -> None:
        call = self._call(rec.call, seq)
        if call is None or not (call.unary or call.stream):
            return
        if call.ended:
            self._warnings.append(f"seq {seq}: message on call {call.id} after its end: ignored")
            return
        if rec.dir == "c2s":
            self._sent(call, seq, rec)
        else:
            self._received(call, seq, rec)

    def _sent(self, call: _Call, seq: int, rec: ev.MessageSeen) -> None:
        if rec.request_id is None:
            if rec.decode_error is not None:
                self._warnings.append(
                    f"seq {seq}: request on call {call.id} not decoded ({rec.decode_error}): not tracked"
                )
            else:
                self._unlabelled += 1
            return
        if call.unary and call.requests:
            self._warnings.append(f"seq {seq}: second request message on unary call {call.id}: ignored")
            return
        same = call.by_id.setdefault(rec.request_id, [])
        r = _Request(call, rec, seq, len(same))
        same.append(r)
        call.requests.append(r)
        where = None
        if rec.request_id:
            where = self._cancelled_keys.get((rec.model, rec.request_id))
        if where is None and rec.payload_sha256 is not None:
            where = self._cancelled_hashes.get(rec.payload_sha256)
        if where is not None:
            r.machine.add_violation(
                "restarted_after_cancel",
                seq,
                f"request {rec.request_id!r} of model {rec.model!r} was cancelled before ({where})",
            )

    def _received(self, call: _Call, seq: int, rec: ev.MessageSeen) -> None:
        if rec.request_id is None:
            if rec.decode_error is not None:
                self._unattributed(call, seq, rec, "undecoded")
            else:
                self._unlabelled += 1
            return
        target: _Request | None
        if call.unary:
            target = call.requests[0] if call.requests else None
            if target is None:
                self._unattributed(call, seq, rec, "no_request")
                return
            inp = Input.REPLY
        else:
            same = call.by_id.get(rec.request_id, [])
            in_flight = [r for r in same if r.machine.state in OPEN]
            if len(in_flight) > 1:
                self._unattributed(call, seq, rec, "ambiguous")
                return
            if in_flight:
                target = in_flight[0]
            elif same:
                target = same[-1]
            else:
                self._unattributed(call, seq, rec, "empty_id" if rec.request_id == "" else "unknown_id")
                return
            err, fin = bool(rec.error), rec.final is True
            inp = Input.ERROR_FINAL if err and fin else Input.ERROR if err else Input.FINAL if fin else Input.RESPONSE
        target.machine.feed(inp, seq)
        target.responses += 1
        if rec.outputs:
            target.text += 1
        if target.t_first is None:
            target.t_first = rec.t_ns
        if call.unary:
            target.final = rec.final
        elif rec.final is True:
            target.final = True
        if rec.error and target.error is None:
            target.error = rec.error
        if target.t_done is None and target.machine.state in (State.FINAL_RECEIVED, State.ERROR):
            target.t_done = rec.t_ns
        if self._on_response is not None:
            self._on_response(call.id, target.seq, seq, rec)

    def _unattributed(self, call: _Call, seq: int, rec: ev.MessageSeen, reason: str) -> None:
        self._unattributable.append(
            Unattributable(call=call.id, seq=seq, request_id=rec.request_id, reason=reason, final=rec.final,
                           error=rec.error)
        )  # fmt: skip

    def _end(self, call: _Call, cause: str, seq: int, t_ns: int | None) -> None:
        call.ended = True
        call.cause = cause
        base = END_BY_CAUSE.get(cause, Input.END_ERROR)
        for r in call.requests:
            inp = base
            if inp is Input.END_OK and call.stream and r.final_due:
                inp = Input.END_OK_FINAL_DUE
            r.machine.feed(inp, seq)
            if r.t_done is None and t_ns is not None:
                r.t_done = t_ns
            if r.machine.state is State.CANCELLED:
                where = f"call {call.id}, seq {r.seq}"
                if r.request_id:
                    self._cancelled_keys[r.model, r.request_id] = where
                if r.sha is not None:
                    self._cancelled_hashes[r.sha] = where

    def _capture_over(self, seq: int | None) -> None:
        for call in self._order:
            if not call.ended and (call.unary or call.stream):
                call.ended = True
                for r in call.requests:
                    r.machine.feed(Input.CAPTURE_ENDED, seq)

    # -- result ----------------------------------------------------------------------------------

    def finish(self, gaps: Iterable[Gap] = (), warnings: Iterable[str] = ()) -> TrackResult:
        """End of the capture: requests still open are ``incomplete``; the outcomes."""
        self._capture_over(None)
        requests: list[RequestOutcome] = []
        calls: list[CallOutcome] = []
        for call in self._order:
            for r in call.requests:
                error = r.error
                state = r.machine.state
                if error is None and state is not State.COMPLETED and call.status not in (None, "OK"):
                    error = call.details or call.status
                out = RequestOutcome(
                    call=call.id, kind="unary" if call.unary else "stream", model=r.model, request_id=r.request_id,
                    occurrence=r.occurrence, seq=r.seq, outcome=state.value, responses=r.responses,
                    text_responses=r.text, final=r.final, first_response_ms=_ms(r.t_sent, r.t_first),
                    duration_ms=_ms(r.t_sent, r.t_done), status=call.status, error=error,
                    violations=tuple(r.machine.violations),
                )  # fmt: skip
                requests.append(out)
            calls.append(
                CallOutcome(call=call.id, method=call.method, status=call.status, cause=call.cause,
                            details=call.details, duration_ms=call.duration_ms, requests=len(call.requests))
            )  # fmt: skip
        warns = [*warnings, *self._warnings]
        if self._unlabelled:
            warns.append(
                f"{self._unlabelled} inference message(s) carry no Triton labels (compressed, cut short or undecodable: see decode_error): "
                "they are not tracked per request"
            )
        return TrackResult(
            requests=tuple(requests), unattributable=tuple(self._unattributable), calls=tuple(calls),
            gaps=tuple(gaps), warnings=tuple(warns), records=self._records, captures=self._captures,
            unlabelled_messages=self._unlabelled,
        )  # fmt: skip


def _records(items: Iterable[Any]) -> Iterator[tuple[int, ev.Record]]:
    for i, item in enumerate(items):
        if isinstance(item, tuple):
            yield item[0], item[1]
        else:
            yield i, item


def open_source(capture: CaptureSource) -> tuple[Iterable[tuple[int, ev.Record]], Any]:
    """``(records, reader-or-None)`` for any :data:`CaptureSource` (paths are read lazily)."""
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
    return _records(rest), None


def track(capture: CaptureSource) -> TrackResult:
    """Per-request outcomes of a capture (what ``replay check`` reports).

    ``capture``: a file or directory path, several of them, or an iterable of records (each a
    :mod:`replay.capture.events` record or a ``(seq, record)`` pair). Raises
    :class:`~replay.errors.CaptureError` when files are unreadable.
    """
    records, reader = open_source(capture)
    tracker = Tracker()
    if reader is not None:
        for seq, record in records:
            tracker.feed(seq, record)
        return tracker.finish(reader.gaps, reader.warnings)
    gaps: list[Gap] = []
    watch = SeqWatch()
    for seq, record in records:
        if isinstance(record, ev.CaptureStarted) and record.file_index == 0 and watch.started:
            watch.end()
            gaps.extend(watch.gaps)
            watch = SeqWatch()
        if watch.record(seq, record, "<records>", None):
            continue
        tracker.feed(seq, record)
    watch.end()
    return tracker.finish([*gaps, *watch.gaps])

"""What ``replay check`` reports: per-request and per-call outcomes, unattributable responses.

Plain frozen values built by :class:`~replay.machine.tracker.Tracker`; ``to_json`` gives ``check --json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from replay.capture.events import HALF_CLOSE_ANSWERED
from replay.capture.holes import Gap
from replay.capture.methods import protocol, short_method
from replay.frozen import building
from replay.machine.table import State, Violation

#: How records lost while a call was open (a hole, :meth:`~replay.machine.tracker.Tracker.lost`) touch
#: one of its requests: it was open then; it had its final already (its outcome stands); it was
#: sent after (only its violations are in doubt).
LOST_OPEN, LOST_SETTLED, LOST_BEFORE = "open", "settled", "before"

#: The outcome of a request whose records may be among those lost: not a state of the request's
#: machine, a verdict on the evidence (``recorded_as`` keeps what the records show).
UNKNOWN = "unknown"


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupOutcome:
    """Requests of one call that were in flight together with one id (most often ``""``): the wire
    shows their responses and finals, not which request each belongs to, so they are counted here."""

    first_seq: int  # the record of the group's first request (the group's name, with the call)
    request_id: str
    requests: int
    responses: int  # responses received while two or more of the group were in flight
    text_responses: int
    #: How the group's requests ended (groups.ended): outcome -> requests; ``"<outcome> or error"``
    #: counts requests any of which an error without the final flag may have ended.
    ended: dict[str, int]
    #: Error responses without the final flag its requests got: the group's, and each request's own
    #: from while it was alone with its id.
    errors_without_final: int
    per_request: bool  # one plain outcome in `ended`: each request's outcome is exact
    #: From the group's first request to the first of ``responses`` (None: none came).
    first_response_ms: float | None = None
    #: The distinct error messages the shared group got, in text order (at most 16, the first in that
    #: order): which came first, and so which one its rows show, is the server's timing.
    error_texts: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The ``group`` object of a request entry in ``check --json``."""
        return {
            "first_seq": self.first_seq,
            "request_id": self.request_id,
            "requests": self.requests,
            "responses": self.responses,
            "text_responses": self.text_responses,
            "ended": dict(self.ended),
            "errors_without_final": self.errors_without_final,
            "per_request": self.per_request,
            "first_response_ms": self.first_response_ms,
            "error_texts": list(self.error_texts),
        }

    def describe(self) -> str:
        """``group of 10 (ended: 7 completed, 3 error)`` as people read it (the responses are the table's column)."""
        ended = ", ".join(f"{n} {k}" for k, n in self.ended.items() if n) or "none"
        extra = f"; {self.errors_without_final} error(s) without final" if self.errors_without_final else ""
        return f"group of {self.requests} (ended: {ended}{extra})"


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestOutcome:
    """What happened to one request, as ``replay check`` reports it."""

    call: str
    kind: str  # "stream" or "unary"
    model: str | None
    request_id: str | None
    occurrence: int  # 0 for the first request with this id on the call, 1 for the next...
    seq: int  # the request's record
    outcome: str  # a terminal State value, or UNKNOWN when records lost on the call may have changed it
    responses: int  # every response attributed to the request, the empty final included
    text_responses: int  # those with outputs
    final: bool | None  # streams: final=true seen; unary: the raw flag of the response (or null)
    first_response_ms: float | None
    duration_ms: float | None  # request to final response (a shared id group's: its last), or to the call's end; null if never ended
    #: The call's status as recorded: a gRPC status name, or on HTTP the response's code (``"200"``) or,
    #: when no response head reached the client, the gRPC-style name; null when the capture ended first.
    status: str | None
    error: str | None  # the in-band error message, else the call's details when its status is not OK
    violations: tuple[Violation, ...]
    #: The request's id group when several with its id were in flight together, else None.
    group: GroupOutcome | None = None
    #: Facts worth a note that are not violations (``missing_final``: an error without a final flag).
    notes: tuple[str, ...] = ()
    #: The call's method as recorded (a gRPC path or an HTTP request line).
    method: str = ""
    #: When ``outcome`` is ``unknown``: the outcome its records show (records of its call were lost).
    recorded_as: str | None = None
    #: Violations seen after records of its call were lost: the lost records may explain them (a
    #: lost final, a lost request's responses), so they are shown and not counted against the server.
    violations_after_loss: tuple[Violation, ...] = ()
    #: From the request to the last of ``responses`` (None: none came): with ``first_response_ms`` and
    #: the count, the pace they came at (``diff`` compares counts cut by a client's end by it).
    last_response_ms: float | None = None

    @property
    def as_recorded(self) -> str:
        """The outcome the records show (``recorded_as`` when ``outcome`` is ``unknown``): what ``diff`` compares."""
        return self.outcome if self.recorded_as is None else self.recorded_as

    def to_json(self) -> dict[str, Any]:
        """The entry of ``check --json``'s ``requests`` list."""
        return {
            "call": self.call,
            "protocol": protocol(self.method) if self.method else None,
            "method": short_method(self.method) if self.method else None,
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
            "last_response_ms": self.last_response_ms,
            "duration_ms": self.duration_ms,
            "status": self.status,
            "error": self.error,
            "violations": [{"violation": v.name, "seq": v.seq, "detail": v.detail} for v in self.violations],
            "group": None if self.group is None else self.group.to_json(),
            "notes": list(self.notes),
            "recorded_as": self.recorded_as,
            "violations_after_loss": [
                {"violation": v.name, "seq": v.seq, "detail": v.detail} for v in self.violations_after_loss
            ],
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
    #: Records of its call were lost before it (a lost request may have been its): shown, not counted
    #: against the server.
    after_loss: bool = False

    def to_json(self) -> dict[str, Any]:
        """The entry of ``check --json``'s ``unattributable`` list."""
        return {
            "call": self.call,
            "seq": self.seq,
            "request_id": self.request_id,
            "reason": self.reason,
            "final": self.final,
            "error": self.error,
            "after_loss": self.after_loss,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class ProtocolError:
    """A connection the proxy closed because a peer broke HTTP/2 (a ``protocol_error`` record): not a
    request's violation, an event of the connection (a client that spoke HTTP/1.1, a broken upstream)."""

    seq: int
    conn: str
    side: str  # client | upstream: who broke the protocol
    error: str
    error_code: int
    open_calls: tuple[str, ...]  # each still has its own cancel and call_end

    def to_json(self) -> dict[str, Any]:
        """The entry of ``check --json``'s ``protocol_errors`` list."""
        return {
            "seq": self.seq,
            "conn": self.conn,
            "side": self.side,
            "error": self.error,
            "error_code": self.error_code,
            "open_calls": list(self.open_calls),
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
    #: A readiness, metadata, config or repository call's: the model its request named (recorded since the
    #: proxy labels them; None: another call, or a capture from before).
    model: str | None = None
    #: A ServerLive, ServerReady or ModelReady call's answer (None: another call, no answer, or compressed).
    ready: bool | None = None


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
    protocol_errors: tuple[ProtocolError, ...] = ()
    #: Frames the upstream sent on a call after it had ended it (``late`` records with ``after: end``).
    late_after_end: int = 0

    @property
    def violations(self) -> list[tuple[RequestOutcome, Violation]]:
        """Every violation with its request."""
        return [(r, v) for r in self.requests for v in r.violations]

    @property
    def ok(self) -> bool:
        """No violation, every response attributed, and the upstream kept to HTTP/2 (``check``'s exit 0).

        Requests known only for their id group are not a failure: that ambiguity comes from the
        client's choice of ids (tritonclient's default is ``""``), not from the server.
        """
        return self.clean(sum(len(r.violations) for r in self.requests))

    def clean(self, violations: int) -> bool:
        """``ok`` given the count of violations (a sink may hold the requests): what ``check``'s exit code says.

        A client that broke HTTP/2 (e.g. spoke HTTP/1.1 to the port) is the client's doing and shown,
        not a failure; the upstream breaking it is the server's, like a violation.
        """
        return (
            not violations
            and not any(not u.after_loss for u in self.unattributable)
            and not any(p.side == "upstream" for p in self.protocol_errors)
        )

    @property
    def group_only(self) -> int:
        """Requests whose own outcome is known only for their id group (a warning, not a failure)."""
        return sum(1 for r in self.requests if r.group is not None and not r.group.per_request)

    def summary(self, tally: Tally | None = None) -> dict[str, Any]:
        """Counts for the ``summary`` object of ``check --json`` (``tally``: of requests not in ``requests``)."""
        if tally is None:
            tally = Tally()
            for r in self.requests:
                tally.add(r)
        outcomes, names = tally.outcomes, tally.violations
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
            "requests": tally.requests,
            "outcomes": outcomes,
            "violations": sum(names.values()),
            "violations_by_name": names,
            "violations_after_loss": tally.after_loss,
            "unattributable": len(self.unattributable),
            "unattributable_after_loss": sum(1 for u in self.unattributable if u.after_loss),
            "groups": len(tally.groups),
            "known_only_for_group": tally.group_only,
            "unlabelled_messages": self.unlabelled_messages,
            "protocol_errors": len(self.protocol_errors),
            "late_after_end": self.late_after_end,
            "gaps": len(self.gaps),
            "warnings": list(self.warnings),
        }

    def to_json(self) -> dict[str, Any]:
        """The ``check --json`` document."""
        return {
            "requests": [r.to_json() for r in self.requests],
            "unattributable": [u.to_json() for u in self.unattributable],
            "protocol_errors": [p.to_json() for p in self.protocol_errors],
            "gaps": [g.to_json() for g in self.gaps],
            "summary": self.summary(),
        }


class RequestSink(Protocol):
    """Where a :class:`~replay.machine.tracker.Tracker` made with a sink puts request outcomes instead of keeping them.

    So that reading a capture keeps memory bounded by the requests in flight (plus the calls), not
    by the capture's size: a request is handed over as soon as its outcome can no longer change
    (:meth:`settled`), before its call's end is known, so with ``status`` None; when the call
    ends (its first ``call_end``, else at ``finish``) the call's status and its remaining requests
    follow (:meth:`call_over`: once per call that had requests, in any call order). A call's
    requests in report order: those settled for it, then those of its ``call_over``; calls in
    ``call_pos`` order.
    """

    def settled(self, call_pos: int, outcome: RequestOutcome) -> None:
        """``outcome`` of a request on the ``call_pos``-th call is final but for ``status`` (the call's, later)."""

    def call_over(self, call_pos: int, status: str | None, outcomes: list[RequestOutcome]) -> None:
        """The ``call_pos``-th call ended with ``status``: its other requests' outcomes."""


class Tally:
    """The request counts of ``check --json``'s summary, added up one outcome at a time."""

    def __init__(self) -> None:
        self.requests = 0
        self.outcomes: dict[str, int] = {}
        self.violations: dict[str, int] = {}
        self.groups: set[tuple[str, int]] = set()
        self.group_only = 0
        self.after_loss = 0  # violations after records of their call were lost (not counted in `violations`)

    def add(self, r: RequestOutcome) -> None:
        """Count one request."""
        self.requests += 1
        self.outcomes[r.outcome] = self.outcomes.get(r.outcome, 0) + 1
        for v in r.violations:
            self.violations[v.name] = self.violations.get(v.name, 0) + 1
        self.after_loss += len(r.violations_after_loss)
        if r.group is not None:
            self.groups.add((r.call, r.group.first_seq))
            if not r.group.per_request:
                self.group_only += 1


def status_ok(status: str, http_status: int | None) -> bool:
    """A call's recorded end status is a success: gRPC ``OK``, or an HTTP response head under 400.

    Success of the *status* only: an HTTP 200 can still carry an error (an error JSON, an error
    event), which the request machine makes an ``error`` outcome.
    """
    return status == "OK" or (http_status is not None and http_status < 400)


def _ms(start: int | None, end: int | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start) / 1e6, 3)


_BuildingRequestOutcome = building(RequestOutcome)
# Named once: `State.X` goes through the enum's metaclass, ~150 ns a lookup, and this runs per request.
_ERROR, _GROUP, _COMPLETED = State.ERROR, State.GROUP, State.COMPLETED


def outcome_of(call: Any, r: Any, state: State) -> RequestOutcome:
    """What ``check`` reports about the tracker's request ``r`` of ``call`` (its ``_Request`` and ``_Call``) in ``state``."""
    error = r.error
    group = r.group.outcome if r.group is not None else None
    if error is None and r.group is not None and (state is _ERROR or state is _GROUP):
        error = r.group.error
    if error is None and state is not _COMPLETED and call.failed:
        error = call.details or call.status
    # An error without the final flag and a clean end: no final seen (see docs/outcomes.md).
    notes = ("missing_final",) if state is _ERROR and r.final is False and call.cause == "ok" else ()
    if state is State.UNCONFIRMED and call.details == HALF_CLOSE_ANSWERED:
        # Answered in full on the wire, but after the client's FIN: it may have closed, never reading it.
        notes = ("client_closed_first",)
    if r.cut:
        notes = (*notes, "event_cut")  # bytes of an event recorded that no client got as one
    if r.resent:
        notes = (*notes, "same_as_cancelled")  # the bytes of a request cancelled on another connection
    outcome, recorded_as = state._value_, None
    violations, after_loss = tuple(r.machine.violations), ()
    if r.hole is not None:
        # Records of its call were lost (Tracker.lost): what came after is not the server's for sure.
        violations, after_loss = violations[: r.hole_from], violations[r.hole_from :]
        # A unary request has one reply and its call one end: both recorded, nothing of it was lost.
        whole = call.kind == "unary" and r.responses and call.cause is not None
        open_then = r.hole == LOST_OPEN and not whole
        # Sent after them into an id group: a lost request with its id may still have been answering,
        # its responses and final counted for the group without breaking any rule.
        grouped = group is not None and group.requests > 1
        if open_then or (r.hole == LOST_BEFORE and (after_loss or grouped)):
            # Open when they were lost (a unary request whose reply and end were recorded is whole), or
            # sent after them and then broke a rule a lost request of its id would explain.
            outcome, recorded_as = UNKNOWN, outcome
    # Built as the non-frozen twin, then made the frozen outcome (replay/frozen.py): one per request,
    # and the frozen __init__ was half of this function's time (issue 15).
    out = _BuildingRequestOutcome(
        call=call.id, kind=call.kind, model=r.model, request_id=r.request_id,
        occurrence=r.occurrence, seq=r.seq, outcome=outcome, responses=r.responses,
        text_responses=r.text, final=r.final, first_response_ms=_ms(r.t_sent, r.t_first),
        duration_ms=_ms(r.t_sent, r.t_done), status=call.status, error=error,
        violations=violations, group=group, notes=notes, method=call.method, recorded_as=recorded_as,
        violations_after_loss=after_loss,
        last_response_ms=_ms(r.t_sent, r.t_last),
    )  # fmt: skip
    out.__class__ = RequestOutcome
    return out  # type: ignore[no-any-return]

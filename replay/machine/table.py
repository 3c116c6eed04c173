"""The reference client's view of one Triton request: a state machine written as a table.

One :class:`RequestMachine` per request identity (call + request id + occurrence). It never awaits
and never raises: :class:`Tracker` feeds it :class:`Input` values derived from capture records,
and an input the table does not allow is *recorded* as a violation.

Domain rules the table encodes (docs/outcomes.md and docs/replay.md's "Request outcomes" repeat them):

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
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass


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
    GROUP = "group"  # one of several requests sharing an id whose ends differed: known only for the group


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
    #: OK end of an HTTP call whose client had sent its FIN before: a client that closed (a timeout, a
    #: cancel: on HTTP closing cancels) and one that only half-closed send the same FIN, so what was
    #: passed on after it may never have been read: nothing after it confirms the request.
    END_OK_AFTER_CLIENT_FIN = "end_ok_after_client_fin"
    END_ERROR = "end_error"
    END_CLIENT_CANCEL = "end_client_cancel"
    END_DEADLINE = "end_deadline"
    END_CLIENT_DISCONNECT = "end_client_disconnect"
    END_UPSTREAM_DISCONNECT = "end_upstream_disconnect"
    END_PROXY_SHUTDOWN = "end_proxy_shutdown"
    CAPTURE_ENDED = "capture_ended"  # the capture ended while the call was still open
    GROUP_MIXED = "group_mixed"  # the request's id group ended in different ways: its own is unknown


S, In = State, Input

RESPONSE_INPUTS = frozenset({In.RESPONSE, In.FINAL, In.ERROR, In.ERROR_FINAL, In.REPLY})
END_INPUTS = frozenset(
    {
        In.END_OK,
        In.END_OK_FINAL_DUE,
        In.END_OK_AFTER_CLIENT_FIN,
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
    {S.COMPLETED, S.CANCELLED, S.DEADLINE, S.DISCONNECTED, S.INTERRUPTED, S.ERROR, S.UNCONFIRMED, S.INCOMPLETE,
     S.GROUP}
)  # fmt: skip

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
        # The reply or the last event came after the client's FIN: passed on, its reading unconfirmed.
        (S.SENT, In.END_OK_AFTER_CLIENT_FIN): S.UNCONFIRMED,
        (S.RECEIVING, In.END_OK_AFTER_CLIENT_FIN): S.UNCONFIRMED,
        (S.REPLIED, In.END_OK_AFTER_CLIENT_FIN): S.UNCONFIRMED,
    }
    for state in (S.SENT, S.RECEIVING, S.REPLIED):
        for inp, target in _ENDS_OPEN.items():
            t[state, inp] = target
    # A request of an id group (several in flight with one id) whose members ended differently.
    for state in (S.SENT, S.RECEIVING, S.ERROR_RECEIVED):
        t[state, In.GROUP_MIXED] = S.GROUP
    for inp in END_INPUTS:
        # The group's own missing finals are counted on the group (the wire cannot say whose).
        t[S.GROUP, inp] = S.GROUP
        t[S.FINAL_RECEIVED, inp] = S.UNCONFIRMED if inp is In.END_OK_AFTER_CLIENT_FIN else S.COMPLETED
        t[S.ERROR, inp] = S.ERROR
        if inp is not In.END_OK_FINAL_DUE:
            t[S.ERROR_RECEIVED, inp] = S.ERROR
    # The client's half-close says nothing about any request's completion.
    for state in State:
        t[state, In.HALF_CLOSE] = state
    return t


_TRANSITIONS: dict[tuple[State, Input], State] = _table()
#: States a plain stream response (no error, no final) leaves as they are, without a violation:
#: the tracker's hot path skips the table there (issue 15). None of them is done (a done state takes
#: no response), so such a response never ends a request either.
KEPT_BY_RESPONSE = frozenset(s for s in State if _TRANSITIONS.get((s, In.RESPONSE)) is s)

#: Where a disallowed input still moves the request (after recording the violation): a call that
#: ended must leave no request open. Every other disallowed input leaves the state unchanged.
_FALLBACK: dict[tuple[State, Input], State] = {
    (S.SENT, In.END_OK_FINAL_DUE): S.INCOMPLETE,
    (S.RECEIVING, In.END_OK_FINAL_DUE): S.INCOMPLETE,
    (S.ERROR_RECEIVED, In.END_OK_FINAL_DUE): S.ERROR,
}


def end_of_open(end: Input) -> State:
    """What a request still waiting for its first response becomes when its call ends with ``end``.

    The table's own answer, the fallback included: an id group (groups.py) counts its requests
    left open at the call's end with it, so the two never disagree.
    """
    return _TRANSITIONS.get((S.SENT, end)) or _FALLBACK.get((S.SENT, end), S.INCOMPLETE)


def violation_name(state: State, inp: Input) -> str:
    """The name of the violation recorded when ``inp`` is not allowed in ``state``."""
    if inp is In.END_OK_FINAL_DUE and state in OPEN:
        return "missing_final"
    if inp in RESPONSE_INPUTS:
        if state in (S.FINAL_RECEIVED, S.COMPLETED, S.ERROR, S.REPLIED, S.GROUP):
            return "response_after_final"
        if state in TERMINAL:
            return "response_after_end"
        return f"unexpected_{inp.value}"
    if inp in END_INPUTS and state in TERMINAL:
        return "end_after_end"
    if inp is In.GROUP_MIXED:
        return "group_after_end"
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

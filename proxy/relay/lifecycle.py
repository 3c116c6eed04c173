"""A relayed connection's lifecycle: one state per side, moved only by this module's tables.

The protocol core (:mod:`proxy.relay.core`) keeps one :class:`Upstream` and one :class:`Client`
state and changes them only through :func:`upstream_after` and :func:`client_after`; every
(state, input) pair is either a transition of the table or an input the state ignores, and
``tests/proxy/relay/test_lifecycle.py`` checks every pair, as ``replay/machine/table.py``'s
tests do for requests. What the core may do in a state (write to a side, forward a cancel,
take a new call) is read from the state, never from a combination of flags.

Upstream (the connection the proxy opens to Triton)::

    CONNECTING --connected--> OPEN --lost--> LOST
        |                      |  \\--violation--> BROKEN --lost--> LOST
        |                      |   \\--error_goaway--> ENDING --lost--> LOST   (ENDING --violation--> BROKEN)
        |                      \\--lost_early--> REFUSING          (no call yet: every call UNAVAILABLE)
        \\--connect_failed--> REFUSING                              (unreachable: every call UNAVAILABLE)
    BROKEN --lost_early--> REFUSING

Client (the connection a gRPC client opened to the proxy)::

    OPEN --goaway--> GOAWAY --close--> CLOSING --lost--> LOST
      \\-----close-------------------^   any --lost--> LOST

``GOAWAY``: the client was told to open no new calls (by the proxy, or the upstream's GOAWAY passed
on); open calls go on. ``CLOSING``: the proxy closed it (its violation, or the linger after its last
call); nothing more is written to it or read from it, and its loss is still to come.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import TypeVar


class Upstream(enum.Enum):
    """Where the upstream connection stands."""

    #: The shell is connecting; the client's reads are held until it is done.
    CONNECTING = "connecting"
    #: Connected: frames pass both ways.
    OPEN = "open"
    #: It broke HTTP/2 and the proxy closed it; its loss is still to come. Nothing more to or from it.
    BROKEN = "broken"
    #: It sent GOAWAY with an error code, and closes the connection next (RFC 9113 5.4.1): what it sends
    #: until then (gRPC C-core: each open call's status) still goes to the client; nothing more goes to it.
    ENDING = "ending"
    #: Gone. Nothing more to or from it.
    LOST = "lost"
    #: Unreachable, or gone before any call: the proxy answers every call itself (UNAVAILABLE).
    REFUSING = "refusing"


class UpstreamInput(enum.Enum):
    """What can happen to the upstream connection."""

    CONNECTED = "connected"
    CONNECT_FAILED = "connect_failed"
    VIOLATION = "violation"  # its frames broke HTTP/2: the proxy closes it
    ERROR_GOAWAY = "error_goaway"  # it sent GOAWAY with an error code
    LOST = "lost"  # its connection ended, calls were opened (or it spoke HTTP/2 and closed cleanly)
    LOST_EARLY = "lost_early"  # its connection ended before any call, and a new one would meet the same


class Client(enum.Enum):
    """Where the client connection stands."""

    OPEN = "open"
    #: Told to open no new calls (GOAWAY from the proxy or passed on); calls in flight go on.
    GOAWAY = "goaway"
    #: Closed by the proxy; its loss is still to come. Nothing more to or from it.
    CLOSING = "closing"
    LOST = "lost"


class ClientInput(enum.Enum):
    """What can happen to the client connection."""

    GOAWAY = "goaway"
    CLOSE = "close"  # the proxy closes it (its violation, the linger after its last call)
    LOST = "lost"


U, UI, C, CI = Upstream, UpstreamInput, Client, ClientInput

UPSTREAM_TABLE: dict[tuple[Upstream, UpstreamInput], Upstream] = {
    (U.CONNECTING, UI.CONNECTED): U.OPEN,
    (U.CONNECTING, UI.CONNECT_FAILED): U.REFUSING,
    (U.OPEN, UI.VIOLATION): U.BROKEN,
    (U.OPEN, UI.ERROR_GOAWAY): U.ENDING,
    (U.ENDING, UI.LOST): U.LOST,
    (U.ENDING, UI.VIOLATION): U.BROKEN,
    (U.OPEN, UI.LOST): U.LOST,
    (U.OPEN, UI.LOST_EARLY): U.REFUSING,
    (U.BROKEN, UI.LOST): U.LOST,
    # It broke HTTP/2 before the client's first call: the calls get the reason, not a GOAWAY.
    (U.BROKEN, UI.LOST_EARLY): U.REFUSING,
}

#: Inputs a state takes without changing (anything else is a bug of the core: it raises).
UPSTREAM_IGNORED: frozenset[tuple[Upstream, UpstreamInput]] = frozenset(
    {
        # A connection already gone or refused: its end, and frames that were on the way, change nothing.
        (U.LOST, UI.LOST),
        (U.LOST, UI.LOST_EARLY),
        (U.LOST, UI.VIOLATION),
        (U.BROKEN, UI.VIOLATION),
        # (No error GOAWAY here: the core reads one as the upstream's end only while it is OPEN, so that a
        # second one, or one after a violation, is not a second verdict on the client.)
        (U.REFUSING, UI.LOST),
        (U.REFUSING, UI.LOST_EARLY),
    }
)

CLIENT_TABLE: dict[tuple[Client, ClientInput], Client] = {
    (C.OPEN, CI.GOAWAY): C.GOAWAY,
    (C.OPEN, CI.CLOSE): C.CLOSING,
    (C.OPEN, CI.LOST): C.LOST,
    # A later GOAWAY may only lower the last stream id: the state stays.
    (C.GOAWAY, CI.GOAWAY): C.GOAWAY,
    (C.GOAWAY, CI.CLOSE): C.CLOSING,
    (C.GOAWAY, CI.LOST): C.LOST,
    (C.CLOSING, CI.LOST): C.LOST,
}

CLIENT_IGNORED: frozenset[tuple[Client, ClientInput]] = frozenset(
    {
        # Nothing more is written to a client the proxy closed or lost.
        (C.CLOSING, CI.GOAWAY),
        (C.CLOSING, CI.CLOSE),
        (C.LOST, CI.GOAWAY),
        (C.LOST, CI.CLOSE),
        (C.LOST, CI.LOST),
    }
)

#: Every pair, for the exhaustive tests.
UPSTREAM_PAIRS = tuple(itertools.product(Upstream, UpstreamInput))
CLIENT_PAIRS = tuple(itertools.product(Client, ClientInput))

#: States in which bytes may be written to (and are read from) the side.
UPSTREAM_LIVE = frozenset({U.CONNECTING, U.OPEN})
CLIENT_LIVE = frozenset({C.OPEN, C.GOAWAY})


class LifecycleError(Exception):
    """An input the table neither allows nor ignores: a bug of the core, never of a peer."""


S = TypeVar("S", bound=enum.Enum)
I = TypeVar("I", bound=enum.Enum)  # noqa: E741


def next_state(
    what: str, table: Mapping[tuple[S, I], S], ignored: AbstractSet[tuple[S, I]], state: S, inp: I
) -> S:
    """The one rule of every lifecycle table: ``state`` after ``inp`` is the table's, or ``state`` itself
    for an input it ignores; any other pair is a bug of the core (``what`` names the lifecycle)."""
    got = table.get((state, inp))
    if got is not None:
        return got
    if (state, inp) in ignored:
        return state
    raise LifecycleError(f"{what} input {inp.value} in state {state.value}")


def upstream_after(state: Upstream, inp: UpstreamInput) -> Upstream:
    """The upstream's state after ``inp``."""
    return next_state("upstream", UPSTREAM_TABLE, UPSTREAM_IGNORED, state, inp)


def client_after(state: Client, inp: ClientInput) -> Client:
    """The client's state after ``inp``."""
    return next_state("client", CLIENT_TABLE, CLIENT_IGNORED, state, inp)

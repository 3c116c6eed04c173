"""One HTTP/1.1 exchange's lifecycle: explicit states, moved only by this module's table.

The HTTP/1.1 core (:mod:`proxy.relay.http1`) follows one exchange (request and response: one call)
at a time per connection; pipelined requests wait in h11's buffer until the exchange before them
ends. Every (state, input) pair is either a transition of :data:`EXCHANGE_TABLE` or one the state
ignores; ``tests/proxy/relay/test_http1_lifecycle.py`` checks every pair, as
``tests/proxy/relay/test_lifecycle.py`` does for the connection states (which the HTTP/1.1 core
reuses from :mod:`proxy.relay.lifecycle`)::

    IDLE --request_head--> RECEIVING --request_end--> WAITING --response_head--> RESPONDING
                               |                                                   |
                               \\--response_head--> EARLY --request_end-----------/
                                                      \\--response_end--> ANSWERED
    RESPONDING --response_end--> IDLE         (the call ends; the next request may be read)
    ANSWERED --request_end--> IDLE            (a reply before the request body ended: Triton's early 400)
    any --lost--> CLOSED                      (a side went away or broke HTTP/1.1: the call, if any, ends)

``EARLY``/``ANSWERED``: the upstream answered before the request body ended (a refusal); the call
ends when both have.
"""

from __future__ import annotations

import enum
import itertools

from proxy.relay.lifecycle import next_state


class Exchange(enum.Enum):
    """Where the connection's current exchange stands."""

    #: No request yet (or the last one ended): the next request head starts a call.
    IDLE = "idle"
    #: Request head seen, its body still arriving, no response.
    RECEIVING = "receiving"
    #: Request complete, no response head yet.
    WAITING = "waiting"
    #: Response head seen while the request body still arrives.
    EARLY = "early"
    #: Response complete while the request body still arrives.
    ANSWERED = "answered"
    #: Request complete, response body flowing.
    RESPONDING = "responding"
    #: The connection is over (a side lost, or a protocol error): nothing more is an exchange.
    CLOSED = "closed"


class ExchangeInput(enum.Enum):
    """What can happen to an exchange."""

    REQUEST_HEAD = "request_head"
    REQUEST_END = "request_end"
    RESPONSE_HEAD = "response_head"
    RESPONSE_END = "response_end"
    LOST = "lost"


X, XI = Exchange, ExchangeInput

EXCHANGE_TABLE: dict[tuple[Exchange, ExchangeInput], Exchange] = {
    (X.IDLE, XI.REQUEST_HEAD): X.RECEIVING,
    (X.RECEIVING, XI.REQUEST_END): X.WAITING,
    (X.RECEIVING, XI.RESPONSE_HEAD): X.EARLY,
    (X.WAITING, XI.RESPONSE_HEAD): X.RESPONDING,
    (X.EARLY, XI.REQUEST_END): X.RESPONDING,
    (X.EARLY, XI.RESPONSE_END): X.ANSWERED,
    (X.ANSWERED, XI.REQUEST_END): X.IDLE,
    (X.RESPONDING, XI.RESPONSE_END): X.IDLE,
    (X.IDLE, XI.LOST): X.CLOSED,
    (X.RECEIVING, XI.LOST): X.CLOSED,
    (X.WAITING, XI.LOST): X.CLOSED,
    (X.EARLY, XI.LOST): X.CLOSED,
    (X.ANSWERED, XI.LOST): X.CLOSED,
    (X.RESPONDING, XI.LOST): X.CLOSED,
}

#: Inputs a state takes without changing (anything else is a bug of the core: it raises).
EXCHANGE_IGNORED: frozenset[tuple[Exchange, ExchangeInput]] = frozenset(
    # A closed connection: bytes that were on the way change nothing.
    {(X.CLOSED, i) for i in ExchangeInput}
)

#: Every pair, for the exhaustive test.
EXCHANGE_PAIRS = tuple(itertools.product(Exchange, ExchangeInput))

def exchange_after(state: Exchange, inp: ExchangeInput) -> Exchange:
    """The exchange's state after ``inp``."""
    return next_state("exchange", EXCHANGE_TABLE, EXCHANGE_IGNORED, state, inp)

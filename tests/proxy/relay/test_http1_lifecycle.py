"""Every (state, input) pair of the HTTP/1.1 exchange table: a transition, ignored, or a core bug."""

from __future__ import annotations

import pytest

from proxy.relay.http1_lifecycle import (
    EXCHANGE_IGNORED,
    EXCHANGE_PAIRS,
    EXCHANGE_TABLE,
    Exchange,
    ExchangeInput,
    exchange_after,
)
from proxy.relay.lifecycle import LifecycleError

X, XI = Exchange, ExchangeInput


@pytest.mark.parametrize(("state", "inp"), EXCHANGE_PAIRS, ids=lambda v: v.value)
def test_every_pair_is_decided(state: Exchange, inp: ExchangeInput) -> None:
    if (state, inp) in EXCHANGE_TABLE:
        assert exchange_after(state, inp) is EXCHANGE_TABLE[state, inp]
    elif (state, inp) in EXCHANGE_IGNORED:
        assert exchange_after(state, inp) is state
    else:
        with pytest.raises(LifecycleError):
            exchange_after(state, inp)


def test_table_and_ignored_do_not_overlap() -> None:
    assert not set(EXCHANGE_TABLE) & EXCHANGE_IGNORED


def test_the_exchanges_that_end_a_call() -> None:
    # Keep-alive: one exchange after another on one connection.
    s = X.IDLE
    for inp in (XI.REQUEST_HEAD, XI.REQUEST_END, XI.RESPONSE_HEAD, XI.RESPONSE_END):
        s = exchange_after(s, inp)
    assert s is X.IDLE
    # Triton refusing a request before its body ended: the call ends when both have.
    s = X.IDLE
    for inp in (XI.REQUEST_HEAD, XI.RESPONSE_HEAD, XI.RESPONSE_END):
        s = exchange_after(s, inp)
    assert s is X.ANSWERED
    assert exchange_after(s, XI.REQUEST_END) is X.IDLE
    # A response before any request is a bug of the core (h11 refuses it first).
    with pytest.raises(LifecycleError):
        exchange_after(X.IDLE, XI.RESPONSE_HEAD)
    # Every state but CLOSED ends with a loss.
    assert all(exchange_after(s, XI.LOST) is X.CLOSED for s in Exchange)

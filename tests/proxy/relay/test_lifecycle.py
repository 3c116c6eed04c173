"""The relay's lifecycle tables: every (state, input) pair of each side is a transition or an input the
state ignores; anything else raises (a bug of the core, never of a peer)."""

from __future__ import annotations

import pytest

from proxy.relay.lifecycle import (
    CLIENT_IGNORED,
    CLIENT_LIVE,
    CLIENT_PAIRS,
    CLIENT_TABLE,
    UPSTREAM_IGNORED,
    UPSTREAM_PAIRS,
    UPSTREAM_TABLE,
    Client,
    ClientInput,
    LifecycleError,
    Upstream,
    UpstreamInput,
    client_after,
    upstream_after,
)


@pytest.mark.parametrize(("state", "inp"), UPSTREAM_PAIRS, ids=[f"{s.value}-{i.value}" for s, i in UPSTREAM_PAIRS])
def test_every_upstream_pair_moves_as_the_table_says_or_is_ignored_or_raises(state: Upstream, inp: UpstreamInput) -> None:
    if (state, inp) in UPSTREAM_TABLE:
        assert upstream_after(state, inp) is UPSTREAM_TABLE[state, inp]
    elif (state, inp) in UPSTREAM_IGNORED:
        assert upstream_after(state, inp) is state
    else:
        with pytest.raises(LifecycleError):
            upstream_after(state, inp)


@pytest.mark.parametrize(("state", "inp"), CLIENT_PAIRS, ids=[f"{s.value}-{i.value}" for s, i in CLIENT_PAIRS])
def test_every_client_pair_moves_as_the_table_says_or_is_ignored_or_raises(state: Client, inp: ClientInput) -> None:
    if (state, inp) in CLIENT_TABLE:
        assert client_after(state, inp) is CLIENT_TABLE[state, inp]
    elif (state, inp) in CLIENT_IGNORED:
        assert client_after(state, inp) is state
    else:
        with pytest.raises(LifecycleError):
            client_after(state, inp)


def test_no_pair_is_both_a_transition_and_ignored() -> None:
    assert not set(UPSTREAM_TABLE) & UPSTREAM_IGNORED
    assert not set(CLIENT_TABLE) & CLIENT_IGNORED


def test_the_rules_the_tables_encode() -> None:
    """A lost side stays lost; a client once lost or closing is written to no more; only an upstream
    that never took a call (or was never reached) ends in REFUSING, where the proxy answers calls."""
    for inp in ClientInput:
        assert client_after(Client.LOST, inp) is Client.LOST
        assert client_after(Client.CLOSING, inp) in (Client.CLOSING, Client.LOST)
    assert CLIENT_LIVE == {Client.OPEN, Client.GOAWAY}
    assert {t for (_, i), t in UPSTREAM_TABLE.items() if t is Upstream.REFUSING} == {Upstream.REFUSING}
    assert {i for (_, i), t in UPSTREAM_TABLE.items() if t is Upstream.REFUSING} == {
        UpstreamInput.CONNECT_FAILED, UpstreamInput.LOST_EARLY}  # fmt: skip
    for inp in UpstreamInput:
        assert upstream_after(Upstream.LOST, inp) is Upstream.LOST if (Upstream.LOST, inp) in UPSTREAM_IGNORED else True
    # only an open upstream ends with an error GOAWAY (the core feeds no other state one)
    assert {s for s, i in UPSTREAM_TABLE if i is UpstreamInput.ERROR_GOAWAY} == {Upstream.OPEN}
    assert not {s for s, i in UPSTREAM_IGNORED if i is UpstreamInput.ERROR_GOAWAY}
    # an upstream once connected never goes back to connecting
    assert all(t is not Upstream.CONNECTING for t in UPSTREAM_TABLE.values())

"""In-flight request tracking used for the cancel record's in_flight/executing lists."""

from __future__ import annotations

from proxy.triton.inflight import InFlight


def test_final_closes_request() -> None:
    """A final response removes the request; a non-final one marks it executing."""
    f = InFlight(unary=False)
    f.sent("a")
    f.sent("b")
    f.answered("a", False)
    assert f.snapshot() == (["a", "b"], ["a"])
    f.answered("a", True)
    assert f.snapshot() == (["b"], [])


def test_repeated_ids_are_counted() -> None:
    """Two open requests with the same id stay two until two finals arrive."""
    f = InFlight(unary=False)
    f.sent("x")
    f.sent("x")
    f.answered("x", True)
    assert f.snapshot()[0] == ["x"]


def test_unary_response_completes_without_flag() -> None:
    """A unary ModelInfer response completes its request even without a final flag."""
    f = InFlight(unary=True)
    f.sent("u")
    f.answered("u", None)
    assert f.snapshot() == ([], [])


def test_unknown_response_id_is_ignored() -> None:
    """A response for an id never sent does not invent an in-flight request."""
    f = InFlight(unary=False)
    f.answered("ghost", True)
    assert f.snapshot() == ([], [])


def test_an_id_sent_again_after_its_final_has_no_response_yet() -> None:
    """cancel.responded is about the request now in flight: a re-used id's earlier responses do not count."""
    f = InFlight(unary=False)
    f.sent("a")
    f.answered("a", False)
    f.answered("a", True)
    f.sent("a")
    assert f.snapshot() == (["a"], [])
    f.answered("a", None)  # no final flag: still in flight, now with a response
    assert f.snapshot() == (["a"], ["a"])

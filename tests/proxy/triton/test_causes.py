"""Termination-cause classification from wire facts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.triton import causes
from replay.capture import events as ev


def test_rst_before_deadline_slack_is_client_cancel() -> None:
    """An RST 100 ms before a 500 ms deadline is an explicit cancel."""
    assert causes.client_reset_cause(500.0, 400.0) == "client_cancel"


def test_rst_within_slack_is_deadline() -> None:
    """The client's RST reaches the proxy up to 20 ms early at a 500 ms deadline (measured 497.96)."""
    assert causes.client_reset_cause(500.0, 497.96) == "deadline"
    assert causes.client_reset_cause(500.0, 480.0) == "deadline"
    assert causes.client_reset_cause(500.0, 479.9) == "client_cancel"


def test_slack_is_two_percent_for_long_deadlines() -> None:
    """Long deadlines get 2% slack rather than 20 ms."""
    assert causes.deadline_slack_ms(10_000.0) == 200.0
    assert causes.client_reset_cause(10_000.0, 9_850.0) == "deadline"


@pytest.mark.parametrize(("code", "cause"), [(None, "deadline"), (0x8, "deadline"), (0x0, "deadline"),
                                             (0xB, "client_cancel"), (0x2, "client_cancel"), (0x7, "client_cancel")])
def test_a_reset_within_the_slack_is_a_deadline_only_by_a_cancels_code(code: int | None, cause: str) -> None:
    """At its deadline a gRPC client resets with CANCEL: a reset of another code within the slack is the client's
    own status (ENHANCE_YOUR_CALM: a response over its receive limit, RESOURCE_EXHAUSTED), not DEADLINE_EXCEEDED."""
    assert causes.client_reset_cause(500.0, 497.96, code) == cause
    assert causes.client_reset_cause(500.0, 400.0, code) == "client_cancel"


def test_rst_without_timeout_is_client_cancel() -> None:
    """A call without grpc-timeout can only be cancelled, never time out."""
    assert causes.client_reset_cause(None, 1e9) == "client_cancel"


def test_upstream_deadline_status_needs_elapsed_time() -> None:
    """DEADLINE_EXCEEDED from upstream is a deadline only near the call's own timeout."""
    assert causes.upstream_status_cause(4, 500.0, 500.4) == "deadline"
    assert causes.upstream_status_cause(4, 500.0, 100.0) == "error"
    assert causes.upstream_status_cause(4, None, 100.0) == "error"
    assert causes.upstream_status_cause(0, 500.0, 600.0) == "ok"
    assert causes.upstream_status_cause(13, None, 1.0) == "error"


@pytest.mark.parametrize(
    ("text", "ms"),
    [("500m", 500.0), ("2S", 2000.0), ("1M", 60_000.0), ("1H", 3_600_000.0), ("1500u", 1.5), ("7n", 7e-6)],
)
def test_grpc_timeout_units(text: str, ms: float) -> None:
    """Every grpc-timeout unit converts to milliseconds."""
    assert causes.parse_grpc_timeout(text) == pytest.approx(ms)


def test_grpc_timeout_takes_as_many_digits_as_tritons_grpc_server() -> None:
    """Past the spec's 8 digits, as C-core reads them (Triton 2.51 ends a call sent "000000500m" after 500 ms);
    beyond any float, None (no deadline anyone could keep)."""
    assert causes.parse_grpc_timeout("000000500m") == 500.0
    assert causes.parse_grpc_timeout("0" * 5000 + "1S") == 1000.0
    assert causes.parse_grpc_timeout("9" * 400 + "H") is None
    assert causes.parse_grpc_timeout("12") is None and causes.parse_grpc_timeout("m") is None


@given(st.text(max_size=12) | st.text(alphabet="0123456789HMSmun", min_size=300, max_size=6000))
def test_grpc_timeout_never_raises(text: str) -> None:
    """A malformed grpc-timeout is None, never an exception."""
    value = causes.parse_grpc_timeout(text)
    assert value is None or value >= 0


def test_every_non_ok_cause_has_a_client_status() -> None:
    """Each cause the proxy can assign without an upstream status maps to a status name."""
    for cause in ("client_cancel", "deadline", "client_disconnect", "upstream_disconnect", "proxy_shutdown"):
        assert ev.STATUS_FOR_CAUSE[cause] in ev.STATUS_NAMES.values()


def test_status_names_are_grpcs_and_unknown_codes_stay_readable() -> None:
    """What a capture's ``status`` says: gRPC's name for the code; a code gRPC does not define as CODE_<n>."""
    status_name = causes.status_name
    assert [status_name(c) for c in (0, 1, 4, 14)] == ["OK", "CANCELLED", "DEADLINE_EXCEEDED", "UNAVAILABLE"]
    assert status_name(99) == "CODE_99"


@pytest.mark.parametrize(
    ("cause", "code", "status"),
    [
        ("client_cancel", 0x8, "CANCELLED"),  # CANCEL: a cancel
        ("client_cancel", 0x0, "CANCELLED"),  # NO_ERROR: likewise (never INTERNAL: the client ended it)
        ("client_cancel", None, "CANCELLED"),
        ("client_cancel", 0xB, "RESOURCE_EXHAUSTED"),  # a response over the client's receive limit
        ("client_cancel", 0xC, "PERMISSION_DENIED"),
        ("client_cancel", 0x2, "INTERNAL"),  # a code gRPC gives no status of its own
        ("deadline", 0xB, "DEADLINE_EXCEEDED"),  # the cause's own status: the deadline rule decided it
        ("client_disconnect", 0xB, "CANCELLED"),
        ("proxy_shutdown", None, "UNAVAILABLE"),
        ("a_cause_of_a_later_version", None, "UNKNOWN"),
    ],
)
def test_a_client_reset_code_gives_the_status_the_client_ended_with(cause: str, code: int | None, status: str) -> None:
    """A gRPC client resets with the code of its own status: the proxy records that status for a
    client_cancel, by the same table it reads an upstream reset with; a cancel's code leaves CANCELLED,
    and every other cause has its own status."""
    assert ev.cancel_status(cause, code) == status
    assert status in ev.STATUS_NAMES.values()
    assert (ev.client_reset_status(cause, code) is None) == (status == ev.STATUS_FOR_CAUSE.get(cause, "UNKNOWN"))

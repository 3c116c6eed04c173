"""Termination-cause classification: from wire facts to one of the capture's ``cause`` values.

Pure functions; the proxy calls them when a call ends, replay never needs to (the cause is in the
capture). The status vocabulary (``STATUS_NAMES``, ``STATUS_FOR_CAUSE``, ``RST_TO_STATUS``) is the capture's, in
:mod:`replay.capture.events`. The deadline rule and its slack are documented in docs/recording.md (Causes).
"""

from __future__ import annotations

import math
import re

from replay.capture.events import RST_TO_STATUS as RST_TO_STATUS  # the capture's vocabulary, re-exported
from replay.capture.events import STATUS_NAMES, Cause

DEADLINE_EXCEEDED = 4
MIN_SLACK_MS = 20.0
SLACK_FRACTION = 0.02


def status_name(code: int) -> str:
    """The gRPC status name of ``code`` (unknown codes as ``CODE_<n>``)."""
    return STATUS_NAMES.get(code, f"CODE_{code}")


def deadline_slack_ms(timeout_ms: float) -> float:
    """How much earlier than its deadline a call may end and still count as a deadline.

    Clients arm their timer when they start the call, before the request reaches the proxy, so the
    proxy sees the client's RST up to a few ms *before* timeout (measured 497.96 ms at 500m).
    """
    return max(MIN_SLACK_MS, SLACK_FRACTION * timeout_ms)


def reached_deadline(timeout_ms: float | None, elapsed_ms: float) -> bool:
    """Whether a call with ``grpc-timeout`` ``timeout_ms`` ended late enough to be its deadline."""
    return timeout_ms is not None and elapsed_ms >= timeout_ms - deadline_slack_ms(timeout_ms)


def client_reset_cause(timeout_ms: float | None, elapsed_ms: float, rst_code: int | None = None) -> Cause:
    """A client RST_STREAM on a live connection (of code ``rst_code``): the deadline firing, or the client
    ending the call itself. A gRPC client resets at its deadline with CANCEL (its DEADLINE_EXCEEDED has no
    code of its own); another code is a status of the client's own (ENHANCE_YOUR_CALM: a response over its
    receive limit), whenever it comes."""
    if rst_code is not None and rst_code not in _CANCEL_CODES:
        return "client_cancel"
    return "deadline" if reached_deadline(timeout_ms, elapsed_ms) else "client_cancel"


#: RST_STREAM codes a client's deadline may come with: CANCEL, and NO_ERROR (a client that had its answer).
_CANCEL_CODES = frozenset({0x8, 0x0})


def upstream_status_cause(code: int, timeout_ms: float | None, elapsed_ms: float) -> Cause:
    """The upstream ended the call with grpc-status ``code``."""
    if code == 0:
        return "ok"
    if code == DEADLINE_EXCEEDED and reached_deadline(timeout_ms, elapsed_ms):
        return "deadline"
    return "error"


def parse_grpc_timeout(value: str) -> float | None:
    """``grpc-timeout`` header value -> milliseconds, or None when malformed (or beyond any float).

    gRPC's spec says 1-8 ASCII digits and a unit, but Triton's gRPC server (C-core) takes any number of
    digits ("000000500m" ends the call after 500 ms): the deadline it keeps is the one recorded. float(), not
    int(): int() refuses a string of more than 4300 digits, and a header from the wire must never raise
    (str.isdigit() would also take "²")."""
    if not _TIMEOUT.fullmatch(value):
        return None
    ms = float(value[:-1]) * _UNITS[value[-1]]
    return ms if ms != math.inf else None


_TIMEOUT = re.compile(r"[0-9]+[HMSmun]")
_UNITS = {"H": 3_600_000.0, "M": 60_000.0, "S": 1000.0, "m": 1.0, "u": 1e-3, "n": 1e-6}

"""What Triton's own output says about a cancelled request: its verbose log and its metrics page.

Triton-protocol knowledge shared by ``check-cancel`` (:mod:`proxy.cancelcheck`) and the proxy's
operating evidence (:mod:`proxy.ops.evidence`): the log lines Triton writes when a gRPC transaction is
cancelled, the time prefix of its log lines, and the ``nv_inference_*`` metrics. Pure: text in,
observations out; reading files and endpoints is the callers' business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

#: Triton's verbose-log line when the gRPC layer learns of a cancel (one per cancelled call).
NOTIFIED = "Cancellation notification received"
#: Triton's verbose-log line for each response a backend still produced after the cancel (no request id).
SKIPPED = "skipping response generation as grpc transaction was cancelled"

_LOG_TIME = re.compile(r"^[IWEF](\d{4}) (\d\d):(\d\d):(\d\d(?:\.\d+)?) ")


def parse_metrics(text: str) -> dict[str, float]:
    """``name{labels}`` -> value for the ``nv_inference_*`` lines of a Prometheus text page."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("nv_inference_"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            continue
    return out


def log_time_s(line: str) -> float | None:
    """Seconds since midnight of a Triton log line (server clock), or None for other lines."""
    m = _LOG_TIME.match(line)
    if m is None:
        return None
    return int(m.group(2)) * 3600 + int(m.group(3)) * 60 + float(m.group(4))


@dataclass(frozen=True, kw_only=True, slots=True)
class LogObservation:
    """What Triton's verbose log showed after one cancel.

    Times are the server's clock, in ms from the reference point: for an executing request its
    ``Cancellation notification received`` line, for a queued one the moment it reached the backend
    (its ``to EXECUTING`` line) or, when it never did, the notification. The window runs from the
    reference point too: a queued request that reached the backend late is watched as long as one
    that was executing, or the allowance after its start could close with the window; until it
    reaches the backend, every line given is read.
    """

    notified: bool
    reached_backend: bool | None  # queued case: the request still went from the queue to the backend
    released_after_ms: float | None
    skipped_total: int
    skipped_after_allowance: int
    last_skipped_ms: float | None
    window_ms: float
    lines: tuple[str, ...] = ()
    #: Signs of other cancelled requests around ours: notifications later than ours within the window, and
    #: 'skipping response generation' lines before it (those lines carry no request id: with any such sign
    #: they are not ours alone). Within :data:`SAME_CANCEL_MS` of ours, either may be our own call's (Triton
    #: notifies each of a call's states, 'context 0' for every call in 2.51, and a dropped response may be
    #: logged before the notification): not counted.
    others: int = 0


#: How close to our notification a notification or a dropped response may be our own call's (ms): one call's
#: notifications came 0.09 ms apart; other clients' cancels are far apart in time.
SAME_CANCEL_MS = 50.0


def scan_log(
    lines: list[str], request_id: str, allowance_ms: float, window_ms: float, *,
    case: Literal["executing", "queued"] = "executing",
) -> LogObservation:
    """Read the log lines appended after a cancel of ``request_id`` (the first notification is ours)."""
    t0: float | None = None
    start: float | None = None  # reference point (see LogObservation)
    reached: bool | None = False if case == "queued" else None
    released: float | None = None
    skipped: list[float] = []
    kept: list[str] = []
    others = 0
    early: list[float] = []  # dropped responses logged before our notification
    tag = f"[request id: {request_id}]"
    for line in lines:
        t = log_time_s(line)
        if t is None:
            continue
        if t0 is not None and t < t0 - 43200:
            t += 86400  # the log crossed midnight
        # A queued request not yet on the backend is not cut off: it may leave the queue only after the
        # work ahead of it, later than a window from the notification (the caller read that far).
        if start is not None and reached is not False and (t - start) * 1000.0 > window_ms:
            break
        if NOTIFIED in line:
            if t0 is None:
                t0 = start = t
            elif (t - t0) * 1000.0 > SAME_CANCEL_MS:
                others += 1
            kept.append(line)
            continue
        if t0 is None or start is None:
            if SKIPPED in line:
                early.append(t)  # (another's, unless just before our notification)
            continue
        if SKIPPED in line:
            skipped.append(t)
            kept.append(line)
        elif tag in line and "to EXECUTING" in line and case == "queued":
            reached = True
            start = t
            # Responses dropped before the request even ran belong to someone else.
            skipped = []
            kept.append(line)
        elif tag in line and "to RELEASED" in line and released is None:
            released = max(0.0, (t - start) * 1000.0)
            kept.append(line)
    if t0 is not None:
        others += sum(1 for t in early if (t0 - t) * 1000.0 > SAME_CANCEL_MS)
    since = [(t - start) * 1000.0 for t in skipped] if start is not None else []
    return LogObservation(
        notified=t0 is not None,
        reached_backend=reached,
        released_after_ms=released,
        skipped_total=len(since),
        skipped_after_allowance=sum(1 for x in since if x > allowance_ms),
        last_skipped_ms=max(since) if since else None,
        window_ms=window_ms,
        lines=tuple(kept[:50]),
        others=others,
    )

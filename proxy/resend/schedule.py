"""When each call starts and each client action happens: pure arithmetic over the scripts.

Offsets are the capture's, from its first call start, divided by ``--speed`` (``max``: no waiting,
every call as soon as the previous one was opened, in capture order). ``--loop N`` sends the whole
schedule N times, each pass after the previous one's span. A recorded ``grpc-timeout`` is the
client's setting, not a pace: it is sent as recorded whatever the speed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.resend.plan import CallScript
from replay.errors import UserError

#: ``--speed max``.
MAX = math.inf


def parse_speed(text: str) -> float:
    """``2`` (twice as fast), ``0.5``, ``max``; raises UserError."""
    if text.strip().lower() == "max":
        return MAX
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"--speed must be a number > 0 or 'max', got {text!r}")
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class Start:
    """One call of one pass: start it at ``at_s`` after the send began."""

    at_s: float
    loop: int
    call: CallScript

    @property
    def conn(self) -> str:
        """The connection it shares with the calls of the same captured connection in the same pass."""
        return f"{self.loop}/{self.call.conn}"


def scaled(ns: int, speed: float) -> float:
    """A captured offset in ns -> seconds at ``speed`` (0 at ``max``)."""
    return 0.0 if speed == MAX else ns / 1e9 / speed


def span_ns(calls: Sequence[CallScript]) -> int:
    """From the first call's start to the last thing any client did (the length of one pass)."""
    if not calls:
        return 0
    t0 = min(c.t_start for c in calls)
    last = t0
    for c in calls:
        ends = [m.at_ns for m in c.messages] + [c.half_close_ns or 0, c.ending.at_ns if c.ending else 0]
        last = max(last, c.t_start + max(ends))
    return last - t0


def plan_starts(calls: Sequence[CallScript], speed: float, loops: int) -> list[Start]:
    """Every call start of every pass, in time order (capture order within a pass at ``max``)."""
    if loops < 1:
        raise UserError(f"--loop must be >= 1, got {loops}")
    if not calls:
        return []
    ordered = sorted(calls, key=lambda c: c.t_start)
    t0 = ordered[0].t_start
    span = scaled(span_ns(ordered), speed)
    return [
        Start(at_s=i * span + scaled(c.t_start - t0, speed), loop=i, call=c)
        for i in range(loops)
        for c in ordered
    ]


@dataclass
class Lag:
    """How far behind the schedule the sender ran (seconds per action)."""

    count: int = 0
    total: float = 0.0
    worst: float = 0.0
    last: float = 0.0

    def add(self, late_s: float) -> None:
        """One action that happened ``late_s`` after it was due."""
        late_s = max(0.0, late_s)
        self.count += 1
        self.total += late_s
        self.worst = max(self.worst, late_s)
        self.last = late_s

    @property
    def mean(self) -> float:
        """Mean lag in seconds."""
        return self.total / self.count if self.count else 0.0

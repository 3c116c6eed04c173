"""When each call starts and each client action happens: pure arithmetic over the scripts.

Offsets are the capture's, from its first call start, divided by ``--speed`` (``max``: no waiting,
every call as soon as the previous one was opened, in capture order). ``--loop N`` sends the whole
schedule N times, each pass after the previous one's span. A recorded ``grpc-timeout`` is the
client's setting, not a pace: it is sent as recorded whatever the speed.

A call that started after other calls had ended, on any connection of its pass, is also sent no
sooner than those have ended in this run, plus the captured pause after the last of them
(:attr:`Start.after`). At its offset alone it could overtake them: a client calling one at a time (its
next call after its last reply) would be overlapped by its next call, which it never did, and the two
would slow each other down; and what one client did after another had finished (the next sequence
with the same id, on a new connection) would reach the server first, once the calls before it had
drifted later than their offsets (each waits for the end of the one before it, so the sender's and
the new server's delays add up along a chain): Triton refused it without the START flag. The order is
one for the whole pass, not one per connection: a connection's own calls are some of the calls that
ended before, so one client's one-at-a-time calls stay one at a time by the same rule.
"""

from __future__ import annotations

import bisect
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
    #: Its place among all the calls of its pass in the order they ended in the capture (None: its end was
    #: not recorded).
    rank: int | None = None
    #: How many of those (the first ones in that order, on any connection) had ended when it started in the
    #: capture, and the pause from the last of them to its start (scaled): it waits for them (none at
    #: ``--speed max``).
    after: int = 0
    pause_s: float = 0.0

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
    ranks, afters = _order(ordered, speed)
    return [
        Start(
            at_s=i * span + scaled(c.t_start - t0, speed),
            loop=i,
            call=c,
            rank=ranks[c.id],
            after=afters[c.id][0],
            pause_s=afters[c.id][1],
        )
        for i in range(loops)
        for c in ordered
    ]


def _order(calls: Sequence[CallScript], speed: float) -> tuple[dict[str, int | None], dict[str, tuple[int, float]]]:
    """Each call's rank among all the calls by captured end, and what it waits for (see :class:`Start`).

    Every call whose end was recorded, sorted by that end: a call waits for the first ``n`` of that order,
    ``n`` the number that had ended by its start (a prefix: the ones that ended before it began are exactly
    the first ones to end), so each call is one binary search."""
    ends = sorted((c.t_end, c.id) for c in calls if c.t_end is not None)
    ranks: dict[str, int | None] = {c.id: None for c in calls}
    for rank, (_, cid) in enumerate(ends):
        ranks[cid] = rank
    afters: dict[str, tuple[int, float]] = {c.id: (0, 0.0) for c in calls}
    if speed == MAX:
        return ranks, afters
    times = [t for t, _ in ends]
    for c in calls:
        n = bisect.bisect_right(times, c.t_start)
        own = ranks[c.id]
        if own is not None:
            # An end stamped at or before its own start (the wall clock stepping back) would have it wait for
            # itself; and a call waits only for calls ranked before it, so no two calls wait for each other.
            n = min(n, own)
        if n:
            afters[c.id] = (n, scaled(c.t_start - times[n - 1], speed))
    return ranks, afters


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

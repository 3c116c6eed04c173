"""The writer's accounting of what it wrote and what it could not (pure: no I/O).

A record the writer could not write (queue full, disk full, low free space, a deleted file) is
never lost silently: it is counted into a :class:`Gap`, and the next record written is a `gap`
record saying how many, why, and over which time span.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Gap:
    """Records the capture could not hold, not yet reported: one `gap` record says how many and why."""

    dropped: int = 0
    reason: str = ""  # what started the gap
    first_t_ns: int = 0
    last_t_ns: int = 0
    #: Each other cause of records lost into the same gap, with how many, in the order they came: a gap a
    #: deleted file started, and then no file could be created for a while, must say both.
    then: dict[str, int] = field(default_factory=dict)

    def add(self, records: list[Any], reason: str) -> None:
        if not records:
            return
        # Batches are not always lost in time order (a queue overflow drops a burst's later records
        # before the write of its earlier ones fails): the span covers them all. A batch is in
        # emit order, so its ends are its earliest and latest records (no scan of a long pause).
        first, last = records[0].t_ns, records[-1].t_ns
        if not self.dropped:
            self.first_t_ns, self.last_t_ns = first, last
            self.reason = reason
        else:
            self.first_t_ns = min(self.first_t_ns, first)
            self.last_t_ns = max(self.last_t_ns, last)
            self._also(reason, len(records))
        self.dropped += len(records)

    def joined(self, later: Gap) -> Gap:
        """One gap reporting this one's records and then ``later``'s (this one's reason first, then later's)."""
        if not self.dropped:
            return later
        if later.dropped:
            self._also(later.reason, later.dropped - sum(later.then.values()))
            for reason, n in later.then.items():
                self._also(reason, n)
        self.dropped += later.dropped
        self.last_t_ns = max(self.last_t_ns, later.last_t_ns)
        return self

    def _also(self, reason: str, n: int) -> None:
        if reason != self.reason and n:
            self.then[reason] = self.then.get(reason, 0) + n

    def describe(self, head: str | None = None) -> str:
        """The `gap` record's reason: what started the gap (``head``: said otherwise), then each other cause
        with how many records it lost."""
        return "".join([self.reason if head is None else head,
                        *(f"; then {n} record(s): {reason}" for reason, n in self.then.items())])  # fmt: skip


@dataclass
class Counts:
    """What the capture holds so far, by record kind and by call cause (for ``capture_end``)."""

    kinds: dict[str, int] = field(default_factory=dict)
    causes: dict[str, int] = field(default_factory=dict)
    dropped: int = 0

    def add(self, written: list[Any]) -> None:
        """Count records just written (the writer thread)."""
        kinds, causes = self.kinds, self.causes
        for r in written:
            kinds[r.kind] = kinds.get(r.kind, 0) + 1
            if r.kind == "call_end":
                causes[r.cause] = causes.get(r.cause, 0) + 1

    def summary(self, extra: dict[str, int]) -> dict[str, int]:
        """``capture_end``'s counts: records by kind, calls by cause, records dropped, then ``extra``."""
        counts = {f"records.{k}": v for k, v in sorted(self.kinds.items())}
        counts.update({f"calls.{k}": v for k, v in sorted(self.causes.items())})
        counts["dropped"] = self.dropped
        counts.update(extra)
        return counts

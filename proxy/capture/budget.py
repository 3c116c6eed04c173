"""Disk budget arithmetic: which closed capture files retention removes, when low free space pauses writing.

Pure: numbers in, decisions out. The writer (:mod:`proxy.capture.writer`) measures the directory and
the filesystem and acts on what these functions say; the tests here need no disk.

Retention rule (``--max-total-mb``): the live file may still grow up to the rotation size, so the
closed files are kept within ``max_total - rotate_bytes``; the oldest go first. The live file is never
removed. Total disk use therefore stays within ``max_total`` (plus at most one write batch past the
rotation size, and a rotated file's plain and gzipped copies side by side while it is compressed).

Free-space rule (``--min-free-mb``): writing pauses when the filesystem's free space (for an
unprivileged user: ``f_bavail``) would fall below ``min_free``, and resumes only once it is back above
``min_free + hysteresis`` so that a disk hovering at the threshold does not flap between the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MIB = 1024 * 1024

#: ``--min-free-mb`` when not given: keep 64 MiB free, or 5 % of a filesystem smaller than 1.25 GiB
#: (so a small volume stays usable and a large one is never filled to 100 %).
DEFAULT_MIN_FREE_CAP = 64 * MIB
DEFAULT_MIN_FREE_FRACTION = 0.05

#: ``--max-total-mb`` without ``--rotate-mb``: rotate at a tenth of the budget, so retention removes
#: about a tenth of the history at a time.
DEFAULT_ROTATE_FRACTION = 0.1


def default_min_free(fs_total: int) -> int:
    """Bytes to keep free on a filesystem of ``fs_total`` bytes when ``--min-free-mb`` is not given."""
    return min(DEFAULT_MIN_FREE_CAP, int(fs_total * DEFAULT_MIN_FREE_FRACTION))


def rotate_for_budget(max_total: int, rotate: int | None) -> int:
    """The rotation size to use under a budget of ``max_total`` bytes; ValueError if it cannot work.

    Retention can only remove closed files, so a budget needs rotation, and the live file must leave
    room for at least one closed file: ``rotate <= max_total / 2``.
    """
    if max_total <= 0:
        raise ValueError("the total budget must be positive")
    if rotate is None:
        return max(1, int(max_total * DEFAULT_ROTATE_FRACTION))
    if rotate * 2 > max_total:
        raise ValueError(f"the rotation size ({rotate} bytes) must be at most half the total budget ({max_total} bytes)")
    return rotate


@dataclass(frozen=True, slots=True)
class CaptureFile:
    """A closed capture file as the writer measured it; ``order`` sorts oldest first.

    ``size`` includes its side file (``--payload full`` message bytes), named ``side``: the two are
    counted and deleted as one.
    """

    name: str
    size: int
    order: tuple[str, int, str]
    side: str | None = None


def to_remove(closed: Sequence[CaptureFile], live_limit: int, max_total: int) -> list[CaptureFile]:
    """The oldest closed files to delete so that ``sum(closed) + live_limit <= max_total``.

    Removes as few files as possible, always the oldest first (a prefix in ``order``); returns every
    closed file when even removing all of them is not enough (the live file alone is over budget).
    """
    ordered = sorted(closed, key=lambda f: f.order)
    total = sum(f.size for f in ordered) + live_limit
    out: list[CaptureFile] = []
    for f in ordered:
        if total <= max_total:
            break
        out.append(f)
        total -= f.size
    return out


@dataclass(frozen=True, slots=True)
class FreeSpacePolicy:
    """When writing pauses and resumes (bytes of free space)."""

    min_free: int
    #: Extra free space needed before a paused writer resumes.
    hysteresis: int

    @classmethod
    def for_min_free(cls, min_free: int) -> FreeSpacePolicy:
        """The policy for ``--min-free-mb``: resume at min_free plus a tenth of it (at least 1 MiB, at most 64 MiB)."""
        return cls(min_free=min_free, hysteresis=max(MIB, min(64 * MIB, min_free // 10)) if min_free else 0)

    def paused(self, free: int, pending: int, was_paused: bool) -> bool:
        """Whether writing ``pending`` more bytes must wait, with ``free`` bytes free now."""
        if not self.min_free:
            return False
        if was_paused:
            return free - pending < self.min_free + self.hysteresis
        return free - pending < self.min_free


@dataclass(slots=True)
class FreeSpaceEstimate:
    """Free space between two measurements: the last figure minus what was written since.

    Measuring (``statvfs``) per write batch would be cheap enough, but an estimate lets the writer
    measure only every ``interval_s`` seconds or when the estimate comes near the threshold.
    """

    interval_s: float
    margin: int
    free: int = 0
    measured_at: float = float("-inf")

    def due(self, now: float, pending: int) -> bool:
        """Whether to measure again before writing ``pending`` bytes."""
        return now - self.measured_at >= self.interval_s or self.free - pending < self.margin

    def measured(self, now: float, free: int) -> None:
        """A fresh figure."""
        self.free, self.measured_at = free, now

    def wrote(self, n: int) -> None:
        """``n`` bytes were written."""
        self.free -= n

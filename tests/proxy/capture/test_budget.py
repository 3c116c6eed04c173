"""The disk budget arithmetic (pure): retention picks, rotation under a budget, the free-space gate."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from proxy.capture.budget import (
    MIB,
    CaptureFile,
    FreeSpaceEstimate,
    FreeSpacePolicy,
    default_min_free,
    rotate_for_budget,
    to_remove,
)


def _files(sizes: list[int]) -> list[CaptureFile]:
    return [CaptureFile(name=f"f{i:03d}", size=s, order=("capture-x", i, f"f{i:03d}")) for i, s in enumerate(sizes)]


@given(st.lists(st.integers(0, 10_000), max_size=30), st.integers(0, 5_000), st.integers(1, 100_000))
def test_retention_removes_the_fewest_oldest_files(sizes: list[int], live: int, budget: int) -> None:
    """The removed files are a prefix (oldest first), enough to fit when possible, and one fewer would not fit."""
    files = _files(sizes)
    shuffled = list(reversed(files))  # the input order does not matter, ``order`` does
    out = to_remove(shuffled, live, budget)
    assert out == files[: len(out)]
    kept = sum(sizes[len(out) :]) + live
    if len(out) < len(files):
        assert kept <= budget
    if out:
        assert kept + out[-1].size > budget  # minimal: keeping the last removed one would exceed


def test_retention_example() -> None:
    """Budget 10, live file may reach 4: closed 3+3+3 (13 in all) lose the oldest one (6 + 4 = 10); budget 6 all three."""
    out = to_remove(_files([3, 3, 3]), 4, 10)
    assert [f.name for f in out] == ["f000"]
    assert [f.name for f in to_remove(_files([3, 3, 3]), 4, 6)] == ["f000", "f001", "f002"]


def test_nothing_removed_within_budget() -> None:
    """At or under the budget nothing goes."""
    assert to_remove(_files([1, 2, 3]), 4, 10) == []


@given(st.integers(1, 10**12))
def test_default_min_free_is_small_and_never_zero_on_real_filesystems(total: int) -> None:
    """min(64 MiB, 5 %): never more than 64 MiB, never more than a twentieth of the filesystem."""
    m = default_min_free(total)
    assert 0 <= m <= 64 * MIB and m <= total / 20 + 1
    if total >= 20 * 64 * MIB:
        assert m == 64 * MIB


def test_rotate_for_budget() -> None:
    """Without --rotate-mb a tenth of the budget; a rotation size over half the budget is refused."""
    assert rotate_for_budget(100 * MIB, None) == 10 * MIB
    assert rotate_for_budget(100 * MIB, 50 * MIB) == 50 * MIB
    with pytest.raises(ValueError, match="at most half"):
        rotate_for_budget(100 * MIB, 51 * MIB)


@given(st.integers(0, 10**9), st.integers(0, 10**6), st.integers(0, 10**9))
def test_free_space_gate_has_hysteresis(min_free: int, pending: int, free: int) -> None:
    """Running writers pause under min_free; paused writers resume only above min_free + hysteresis."""
    p = FreeSpacePolicy.for_min_free(min_free)
    if not min_free:
        assert not p.paused(free, pending, False) and not p.paused(free, pending, True)
        return
    assert p.hysteresis >= MIB
    left = free - pending
    assert p.paused(free, pending, False) == (left < min_free)
    assert p.paused(free, pending, True) == (left < min_free + p.hysteresis)
    # Paused is never resumed by a figure that would not also keep a running writer going.
    if not p.paused(free, pending, True):
        assert not p.paused(free, pending, False)


def test_estimate_measures_when_stale_or_near_the_threshold() -> None:
    """A measurement is due after the interval, or when the estimate minus the batch nears the margin."""
    e = FreeSpaceEstimate(interval_s=2.0, margin=100)
    assert e.due(0.0, 0)
    e.measured(0.0, 1000)
    assert not e.due(1.0, 10)
    e.wrote(850)
    assert e.due(1.0, 60)  # 150 - 60 < 100
    assert e.due(2.0, 0)


def test_a_paused_writer_resumes_only_with_room_for_the_batch_that_did_not_fit(tmp_path: Path) -> None:
    """Paused by a 2 MiB batch (1 MB tensors, --payload full) with free space just above the resume mark: the
    writer's periodic check, asking with nothing to write, resumed it, and its next such batch paused it again:
    "capture_resumed" and "capture_paused_low_disk" every 2 s, nothing written. It resumes once that batch fits."""
    from proxy.capture.retention import CaptureOps, DiskGate

    free = {"bytes": 0}
    ops = CaptureOps()
    gate = DiskGate(tmp_path, lambda _d: (1000 * MIB, free["bytes"]), 0.0, ops)
    gate.setup(10 * MIB, None, None)
    resume = 10 * MIB + FreeSpacePolicy.for_min_free(10 * MIB).hysteresis
    free["bytes"] = resume + MIB // 2
    with structlog.testing.capture_logs() as logs:
        assert gate.paused_for(2 * MIB, 0)  # under the floor once written: paused
        assert gate.paused_for(0, 5)  # the periodic check: still no room for such a batch
        free["bytes"] = resume + 2 * MIB
        assert not gate.paused_for(0, 5)  # room for it now
        assert not gate.paused_for(2 * MIB, 0)
    assert [e["event"] for e in logs] == ["capture_paused_low_disk", "capture_resumed"]
    assert ops.pauses == 1 and not ops.paused
    # A smaller batch that fits is written while the large one waits: the gate asks of each batch its own size.
    free["bytes"] = 10 * MIB + MIB
    assert gate.paused_for(2 * MIB, 0)
    free["bytes"] = resume + MIB // 2
    assert not gate.paused_for(1024, 3)

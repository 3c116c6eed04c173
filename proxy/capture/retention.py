"""The capture directory as the writer's thread sees it: what retention may delete, whether the live file is still there.

Runs in the writer thread only (file-system calls, no asyncio). The decisions are
:mod:`proxy.capture.budget`'s; this module measures and acts, and keeps the counters the metrics read.
"""

from __future__ import annotations

import gzip
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog

from proxy.capture.budget import MIB, CaptureFile, FreeSpaceEstimate, FreeSpacePolicy, default_min_free, to_remove
from proxy.capture.gaps import Gap
from replay.capture import events as ev
from replay.capture import liveness, naming
from replay.errors import UserError

log = structlog.get_logger("triton_tap.writer")

#: ``disk_usage(directory) -> (filesystem size, bytes free for unprivileged writers)``.
DiskUsage = Callable[[Path], tuple[int, int]]


def statvfs_usage(directory: Path) -> tuple[int, int]:
    """The real figures: ``f_bavail`` (what a non-root writer may still use), not ``f_bfree``."""
    st = os.statvfs(directory)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


@dataclass
class CaptureOps:
    """Counters of the writer's housekeeping (written by the writer thread, read at scrape time)."""

    files_removed: int = 0
    bytes_removed: int = 0
    #: reopen reason (``signal``, ``unlinked``, ``moved``, ``admin``...) -> count
    reopens: dict[str, int] = field(default_factory=dict)
    paused: bool = False
    pauses: int = 0
    #: records not written because free space was low (also part of the dropped total)
    low_disk_dropped: int = 0
    #: bytes of capture files in the directory at the last retention scan
    dir_bytes: int = 0
    min_free: int = 0


def scan(directory: Path, live: Path) -> tuple[list[CaptureFile], int, int]:
    """The closed capture files of ``directory`` (any proxy run), each with its side file; the live
    files' size (their side files' included); and how many live files are another writer's.

    Another writer's live file (``record --workers``: each worker writes its own chain into the one
    directory) is told by the lock its writer holds on it (:mod:`replay.capture.liveness`): it is never
    closed, so never deleted here. A side file whose capture file is gone (deleted by hand, or unlinked
    while live) is a closed file of its own, so the budget still counts it and retention removes it in
    its turn.
    """
    captures: dict[str, tuple[str, int, tuple[str, int, str]]] = {}
    sides: dict[str, tuple[int, tuple[str, int, str]]] = {}
    live_size = 0
    others: list[str] = []
    with os.scandir(directory) as it:
        for entry in it:
            key = naming.parse(entry.name)
            is_side = key is None and (key := naming.side_owner(entry.name)) is not None
            if key is None or not entry.is_file(follow_symlinks=False):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            order = (key.stem, key.index, entry.name)
            if is_side:
                sides[entry.name] = (st.st_size, order)
            elif entry.name == live.name or (not key.gzipped and liveness.being_written(entry.path)):
                live_size += st.st_size
                if entry.name != live.name:
                    others.append(entry.name)
            else:
                captures[entry.name] = (naming.side_name(entry.name), st.st_size, order)
    for name in (live.name, *others):
        live_side = sides.pop(naming.side_name(name), None)
        if live_side is not None:
            live_size += live_side[0]
    closed: list[CaptureFile] = []
    for name, (side, size, order) in captures.items():
        # While a rotated file is gzipped both names exist for a moment: the side file goes with one.
        found = sides.pop(side, None)
        closed.append(CaptureFile(name=name, size=size + (found[0] if found else 0), order=order,
                                  side=side if found else None))  # fmt: skip
    closed.extend(CaptureFile(name=name, size=size, order=order) for name, (size, order) in sides.items())
    return closed, live_size, len(others)


def enforce(directory: Path, live: Path, live_limit: int, max_total: int, ops: CaptureOps) -> list[CaptureFile]:
    """Delete the oldest closed files beyond the budget, each with its side file; the ones actually
    deleted, oldest first (:func:`removed_names` lists their files)."""
    closed, live_size, others = scan(directory, live)
    # Each live file may grow to the rotation size before it is closed: room is kept for every one.
    doomed = to_remove(closed, live_limit * (1 + others), max_total)
    removed: list[CaptureFile] = []
    for f in doomed:
        try:
            os.unlink(directory / f.name)
        except FileNotFoundError:
            continue  # someone else removed it: it is gone either way, but not by us
        except OSError as e:
            log.warning("retention_unlink_failed", file=f.name, error=str(e))
            continue
        removed.append(f)
        if f.side is not None:
            try:
                os.unlink(directory / f.side)
            except FileNotFoundError:
                pass
            except OSError as e:  # rare; the next scan counts it as a file of its own and tries again
                log.warning("retention_unlink_failed", file=f.side, error=str(e))
    gone = sum(f.size for f in removed)
    ops.files_removed += len(removed)
    ops.bytes_removed += gone
    ops.dir_bytes = sum(f.size for f in closed) - gone + live_size
    if removed:
        log.warning("retention_removed_files", files=removed_names(removed), bytes=gone,
                    max_total_bytes=max_total, dir_bytes=ops.dir_bytes)  # fmt: skip
    return removed


def removed_names(removed: list[CaptureFile]) -> list[str]:
    """The files ``removed`` held: each capture file, then its side file if it had one."""
    return [name for f in removed for name in (f.name, f.side) if name is not None]


LiveState = Literal["ok", "unlinked", "moved"]


def live_state(fd: int, path: Path) -> LiveState:
    """Is the file open on ``fd`` still the one at ``path``? Two syscalls: cheap enough every few seconds.

    ``unlinked``: no name refers to it any more (deleted: what is written there is lost);
    ``moved``: it still has a name, but not ``path`` (renamed, or ``path`` now names another file).
    """
    st = os.fstat(fd)
    if st.st_nlink == 0:
        return "unlinked"
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return "moved"
    if (named.st_dev, named.st_ino) != (st.st_dev, st.st_ino):
        return "moved"
    return "ok"


def moved_note(old: str, size: int, seqs: tuple[int, int], side: bool, t_ns: int) -> ev.FilesRemoved:
    """The record a new file starts with when the live file was renamed: where its records (``seqs``, first..last) are."""
    # Its side file keeps its name: readers find it by the capture file's name.
    also = f"; its message bytes are in {naming.side_name(old)}: rename that alike" if side else ""
    return ev.FilesRemoved(t_ns=t_ns, reason="moved", files=[old], size=size,
                           detail=f"{old} was renamed or replaced while being written; its records (seq "
                           f"{seqs[0]}..{seqs[1]}) are in the renamed file, not lost{also}")  # fmt: skip


def unlinked_gap(old: str, seqs: tuple[int, int], t_ns: tuple[int, int]) -> Gap:
    """The live file was deleted: everything it held (``seqs``, first..last; written over ``t_ns``) is lost."""
    lost = seqs[1] - seqs[0] + 1
    return Gap(dropped=lost, first_t_ns=t_ns[0], last_t_ns=t_ns[1],
               reason=f"file_unlinked: {old} was deleted while being written; the {lost} record(s) it held "
               f"(seq {seqs[0]}..{seqs[1]}) are lost")  # fmt: skip


def compress(old: Path) -> Path | None:
    """gzip a closed file to ``.gz`` (0600) and remove the plain one; None (plain file kept) if that fails."""
    gz = old.with_name(old.name + naming.GZIP_SUFFIX)
    try:
        with open(old, "rb") as src, gzip.open(gz, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.chmod(gz, 0o600)
    except OSError as e:
        # Disk full while compressing: keep the plain file (complete), drop the partial .gz.
        log.warning("capture_gzip_failed", file=old.name, error=str(e))
        gz.unlink(missing_ok=True)
        return None
    old.unlink()
    return gz


class DiskGate:
    """``--min-free-mb``: measures free space (rarely) and says when writing must pause or may resume."""

    def __init__(self, directory: Path, disk_usage: DiskUsage, interval_s: float, ops: CaptureOps) -> None:
        self._dir = directory
        self._usage = disk_usage
        self._ops = ops
        self._space = FreeSpaceEstimate(interval_s=interval_s, margin=0)
        self._policy = FreeSpacePolicy.for_min_free(0)
        #: The batch (bytes) that did not fit when writing paused: a resume asked with nothing to write (the
        #: writer's periodic check) must have room for it too, or the next such batch pauses again at once.
        self._blocked = 0

    def setup(self, min_free: int | None, max_total: int | None, rotate: int | None) -> None:
        """Resolve the default (:func:`~proxy.capture.budget.default_min_free`) and say what is in force."""
        if min_free is None:
            total, _ = self._usage(self._dir)
            min_free = default_min_free(total)
        self._policy = FreeSpacePolicy.for_min_free(min_free)
        self._space.margin = min_free + self._policy.hysteresis
        self._ops.min_free = min_free
        log.debug("capture_budget", max_total_bytes=max_total, rotate_bytes=rotate, min_free_bytes=min_free,
                 resume_free_bytes=min_free + self._policy.hysteresis)  # fmt: skip

    def still_paused(self) -> bool:
        """Paused, and not yet time to measure again (the caller drops without encoding)."""
        return self._ops.paused and not self._space.due(time.monotonic(), 0)

    def wrote(self, n: int) -> None:
        """``n`` bytes were written."""
        self._space.wrote(n)

    def reason(self, still_paused: str | None = None) -> str:
        """The gap record's reason for records held back: until writing resumed, or, when the gap is written
        while still paused (with a file's capture_end, at shutdown), that it had not resumed ``still_paused``."""
        p = self._policy
        head = f"low_disk: free space under --min-free-mb ({p.min_free / MIB:g} MB); records were not written " \
            "(forwarding went on)"
        resume = (p.min_free + p.hysteresis) / MIB
        if still_paused is None:
            return f"{head} until {resume:g} MB were free again"
        return f"{head}; still paused {still_paused} (writing resumes once {resume:g} MB are free)"

    def paused_why(self) -> str:
        """Why a record someone waits for (admin ``Mark``) was not written while paused."""
        p = self._policy
        return (f"the capture is paused: free space is under --min-free-mb ({p.min_free / MIB:g} MB); writing resumes "
                f"once {(p.min_free + p.hysteresis) / MIB:g} MB are free")  # fmt: skip

    def paused_for(self, pending: int, held: int) -> bool:
        """Whether ``pending`` more bytes must wait (``held``: records held back so far, for the log)."""
        if not self._policy.min_free:
            return False
        now = time.monotonic()
        if self._space.due(now, pending):
            try:
                _, free = self._usage(self._dir)
            except OSError:
                free = self._space.free
            self._space.measured(now, free)
        was = self._ops.paused
        # Resumed with room for 0 bytes, a writer whose batches are large (1 MB tensors) paused again with its
        # next batch: "resumed" and "paused" logged every check, 2 s apart, with nothing written in between.
        # A batch that fits is written, whatever did not before.
        need = pending or (self._blocked if was else 0)
        paused = self._policy.paused(self._space.free, need, was)
        if not paused:
            self._blocked = 0
        elif pending:
            self._blocked = pending
        if paused != was:
            self._ops.paused = paused
            if paused:
                self._ops.pauses += 1
                log.warning("capture_paused_low_disk", free_bytes=self._space.free, min_free_bytes=self._policy.min_free,
                            note="forwarding goes on; records are counted and a gap record follows")  # fmt: skip
            else:
                log.warning("capture_resumed", free_bytes=self._space.free, not_written=held)
        return paused


def prepare_directory(directory: Path) -> None:
    """Create the capture directory (0700) and prove it is writable, or raise :class:`UserError`."""
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        probe = directory / f".triton-tap-probe-{os.getpid()}"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        probe.unlink()
    except OSError as e:
        raise UserError(f"capture directory {str(directory)!r} is not writable: {e.strerror or e}") from None

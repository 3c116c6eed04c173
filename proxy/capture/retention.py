"""The capture directory as the writer's thread sees it: what retention may delete, whether the live file is still there.

Runs in the writer thread only (file-system calls, no asyncio). The decisions are
:mod:`proxy.capture.budget`'s; this module measures and acts, and keeps the counters the metrics read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog

from proxy.capture.budget import CaptureFile, to_remove
from replay.capture.reader import capture_file_key

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


def scan(directory: Path, live: Path) -> tuple[list[CaptureFile], int]:
    """The closed capture files of ``directory`` (any proxy run), and the live file's size."""
    closed: list[CaptureFile] = []
    live_size = 0
    with os.scandir(directory) as it:
        for entry in it:
            key = capture_file_key(entry.name)
            if key is None:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if entry.name == live.name:
                live_size = st.st_size
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            closed.append(CaptureFile(name=entry.name, size=st.st_size, order=(key[0], key[1], entry.name)))
    return closed, live_size


def enforce(directory: Path, live: Path, live_limit: int, max_total: int, ops: CaptureOps) -> list[CaptureFile]:
    """Delete the oldest closed files beyond the budget; the ones actually deleted, oldest first."""
    closed, live_size = scan(directory, live)
    doomed = to_remove(closed, live_limit, max_total)
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
    gone = sum(f.size for f in removed)
    ops.files_removed += len(removed)
    ops.bytes_removed += gone
    ops.dir_bytes = sum(f.size for f in closed) - gone + live_size
    if removed:
        log.warning("retention_removed_files", files=[f.name for f in removed], bytes=gone,
                    max_total_bytes=max_total, dir_bytes=ops.dir_bytes)  # fmt: skip
    return removed


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

"""How and where a capture is written (``triton-tap record``'s capture flags, as the writer takes them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from proxy.capture import retention
from proxy.capture.retention import DiskUsage


@dataclass
class WriterOptions:
    """How and where the capture is written."""

    directory: Path
    rotate_bytes: int | None = None
    gzip_rotated: bool = False
    #: ``zstd``, ``gzip`` or ``none``: how each written batch is stored (see :mod:`proxy.capture.sink`).
    compress: str = "none"
    max_queue: int = 200_000
    #: Called in the writer thread with each encoded batch before it is written: tests use it to
    #: inject faults (ENOSPC) and slowness without a real full disk.
    before_write: Callable[[bytes], None] | None = None
    #: ``--max-total-mb`` in bytes (retention of the oldest closed files), or None; needs ``rotate_bytes``.
    max_total_bytes: int | None = None
    #: ``--min-free-mb`` in bytes; None: :func:`~proxy.capture.budget.default_min_free`; 0: no pause.
    min_free_bytes: int | None = None
    #: How often the live file's identity is checked (and free space measured at the latest).
    check_interval_s: float = 2.0
    #: Injectable so tests can shrink the disk without one (the real one is statvfs).
    disk_usage: DiskUsage = retention.statvfs_usage
    #: The stem of the capture's file names (``record --workers``: the worker's chain in its set);
    #: None: ``capture-<stamp>-<pid>`` of this process.
    stem: str | None = None

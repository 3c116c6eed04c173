"""The capture writer: keeps file I/O off the data plane and never loses a record silently.

The data plane calls :meth:`CaptureWriter.emit`, which only appends to a deque. One asyncio task
hands whole batches to one dedicated thread, which encodes them (``seq`` is assigned there, so it
stays gap-free even when records are dropped) and appends them to the file with one ``write``.

Failure policy: when a write fails (disk full, I/O error) the file is truncated back to the last
complete batch, the batch's records are counted as dropped, and as soon as a write succeeds again
a ``gap`` record says how many were lost and why. The same happens when the queue exceeds its
bound because the disk is slower than the traffic: the data plane is never slowed by the capture.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import gzip
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from replay.capture import events as ev
from replay.capture import naming
from replay.capture.schema import encode
from replay.errors import UserError

log = structlog.get_logger("triton_tap.writer")

#: The writer task hands what is queued to the writer thread at most this often (and at once when
#: FLUSH_AT records are queued): no wake-up per call on the data plane.
FLUSH_INTERVAL_S = 0.02
FLUSH_AT = 4096


@dataclass
class WriterOptions:
    """How and where the capture is written."""

    directory: Path
    rotate_bytes: int | None = None
    gzip_rotated: bool = False
    max_queue: int = 200_000
    #: Called in the writer thread with each encoded batch before it is written: tests use it to
    #: inject faults (ENOSPC) and slowness without a real full disk.
    before_write: Callable[[bytes], None] | None = None
    #: The stem of the capture's file names (``record --workers``: the worker's chain in its set);
    #: None: ``capture-<stamp>-<pid>`` of this process.
    stem: str | None = None


@dataclass
class _Gap:
    dropped: int = 0
    reason: str = ""
    first_t_ns: int = 0
    last_t_ns: int = 0

    def add(self, records: list[Any], reason: str) -> None:
        if not records:
            return
        if not self.dropped:
            self.first_t_ns = records[0].t_ns
            self.reason = reason
        self.dropped += len(records)
        self.last_t_ns = records[-1].t_ns


@dataclass
class _Counts:
    kinds: dict[str, int] = field(default_factory=dict)
    causes: dict[str, int] = field(default_factory=dict)
    dropped: int = 0


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


class CaptureWriter:
    """Owns the capture files of one proxy run."""

    def __init__(self, options: WriterOptions, start: ev.CaptureStarted) -> None:
        self._opt = options
        self._start = start
        self._queue: collections.deque[Any] = collections.deque()
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="triton-tap-writer")
        # Writer-thread state (touched only from the writer thread after open()).
        self._seq = 0
        self._fd = -1
        self._offset = 0
        self._file_index = 0
        self._gap = _Gap()
        self._queue_gap = _Gap()
        self._failing = False
        self._counts = _Counts()
        self.written = 0  # records written (writer thread); read by the metrics at scrape time
        self._stem = options.stem or naming.stem(naming.stamp(start.t_ns), os.getpid())
        self.paths: list[Path] = []

    # -- data plane side -------------------------------------------------------------------

    def emit(self, record: Any) -> None:
        """Queue one record; never blocks, never raises."""
        q = self._queue
        if len(q) >= self._opt.max_queue:
            # The disk cannot keep up: drop (and count) rather than slow the traffic down.
            self._queue_gap.add([record], "queue_full: the capture disk is slower than the traffic")
            return
        q.append(record)
        if len(q) == FLUSH_AT:
            self._wake.set()

    @property
    def backlog(self) -> int:
        """Records waiting to be written."""
        return len(self._queue)

    def stats(self) -> tuple[int, int, int]:
        """(records written, records dropped, backlog), for the metrics (any thread; a snapshot)."""
        return self.written, self._counts.dropped + self._queue_gap.dropped, len(self._queue)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        """The file currently written."""
        return self.paths[-1]

    def open(self) -> None:
        """Create the first capture file and write ``capture_start`` (synchronously, at start-up)."""
        self._open_file()
        try:
            self._write_batch([self._start])
        except BaseException:
            self.abandon()
            raise
        self._task = asyncio.get_running_loop().create_task(self._run(), name="triton-tap-capture-writer")

    def abandon(self) -> None:
        """Start-up failed before any call: remove the file (a capture_start alone is no evidence of anything)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        while self.paths:
            self.paths.pop().unlink(missing_ok=True)
        self._pool.shutdown(wait=False)

    async def close(self, counts_extra: dict[str, int] | None = None) -> None:
        """Write everything queued, then ``capture_end``, and close the file."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._pool, self._finish, counts_extra or {}, self._take_queue_gap())
        self._pool.shutdown(wait=True)

    def _take_queue_gap(self) -> _Gap:
        # Swapped on the loop thread, where emit() adds to it, so no drop is lost between threads.
        qg, self._queue_gap = self._queue_gap, _Gap()
        return qg

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                # Check closing before sleeping: close() may have set the wake-up flag that an
                # earlier batch already consumed.
                if self._closing:
                    return
                # A tick, not a wake-up per record: waking this task (then the writer thread, then
                # the loop's self-pipe when the batch is done) once per call cost ~240 us of CPU per
                # unary call. close() and a full batch still wake it at once.
                try:
                    await asyncio.wait_for(self._wake.wait(), FLUSH_INTERVAL_S)
                except TimeoutError:
                    pass
                self._wake.clear()
                continue
            batch = list(self._queue)
            self._queue.clear()
            await loop.run_in_executor(self._pool, self._write_batch, batch, self._take_queue_gap())

    # -- writer thread -----------------------------------------------------------------------

    def _file_name(self) -> str:
        return naming.file_name(self._stem, self._file_index)

    def _open_file(self) -> None:
        path = self._opt.directory / self._file_name()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        self._offset = 0
        self.paths.append(path)

    def _encode(self, records: list[Any]) -> bytes:
        lines = []
        seq = self._seq
        for r in records:
            lines.append(encode(r, seq))
            seq += 1
        return b"".join(lines)

    def _write_batch(self, records: list[Any], queue_gap: _Gap | None = None, may_rotate: bool = True) -> None:
        if queue_gap is not None and queue_gap.dropped:
            # Queue-overflow drops join the gap that this (or the next successful) write reports.
            self._counts.dropped += queue_gap.dropped
            if not self._gap.dropped:
                self._gap = queue_gap
            else:
                self._gap.dropped += queue_gap.dropped
                self._gap.last_t_ns = queue_gap.last_t_ns
        pending: list[Any] = []
        if self._gap.dropped:
            g = self._gap
            pending.append(
                ev.GapRecorded(
                    t_ns=time.time_ns(),
                    dropped=g.dropped,
                    reason=g.reason,
                    first_t_ns=g.first_t_ns,
                    last_t_ns=g.last_t_ns,
                )
            )
        pending.extend(records)
        data = self._encode(pending)
        try:
            if self._opt.before_write is not None:
                self._opt.before_write(data)
            self._write_all(data)
        except OSError as e:
            self._rollback()
            self._gap.add(records, f"write_error: {e}")
            self._counts.dropped += len(records)
            if not self._failing:
                self._failing = True
                log.warning("capture_write_failed", error=str(e), path=str(self.path),
                            note="dropping records until writing works again; a gap record will say how many")
            return
        self._seq += len(pending)
        self._offset += len(data)
        self.written += len(pending)
        if self._failing or self._gap.dropped:
            log.warning("capture_write_resumed", dropped=self._gap.dropped, reason=self._gap.reason)
            self._failing = False
            self._gap = _Gap()
        kinds = self._counts.kinds
        for r in pending:
            kinds[r.kind] = kinds.get(r.kind, 0) + 1
            if r.kind == "call_end":
                causes = self._counts.causes
                causes[r.cause] = causes.get(r.cause, 0) + 1
        if may_rotate and self._opt.rotate_bytes is not None and self._offset >= self._opt.rotate_bytes:
            self._rotate()

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def _rollback(self) -> None:
        # A partial write must not leave half a line in the middle of the file.
        try:
            os.ftruncate(self._fd, self._offset)
        except OSError:
            pass

    def _end_record(self, reason: str, extra: dict[str, int], next_file: str | None) -> ev.CaptureEnded:
        counts: dict[str, int] = {f"records.{k}": v for k, v in sorted(self._counts.kinds.items())}
        counts.update({f"calls.{k}": v for k, v in sorted(self._counts.causes.items())})
        counts["dropped"] = self._counts.dropped
        counts.update(extra)
        return ev.CaptureEnded(t_ns=time.time_ns(), reason=reason, counts=counts, next_file=next_file)

    def _rotate(self) -> None:
        self._file_index += 1
        next_name = self._file_name()
        self._write_batch([self._end_record("rotate", {}, next_name)], may_rotate=False)
        old = self.path
        os.close(self._fd)
        if self._opt.gzip_rotated:
            packed = old.with_name(old.name + naming.GZIP_SUFFIX)
            with open(old, "rb") as src, gzip.open(packed, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.chmod(packed, 0o600)
            old.unlink()
            self.paths[-1] = packed
        self._open_file()
        start = ev.CaptureStarted(
            t_ns=time.time_ns(),
            proxy_version=self._start.proxy_version,
            listen=self._start.listen,
            upstream=self._start.upstream,
            options=self._start.options,
            file_index=self._file_index,
            capture_set=self._start.capture_set,
            worker=self._start.worker,
            workers=self._start.workers,
        )
        self._write_batch([start], may_rotate=False)

    def _finish(self, extra: dict[str, int], queue_gap: _Gap) -> None:
        # The writer task has returned, so the queue is empty; a pending gap goes out first.
        if queue_gap.dropped or self._gap.dropped:
            self._write_batch([], queue_gap, may_rotate=False)
        self._write_batch([self._end_record("shutdown", extra, None)], may_rotate=False)
        try:
            os.fsync(self._fd)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = -1

"""The capture writer: keeps file I/O off the data plane and never loses a record silently.

The data plane calls :meth:`CaptureWriter.emit`, which only appends to a deque. One asyncio task
hands whole batches to one dedicated thread, which encodes them (``seq`` is assigned there, so it
stays gap-free even when records are dropped) and appends them to the file with one ``write``.

``--payload full`` message bytes go to the side file (:mod:`proxy.capture.sidefile`), written before
the batch's lines; rotation, retention and the budget count a file and its side file as one.

Failure policy: when a write fails (disk full, I/O error) the file (and its side file) is truncated
back to the last complete batch, the batch's records are counted as dropped, and as soon as a write succeeds again
a ``gap`` record says how many were lost and why. The same happens when the queue exceeds its
bound because the disk is slower than the traffic: the data plane is never slowed by the capture.

Housekeeping for unattended runs (docs/operating.md): ``--max-total-mb`` retention after each new
file (:mod:`proxy.capture.retention`), a pause while free space is under ``--min-free-mb``, a
reopen on request (SIGHUP) and when the live file was deleted or renamed (checked every
``check_interval_s``, also while idle). Each leaves a record in the capture saying what happened.
A requested rotation (admin ``Rotate``, SIGHUP) is an item of the queue (:mod:`proxy.capture.rotation`):
what was emitted before the request is in the file it closes. A record whose caller is told the
outcome (admin ``Mark``: :meth:`CaptureWriter.emit_confirmed`) is confirmed once its batch is stored.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import errno
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from proxy.capture import batch, retention, sidefile
from proxy.capture.budget import MIB
from proxy.capture.gaps import Counts, Gap
from proxy.capture.nap import Nap
from proxy.capture.options import WriterOptions as WriterOptions  # re-exported: the writer's options
from proxy.capture.retention import CaptureOps, DiskGate
from proxy.capture.rotation import Rotation, segments
from proxy.capture.sidefile import SideFile
from proxy.capture.sink import make_sink
from replay.capture import events as ev
from replay.capture import liveness, naming
from replay.capture.schema import Encoder

log = structlog.get_logger("triton_tap.writer")

#: The writer task hands what is queued to the writer thread at most this often (at once when FLUSH_AT
#: records are queued): no wake-up per call, nor per write, on the data plane.
FLUSH_INTERVAL_S = 0.02
FLUSH_AT = 4096


class NotWritten(Exception):
    """A confirmed record (:meth:`CaptureWriter.emit_confirmed`) did not reach the capture file: why."""


def _where(records: list[Any]) -> str:
    """Where a gap written with ``records`` (the writer's own, while paused) stands, for its reason."""
    if not records:
        return "at shutdown"  # (_finish writes the pending gap alone, then capture_end)
    end = records[-1]
    if type(end) is ev.CaptureEnded:
        return "at shutdown" if end.next_file is None else "when this file was closed"
    return "as this file began"


class CaptureWriter:
    """Owns the capture files of one proxy run."""

    def __init__(self, options: WriterOptions, start: ev.CaptureStarted) -> None:
        self._opt = options
        self._start = start
        self._queue: collections.deque[Any] = collections.deque()
        self._wake = Nap()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="triton-tap-writer")
        # Writer-thread state (touched only from the writer thread after open()).
        self._seq = 0
        self._fd = -1
        #: The file a rotation just closed (its capture_end names the next one), still locked until the next file
        #: exists: a follow (``tail --follow``) that finds neither the next file nor a writer holding this one
        #: knows the proxy stopped, where a writer that could not create the next file yet will go on in it.
        self._closed_fd = -1
        #: That file, to gzip once it is let go (--gzip-rotated): gzipped before, its lock would stay on a name no
        #: reader reaches, and a follow that opened the .gz would see no writer holding it.
        self._gzip_closed: Path | None = None
        self._offset = 0
        self._side = SideFile()
        self._encoder = Encoder()
        self._sink = make_sink(options.compress)
        self._file_index = 0
        self._name_taken = False  # the last failed create found its name taken (see _retry_index)
        self._gap = Gap()
        self._queue_gap = Gap()
        self._failing = False
        self._counts = Counts()
        self.written = 0  # records written (writer thread); read by the metrics at scrape time
        self.ops = CaptureOps()  # housekeeping counters, read by the metrics at scrape time
        # The live file's records (first seq, first/last event time): what an unlink loses.
        self._file_seq = 0
        self._file_t = (0, 0)
        #: The live file's capture_start while it could not be written yet (disk full): it goes first, with
        #: the next write that works. A file without one reads as a later file of a capture whose earlier
        #: files were not given.
        self._unstarted: ev.CaptureStarted | None = None
        #: Rotations in the queue (loop thread): a batch holding one is cut there (_write_queued).
        self._rotations: list[Rotation] = []
        #: Confirmed records in the queue and who waits for them (loop thread); settled once their batch is handled.
        self._confirms: list[tuple[Any, asyncio.Future[None]]] = []
        #: Of the batch in the writer thread: the ids of its confirmed records, those of them stored, and why
        #: the last records not written were not (set before the batch is handed over, read after it is done).
        self._watch: set[int] = set()
        self._stored: set[int] = set()
        self._lost_why = ""
        #: Set by :meth:`close` when the end could not be written (a full disk, a removed directory): how many
        #: records, the capture_end among them, no file holds, and why. The file reads as a proxy killed.
        self.not_closed: tuple[int, str] | None = None
        self._next_check = 0.0
        self._disk = DiskGate(options.directory, options.disk_usage, options.check_interval_s, self.ops)
        self._stem = options.stem or naming.stem(naming.stamp(start.t_ns), os.getpid())
        self.paths: list[Path] = []
        #: ``tap(first_seq, records, lines)``, called in the writer thread after each successful write.
        self.tap: Callable[[int, list[Any], list[bytes]], None] | None = None
        #: What :meth:`open` wrote (the first file's capture_start, a retention note), each batch as ``tap``
        #: gets it: a tap attached later (``record --admin`` binds its port once the capture file exists) is
        #: given them, so a Tail ``--from-seq 0`` starts where the file does.
        self.opening: list[tuple[int, list[Any], list[bytes]]] = []

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
            self._wake.wake()

    def emit_confirmed(self, record: Any) -> asyncio.Future[None]:
        """:meth:`emit` for a caller that is told the outcome (admin ``Mark``): a future that is done once the
        record is in the capture file, or fails with :class:`NotWritten` saying why it is not (paused for low
        free space, a failed write, no file: it is then counted in a gap like any record). RuntimeError at
        once while the capture is closing, when the writer may have made its last write."""
        if self._closing or self._task is None or self._task.done():
            raise RuntimeError("the capture is closing")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Past the queue's bound, as a rotation: one record someone waits for, never dropped unsaid here.
        self._queue.append(record)
        self._confirms.append((record, done))
        return done

    @property
    def backlog(self) -> int:
        """Records waiting to be written."""
        return len(self._queue)

    def counts(self) -> tuple[dict[str, int], dict[str, int], int]:
        """(records written by kind, calls ended by cause, records dropped), a snapshot (admin ``Status``)."""
        c = self._counts
        # dict(d) of a str-keyed dict copies under the GIL in one C call: safe while the writer thread adds.
        return dict(c.kinds), dict(c.causes), c.dropped + self._queue_gap.dropped

    def stats(self) -> tuple[int, int, int]:
        """(records written, records dropped, backlog), for the metrics (any thread; a snapshot)."""
        return self.written, self._counts.dropped + self._queue_gap.dropped, len(self._queue)

    def request_reopen(self, reason: str = "signal") -> None:
        """Close the live file after what was emitted so far and go on in a new one (SIGHUP; loop thread)."""
        if self._task is None or self._task.done():
            return  # not started, or closed: there is no next record to put in a new file
        if any(r.reopen == reason for r in self._rotations):
            # One the writer has not started yet opens the new file this one asks for: a burst of signals is
            # one reopen, not a file each (a loop of `kill -HUP` queued hundreds, and SIGTERM waited minutes
            # behind them).
            return
        self._queue_rotation(Rotation(reason, self._take_queue_gap(), None))

    def _queue_rotation(self, rotation: Rotation) -> None:
        # Past the queue's bound: a rotation is never dropped, and it takes no record's place.
        self._queue.append(rotation)
        self._rotations.append(rotation)
        self._wake.wake()

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        """The file currently written."""
        return self.paths[-1]

    def open(self) -> None:
        """Create the first capture file and write ``capture_start`` (synchronously, at start-up)."""
        self._open_file()
        tap = self.tap

        def opening(first: int, records: list[Any], lines: list[bytes]) -> None:
            self.opening.append((first, list(records), list(lines)))
            if tap is not None:
                tap(first, records, lines)

        self.tap = opening
        try:
            self._disk.setup(self._opt.min_free_bytes, self._opt.max_total_bytes, self._opt.rotate_bytes)
            self._write_batch([self._start], may_rotate=False)
            self._after_new_file()
        except BaseException:
            self.abandon()
            raise
        finally:
            self.tap = tap
        self._next_check = time.monotonic() + self._opt.check_interval_s
        # The pool starts its thread at the first submit: now, not at the first batch, where the event loop
        # would wait for the new thread to run (0.2-1.7 ms measured) in the middle of the first calls.
        self._pool.submit(lambda: None).result()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="triton-tap-capture-writer")

    def abandon(self) -> None:
        """Start-up failed before any call: remove the file (a capture_start alone is no evidence of anything)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._let_go_closed()
        self._side.close()
        while self.paths:
            p = self.paths.pop()
            p.unlink(missing_ok=True)
            p.with_name(naming.side_name(p.name)).unlink(missing_ok=True)
        self._pool.shutdown(wait=False)

    async def close(self, counts_extra: dict[str, int] | None = None) -> None:
        """Write everything queued, then ``capture_end``, and close the file."""
        self._closing = True
        self._wake.wake()
        if self._task is not None:
            await self._task
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._pool, self._finish, counts_extra or {}, self._take_queue_gap())
        self._pool.shutdown(wait=True)

    async def rotate(self) -> tuple[Path, Path]:
        """Start a new file once everything emitted before this call is written (admin ``Rotate``):
        the closed file's final name and the new file's."""
        if self._closing or self._task is None:
            raise RuntimeError("the capture is closing")
        done: asyncio.Future[tuple[Path, Path]] = asyncio.get_running_loop().create_future()
        self._queue_rotation(Rotation(None, self._take_queue_gap(), done))
        return await done

    def _take_queue_gap(self) -> Gap:
        # Swapped on the loop thread, where emit() adds to it, so no drop is lost between threads.
        qg, self._queue_gap = self._queue_gap, Gap()
        return qg

    async def _run(self) -> None:
        try:
            await self._run_batches()
        finally:
            # Stopped with confirmed records never handed over (cancelled): their callers are told, not left waiting.
            confirms, self._confirms = self._confirms, []
            self._settle(confirms)

    def _settle(self, confirms: list[tuple[Any, asyncio.Future[None]]]) -> None:
        """Tell the callers of :meth:`emit_confirmed` (loop thread, once the writer thread is past their batch)."""
        for record, done in confirms:
            if done.done():
                continue  # (the caller gave up waiting)
            if id(record) in self._stored:
                done.set_result(None)
            else:
                done.set_exception(NotWritten(self._lost_why or "the capture writer stopped before writing it"))
        self._stored.clear()
        self._watch = set()

    async def _run_batches(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                # Check closing before sleeping: close() may have set the wake-up flag that an
                # earlier batch already consumed.
                if self._closing:
                    return
                if time.monotonic() >= self._next_check:
                    # Idle housekeeping: a deleted file must not wait for traffic.
                    await loop.run_in_executor(self._pool, self._maintain)
                # A tick, not a wake-up per record: waking this task (then the writer thread, then
                # the loop's self-pipe when the batch is done) once per call cost ~240 us of CPU per
                # unary call. close() and a full batch still wake it at once.
                await self._nap(FLUSH_INTERVAL_S)
                continue
            batch = list(self._queue)
            self._queue.clear()
            confirms = self._confirms
            if confirms:
                self._confirms = []
                self._watch = {id(r) for r, _ in confirms}
                self._lost_why = ""  # (a reason of an earlier batch's is not this one's)
            tick = loop.time() + FLUSH_INTERVAL_S
            try:
                if self._rotations:
                    rotations, self._rotations = self._rotations, []
                    try:
                        await loop.run_in_executor(self._pool, self._write_queued, batch, self._take_queue_gap())
                    finally:
                        for r in rotations:
                            r.settle()
                else:
                    await loop.run_in_executor(self._pool, self._write_batch, batch, self._take_queue_gap())
            finally:
                if confirms:
                    self._settle(confirms)
            # The tick again: with steady traffic the queue is never empty here (~7 records a write).
            if not self._closing and len(self._queue) < FLUSH_AT and (wait := tick - loop.time()) > 0:
                await self._nap(wait)

    async def _nap(self, seconds: float) -> None:
        """Sleep until ``seconds`` have passed or something wakes the writer (a full queue, close, reopen)."""
        await self._wake.sleep(seconds)

    # -- writer thread -----------------------------------------------------------------------

    def _file_name(self) -> str:
        return naming.file_name(self._stem, self._file_index, suffix=self._sink.suffix)

    def _open_file(self) -> None:
        path = self._opt.directory / self._file_name()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        liveness.hold(self._fd)  # readers tell it live until it is closed, or this process dies
        self._offset = 0
        self._side.follow(path)
        self._file_seq = self._seq
        self._file_t = (0, 0)
        self._unstarted = None
        self._encoder = Encoder()  # sparse-encoding state is per file: each file reads on its own
        self.paths.append(path)

    def _cut(self, lines: list[bytes], bodies: list[sidefile.Pending | None] | None) -> int:
        """How many lines go into the live file before it reaches the rotation size (:func:`batch.cut`)."""
        rotate = self._opt.rotate_bytes
        if rotate is None:
            return len(lines)
        if not self._sink.exact_sizes:
            # Compressed: the side file's bytes are exact (raw), and one batch of them can be many times the
            # rotation size (--payload full); the compressed lines' are known only once framed.
            if bodies is None:
                return len(lines)
            return batch.cut(lines, bodies, self._offset + self._side.offset, rotate, line_bytes=False)
        return batch.cut(lines, bodies, self._offset + self._side.offset, rotate)

    def _write_batch(self, records: list[Any], queue_gap: Gap | None = None, may_rotate: bool = True) -> None:
        # may_rotate: a batch of traffic (False: the writer's own records, written even while paused).
        if may_rotate and time.monotonic() >= self._next_check:
            self._maintain()
        if queue_gap is not None and queue_gap.dropped:
            # Queue-overflow drops join the gap that this (or the next successful) write reports.
            self._counts.dropped += queue_gap.dropped
            self._gap = self._gap.joined(queue_gap)
        if self._fd < 0:
            self._counts.dropped += len(records)
            self._gap.add(records, "write_error: no capture file could be created")
            self._lost_why = "no capture file could be created (see the proxy's log)"
            return
        if self._unstarted is not None:
            records = [self._unstarted, *records]
        if may_rotate and self._disk.still_paused():
            # Paused and not time to measure again: drop without encoding (a long pause costs no CPU).
            self._hold_back(records)
            return
        # The writer's own records (capture_end, capture_start, notes) are written while paused, and with them
        # the pending gap: writing has not resumed then, and neither the gap's reason nor the log may say so.
        still_paused = not may_rotate and self.ops.paused
        pending = self._with_gap(records, still_paused)
        lines, bodies = batch.encode(self._encoder, pending, self._seq, self._side.offset)
        rest: list[Any] = []
        if may_rotate and (cut := self._cut(lines, bodies)) < len(lines):
            # A batch may hold thousands of records: the file ends where it reaches the rotation
            # size, and the rest goes on in the next file (encoded again: its seq numbers move by
            # the capture_end/capture_start in between). Keeps files, and so the budget, honest.
            rest, pending, lines = pending[cut:], pending[:cut], lines[:cut]
            bodies = bodies[:cut] if bodies is not None else None
        data = self._sink.frame(b"".join(lines))
        parts = sidefile.flat(bodies) if bodies is not None else None
        side_len = sum(map(len, parts)) if parts is not None else 0
        if may_rotate and self._disk.paused_for(len(data) + side_len, self._gap.dropped):
            self._encoder.reset()  # what this batch said never reached the file
            self._hold_back(records)
            return
        if not self._store(records, data, parts):
            return
        if self._watch:
            self._stored.update(id(r) for r in pending if id(r) in self._watch)
        tap = self.tap
        if tap is not None:
            # record --admin: the records just written, to Tail subscribers (proxy/admin/hub.py), as
            # self-contained lines: a subscriber may start anywhere, so it cannot know what the
            # file's sticky fields repeated. Costs a second encoding only while --admin is on.
            first = self._seq
            tap(first, pending, batch.self_contained(pending, first, bodies, self._side.offset))
        self._seq += len(pending)
        self._offset += len(data)
        self._side.offset += side_len
        self._disk.wrote(len(data) + side_len)
        self.written += len(pending)
        if pending:
            self._file_t = (self._file_t[0] or pending[0].t_ns, pending[-1].t_ns)
        if self._failing or self._gap.dropped:
            if self._failing or not still_paused:
                log.warning("capture_write_resumed", dropped=self._gap.dropped, reason=self._gap.describe())
            self._failing = False
            self._gap = Gap()
        self._unstarted = None
        self._counts.add(pending)
        rotated = True
        if may_rotate and self._opt.rotate_bytes is not None and self._offset + self._side.offset >= self._opt.rotate_bytes:
            # A file deleted or renamed since the last check is closed as such (its loss said), not as a full one.
            rotated = self._check_live() or self._rotate()
        if rest:
            if rotated:
                self._write_batch(rest)
            else:
                # Still the same file: the rest again after what was written, whole (a cut of it would be
                # followed by the same failing rotation, one line deeper each time).
                self._encoder.reset()  # it was encoded once as if written
                self._write_batch(rest, may_rotate=False)

    def _with_gap(self, records: list[Any], still_paused: bool) -> list[Any]:
        """The records to encode: ``records``, and the gap record of what was not written before them, if any."""
        pending = list(records)
        if self._gap.dropped:
            g = self._gap
            head = g.reason
            if still_paused and head.startswith("low_disk"):
                head = self._disk.reason(still_paused=_where(records))
            reason = g.describe(head)
            gap = ev.GapRecorded(t_ns=time.time_ns(), dropped=g.dropped, reason=reason, first_t_ns=g.first_t_ns,
                                 last_t_ns=g.last_t_ns)  # fmt: skip
            # A new file starts with its capture_start; the gap it reports comes right after.
            pending.insert(1 if records and type(records[0]) is ev.CaptureStarted else 0, gap)
        return pending

    def _store(self, records: list[Any], data: bytes, parts: list[bytes] | None) -> bool:
        """Append a batch: its side-file bytes, then its lines. On failure both files go back to the
        last complete batch and ``records`` (the batch as queued) join the pending gap."""
        try:
            if parts is not None:
                # Before the lines: a line never points at bytes that are not in the side file.
                self._side.write(parts)
            if self._opt.before_write is not None:
                self._opt.before_write(data)
            self._write_all(data)
        except OSError as e:
            self._rollback()
            self._encoder.reset()  # what this batch said never reached the file
            lost = self._not_written(records)
            self._gap.add(lost, f"write_error: {e}")
            self._lost_why = f"the capture could not write it: {e}"
            self._counts.dropped += len(lost)
            if not self._failing:
                self._failing = True
                log.warning("capture_write_failed", error=str(e), path=str(self.path),
                            note="dropping records until writing works again; a gap record will say how many")
            return False
        return True

    def _not_written(self, records: list[Any]) -> list[Any]:
        """Of a batch that did not reach the file, the records lost. Not the file's own framing: its
        capture_start is kept to go first when writing works again, and a rotation's capture_end is written
        again by the rotation, tried again (:meth:`_rotate`)."""
        if records and type(records[0]) is ev.CaptureStarted:
            self._unstarted = records[0]
            records = records[1:]
        if records and type(records[-1]) is ev.CaptureEnded and records[-1].next_file is not None:
            records = records[:-1]
        return records

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def _rollback(self) -> None:
        # A partial write must not leave half a line in the middle of the file, nor bytes no line points at.
        self._side.rollback()
        try:
            os.ftruncate(self._fd, self._offset)
        except OSError:
            pass

    def _retry_index(self) -> None:
        """The index of the next try after a file could not be created: the same one, so the closed file's
        capture_end, which named it, still names the file that comes next (each try took a new index, and a
        reader then counted the never-created names as rotated files not given); the next index only when the
        name was taken by another file (EEXIST)."""
        if self._name_taken:
            self._file_index += 1

    def _end_record(self, reason: str, extra: dict[str, int], next_file: str | None) -> ev.CaptureEnded:
        return ev.CaptureEnded(t_ns=time.time_ns(), reason=reason, counts=self._counts.summary(extra), next_file=next_file)

    def _rotate(self, end_reason: str = "rotate", compress: bool = True) -> bool:
        """Close the live file with ``capture_end`` and go on in the next one. False: that end could not be
        written (disk full), and the file stays live: closed without it, it would read as left by a proxy
        that died, and the next one as a capture whose earlier files were not given. A rotation by size is
        tried again after the next write that works."""
        self._file_index += 1
        written = self.written
        self._write_batch([self._end_record(end_reason, {}, self._file_name())], may_rotate=False)
        if self.written == written:
            self._file_index -= 1
            return False
        old = self.path
        self._closed_fd, self._fd = self._fd, -1  # let go once the next file exists (_let_go_closed)
        self._side.close()
        if compress and self._opt.gzip_rotated and self._opt.compress == "none":
            self._gzip_closed = old
        self._next_file([])
        return True

    def _let_go_closed(self) -> None:
        """The file a rotation closed is let go (the next file exists, or the proxy stops), then gzipped."""
        if self._closed_fd >= 0:
            os.close(self._closed_fd)
            self._closed_fd = -1
        if self._gzip_closed is not None:
            old, self._gzip_closed = self._gzip_closed, None
            self._compress(old)

    def _compress(self, old: Path) -> None:
        gz = retention.compress(old)
        if gz is not None:
            self.paths[self.paths.index(old)] = gz

    def _next_file(self, notes: list[Any]) -> None:
        """Open the file for ``_file_index`` with its ``capture_start`` (then ``notes``), then apply retention."""
        try:
            self._open_file()
        except OSError as e:
            # No file to write to: records are counted as dropped until a later attempt works.
            self._fd = -1
            self._name_taken = e.errno == errno.EEXIST
            log.warning("capture_open_failed", file=self._file_name(), error=str(e))
            self._gap.add(notes, f"write_error: cannot create a capture file: {e}")
            return
        start = dataclasses.replace(self._start, t_ns=time.time_ns(), file_index=self._file_index)
        self._write_batch([start, *notes], may_rotate=False)
        self._let_go_closed()  # (once the next file is held: a follow never finds neither held nor there)
        self._after_new_file()

    def _after_new_file(self) -> None:
        """Retention, once a new file exists: what it removed is written into that file."""
        limit = self._opt.max_total_bytes
        if limit is None or self._opt.rotate_bytes is None:
            return
        removed = retention.enforce(self._opt.directory, self.path, self._opt.rotate_bytes, limit, self.ops)
        if removed:
            self._write_batch([ev.FilesRemoved(
                t_ns=time.time_ns(), reason="retention", files=retention.removed_names(removed),
                size=sum(f.size for f in removed),
                detail=f"--max-total-mb {limit / MIB:g}: capture files in the directory now take "
                f"{self.ops.dir_bytes} bytes, the live file may grow to {self._opt.rotate_bytes}",
            )], may_rotate=False)  # fmt: skip

    # -- housekeeping (writer thread) ----------------------------------------------------------

    def _write_queued(self, items: list[Any], queue_gap: Gap) -> None:
        """A batch with rotations among its records: each rotation done at its place in their order."""
        for records, rotation in segments(items):
            gap = rotation.queue_gap if rotation is not None else queue_gap
            if records or gap.dropped:
                self._write_batch(records, gap)
            if rotation is not None:
                self._do_rotation(rotation)

    def _do_rotation(self, rotation: Rotation) -> None:
        try:
            index = len(self.paths) - 1  # the live file, or the last one when none could be created
            if self._fd < 0:
                # No live file (the last one could not be created): the request is the next attempt.
                self._retry_index()
                self._next_file([])
            elif self._check_live(rotation.reopen):
                # Deleted or renamed since the last check: the capture went on in a new file as such (a gap for
                # what a deleted file held, a note of where a renamed one is), which is also what was asked.
                pass
            else:
                live = self.path.name
                if not self._rotate("rotate" if rotation.reopen is None else "reopen"):
                    raise OSError(f"{self.path.name}: its capture_end could not be written (see the log): it "
                                  "stays the live file")  # fmt: skip
                if rotation.reopen is not None:
                    self._count_reopen(rotation.reopen, live)
            closed = self.paths[index]  # its final name (.gz with --gzip-rotated)
            if self._fd < 0:
                raise OSError(f"{closed.name} is closed but no new capture file could be created (see the log)")
            rotation.result = (closed, self.path)
        except Exception as e:  # the requester is told; a SIGHUP's only word is the log
            log.warning("capture_rotate_failed", error=f"{type(e).__name__}: {e}")
            rotation.error = e

    def _maintain(self) -> None:
        """Every ``check_interval_s``: a file again if there is none; is the live file still there, is there space?"""
        # Before anything else: a try that fails (the directory gone) must wait for the next check too,
        # not come again at the writer's next tick (a warning and a burnt file index each time).
        self._next_check = time.monotonic() + self._opt.check_interval_s
        if self._fd < 0:
            # An earlier file could not be created: try again (the pending gap says what was lost).
            self._retry_index()
            self._next_file([])
            return
        self._check_live()
        if self.ops.paused:
            self._disk.paused_for(0, self._gap.dropped)

    def _count_reopen(self, reason: str, file: str) -> None:
        self.ops.reopens[reason] = self.ops.reopens.get(reason, 0) + 1
        log.info("capture_reopen", reason=reason, file=file)

    def _check_live(self, asked: str | None = None) -> bool:
        """Is the live file still there under its name? False: yes (or it cannot be told); True: it was
        deleted or renamed, and the capture went on in a new file (or tried to: see ``_fd``). Made before
        every close of the live file too, which would otherwise lose a deletion's gap record. ``asked``: the
        reopen requested now (``signal``): a rename before it is logrotate's recipe (rename, then SIGHUP),
        counted as that reopen and logged at info, not warned of as a file moved behind the writer's back."""
        try:
            state = retention.live_state(self._fd, self.path)
        except OSError as e:
            log.warning("capture_check_failed", file=self.path.name, error=str(e))
            return False
        if state == "ok":
            return False
        old, size, first_seq = self.path, self._offset, self._file_seq
        if state == "moved":
            # Still reachable under its new name: close it properly; the new file says where it went.
            side = self._side.fd >= 0
            seqs = (first_seq, self._seq)  # up to the capture_end written into it
            if not self._rotate("reopen", compress=False):
                return False  # (its end could not be written: it stays live, the next check tries again)
            self._count_reopen(asked or state, old.name)
            (log.info if asked else log.warning)("capture_file_moved", file=old.name,
                                                 note="the capture goes on in a new file")  # fmt: skip
            self._write_batch([retention.moved_note(old.name, size, seqs, side, time.time_ns())], may_rotate=False)
            return True
        # Deleted: nothing written there can be read back. Everything the file held is a gap.
        self._count_reopen(state, old.name)
        gap = retention.unlinked_gap(old.name, (first_seq, self._seq - 1), self._file_t)
        # Held until the next file exists, as a rotated one: a follow reading it waits there, not for a next file
        # it would give up on while this writer cannot create one yet.
        self._closed_fd, self._fd = self._fd, -1
        self._side.close()
        self._counts.dropped += gap.dropped
        log.warning("capture_file_unlinked", file=old.name, lost_records=gap.dropped,
                    note="the capture goes on in a new file, starting with a gap record")  # fmt: skip
        self._gap = self._gap.joined(gap)
        self._file_index += 1
        self._next_file([])
        return True

    def _hold_back(self, records: list[Any]) -> None:
        """Records not written for low free space: counted into the pending gap."""
        records = self._not_written(records)
        self._counts.dropped += len(records)
        self.ops.low_disk_dropped += len(records)
        self._gap.add(records, self._disk.reason())
        self._lost_why = self._disk.paused_why()

    def _finish(self, extra: dict[str, int], queue_gap: Gap) -> None:
        # The writer task has returned, so the queue is empty. A live file deleted since the last check (its
        # directory removed) holds nothing anyone can read: found now, its records are the pending gap, not
        # an end written into a file that is gone.
        if self._fd >= 0:
            self._check_live()
        # A pending gap goes out first.
        if queue_gap.dropped or self._gap.dropped:
            self._write_batch([], queue_gap, may_rotate=False)
        self._write_batch([self._end_record("shutdown", extra, None)], may_rotate=False)
        if self._gap.dropped:
            # The end went where the pending gap went: nowhere. No later write will report them, so the stop does.
            self.not_closed = (self._gap.dropped, self._lost_why or "the capture could not be written")
            log.error("capture_not_closed", not_written=self._gap.dropped, reason=self._gap.describe(),
                      path=str(self.path), note="the capture has no capture_end: it reads as a proxy that was killed")  # fmt: skip
        self._let_go_closed()  # no next file will come: the proxy stops
        if self._fd < 0:
            return
        try:
            os.fsync(self._fd)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = -1
        self._side.close(sync=True)

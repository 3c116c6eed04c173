"""A requested rotation (admin Rotate, SIGHUP) takes its place in the record order.

Everything emitted before the request is in the file it closes, everything after it in the next
file; the real writer (thread and all) writes real files, read back line by line.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from proxy.capture.budget import MIB
from proxy.capture.gaps import Gap
from proxy.capture.rotation import Rotation, segments
from proxy.capture.writer import CaptureWriter, NotWritten, WriterOptions
from replay.capture import events as ev
from tests.support.capture import records


def _start() -> ev.CaptureStarted:
    return ev.CaptureStarted(t_ns=1, proxy_version="t", listen="l:1", upstream="u:2", options={})


def _mark(i: int) -> ev.MarkRecorded:
    return ev.MarkRecorded(t_ns=100 + i, note=f"m{i}", labels={})


def _writer(tmp_path: Path, **kw: Any) -> CaptureWriter:
    # No periodic check during a test: only the requests it makes start a new file.
    return CaptureWriter(WriterOptions(directory=tmp_path, stem="cap", check_interval_s=3600, **kw), _start())


async def _until(cond: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def _notes(recs: list[dict[str, Any]]) -> list[str]:
    return [r["note"] for r in recs if r["kind"] == "mark"]


def _kinds(recs: list[dict[str, Any]]) -> list[str]:
    return [r["kind"] for r in recs]


def _seq_runs_on(files: list[list[dict[str, Any]]]) -> bool:
    seqs = [r["seq"] for recs in files for r in recs]
    return seqs == list(range(len(seqs)))


@pytest.mark.parametrize("how", ["rotate", "reopen"])
def test_records_emitted_before_a_rotation_are_in_the_file_it_closes(tmp_path: Path, how: str) -> None:
    """Marks emitted, then Rotate (or SIGHUP's reopen) in the same loop turn, while the records still wait
    in the queue: the closed file holds them before its capture_end; the next file holds only what came after."""

    async def run() -> tuple[CaptureWriter, tuple[Path, Path] | None]:
        w = _writer(tmp_path)
        w.open()
        for i in range(3):
            w.emit(_mark(i))
        got = None
        if how == "rotate":
            got = await w.rotate()
        else:
            w.request_reopen("signal")
            await _until(lambda: len(w.paths) == 2, "the next file")
        w.emit(_mark(3))
        await w.close()
        return w, got

    w, got = asyncio.run(run())
    assert [p.name for p in w.paths] == ["cap.jsonl", "cap-0001.jsonl"]
    if got is not None:
        assert got == (w.paths[0], w.paths[1])
    old, new = records(w.paths[0]), records(w.paths[1])
    assert _kinds(old) == ["capture_start", "mark", "mark", "mark", "capture_end"]
    assert _notes(old) == ["m0", "m1", "m2"] and _notes(new) == ["m3"]
    assert old[-1]["reason"] == how and old[-1]["next_file"] == "cap-0001.jsonl"
    assert _kinds(new) == ["capture_start", "mark", "capture_end"]
    assert _seq_runs_on([old, new])


def test_a_burst_of_reopens_the_writer_has_not_started_is_one(tmp_path: Path) -> None:
    """SIGHUP five times in one loop turn: one new file, not an empty file each (a loop of `kill -HUP` made ~100
    files a second and SIGTERM waited minutes behind them). What comes after is in that new file."""

    async def run() -> CaptureWriter:
        w = _writer(tmp_path)
        w.open()
        w.emit(_mark(0))
        for _ in range(5):
            w.request_reopen("signal")
        w.emit(_mark(1))
        await _until(lambda: len(w.paths) == 2, "the next file")
        w.request_reopen("signal")  # (once that one was done, a new signal is a new file)
        await _until(lambda: len(w.paths) == 3, "the third file")
        await w.close()
        return w

    w = asyncio.run(run())
    files = [records(p) for p in w.paths]
    assert [_notes(f) for f in files] == [["m0"], ["m1"], []]
    assert _seq_runs_on(files) and w.ops.reopens == {"signal": 2}


def test_rotations_among_records_each_cut_the_capture_where_they_were_asked(tmp_path: Path) -> None:
    """A, Rotate, B, SIGHUP, C emitted in one loop turn (one writer batch): three files, A | B | C."""

    async def run() -> CaptureWriter:
        w = _writer(tmp_path)
        w.open()
        w.emit(_mark(0))
        rotated = asyncio.create_task(w.rotate(), name="test-rotate")
        await asyncio.sleep(0)  # the task queues its rotation now, before B
        w.emit(_mark(1))
        w.request_reopen("signal")
        w.emit(_mark(2))
        assert await rotated == (tmp_path / "cap.jsonl", tmp_path / "cap-0001.jsonl")
        await _until(lambda: len(w.paths) == 3, "the third file")
        await w.close()
        return w

    w = asyncio.run(run())
    files = [records(p) for p in w.paths]
    assert [_notes(f) for f in files] == [["m0"], ["m1"], ["m2"]]
    assert [f[-1]["reason"] for f in files] == ["rotate", "reopen", "shutdown"]
    assert _seq_runs_on(files) and w.ops.reopens == {"signal": 1}


def test_records_the_queue_dropped_before_a_rotation_are_a_gap_in_the_file_it_closes(tmp_path: Path) -> None:
    """The queue overflows, then Rotate: the gap record saying so is in the closed file, with the records
    that were kept; the next file starts clean."""

    async def run() -> CaptureWriter:
        w = _writer(tmp_path, max_queue=2)
        w.open()
        for i in range(5):  # no await in between: 2 queued, 3 dropped
            w.emit(_mark(i))
        await w.rotate()
        w.emit(_mark(5))
        await w.close()
        return w

    w = asyncio.run(run())
    old, new = records(w.paths[0]), records(w.paths[1])
    assert _kinds(old) == ["capture_start", "gap", "mark", "mark", "capture_end"]
    assert old[1]["dropped"] == 3 and old[1]["reason"].startswith("queue_full")
    assert (old[1]["first_t_ns"], old[1]["last_t_ns"]) == (102, 104)
    assert _kinds(new) == ["capture_start", "mark", "capture_end"] and _notes(new) == ["m5"]
    assert _seq_runs_on([old, new])


def test_rotate_after_close_is_refused_and_a_late_reopen_is_ignored(tmp_path: Path) -> None:
    """Once the capture is closing there is no next file: Rotate says so; SIGHUP's reopen does nothing."""

    async def run() -> CaptureWriter:
        w = _writer(tmp_path)
        w.open()
        await w.close()
        with pytest.raises(RuntimeError, match="the capture is closing"):
            await w.rotate()
        w.request_reopen("signal")
        return w

    w = asyncio.run(run())
    assert [p.name for p in w.paths] == ["cap.jsonl"] and w.backlog == 0


def test_segments_cut_a_batch_at_each_rotation() -> None:
    """Pure: the records before each rotation, the rotation; the records after the last with None."""
    r1, r2 = Rotation(None, Gap(), None), Rotation("signal", Gap(), None)
    assert list(segments([1, 2, r1, 3, r2])) == [([1, 2], r1), ([3], r2), ([], None)]
    assert list(segments([1])) == [([1], None)]


def test_a_confirmed_emit_is_written_while_open_and_refused_once_closing(tmp_path: Path) -> None:
    """emit_confirmed (admin Mark): queued and written while the capture is open; RuntimeError from the moment
    close() begins, when the writer may have made its last write (a plain emit then would be lost unsaid)."""

    async def run() -> None:
        w = _writer(tmp_path)
        with pytest.raises(RuntimeError, match="the capture is closing"):  # not open yet: nothing writes it
            w.emit_confirmed(ev.MarkRecorded(t_ns=100, note="before open", labels={}))
        w.open()
        stored = w.emit_confirmed(ev.MarkRecorded(t_ns=101, note="m1", labels={}))
        closing = asyncio.create_task(w.close(), name="test-writer-close")
        await asyncio.sleep(0)  # close() has begun
        with pytest.raises(RuntimeError, match="the capture is closing"):
            w.emit_confirmed(ev.MarkRecorded(t_ns=102, note="m2", labels={}))
        await closing
        assert stored.done() and stored.result() is None  # written by the close's last batches, and said so

    asyncio.run(run())
    recs = records(tmp_path / "cap.jsonl")
    assert _kinds(recs) == ["capture_start", "mark", "capture_end"] and _notes(recs) == ["m1"]


def test_a_confirmed_record_is_refused_once_the_writer_task_has_stopped(tmp_path: Path) -> None:
    """A writer task that died (an unexpected error) settles nothing: a mark queued then would wait for ever
    (`triton-tap mark` sets no deadline). It is refused at once, as while closing."""

    async def run() -> None:
        w = _writer(tmp_path)
        w.open()
        assert w._task is not None
        w._task.cancel()
        await asyncio.gather(w._task, return_exceptions=True)
        with pytest.raises(RuntimeError, match="the capture is closing"):
            w.emit_confirmed(ev.MarkRecorded(t_ns=100, note="too late", labels={}))
        w.abandon()

    asyncio.run(run())


def test_a_confirmed_record_is_confirmed_only_once_it_is_in_the_file(tmp_path: Path) -> None:
    """emit_confirmed's future (admin Mark waits for it): done once the record is stored; while the capture is
    paused for low free space, after a write that failed and with no capture file, NotWritten saying why, and
    the record is counted in the gap as any other (so OK is never said of a mark that is only a gap count)."""
    # Under the floor plus its margin (11 MB), not under the floor (10 MB): writing, and measured before each batch.
    free = [11 * MIB - 1]
    failing = [False]

    def before_write(data: bytes) -> None:
        if failing[0]:
            raise OSError(28, "No space left on device")

    async def run() -> list[str]:
        w = _writer(tmp_path, min_free_bytes=10 * MIB, disk_usage=lambda _d: (1000 * MIB, free[0]),
                    before_write=before_write)  # fmt: skip
        w.open()
        outcomes = []

        async def mark(i: int) -> None:
            try:
                await asyncio.wait_for(w.emit_confirmed(_mark(i)), 30)
            except NotWritten as e:
                outcomes.append(f"m{i}: {e}")
            else:
                outcomes.append(f"m{i}: written")

        await mark(0)
        free[0] = 5 * MIB  # under the floor
        await mark(1)
        free[0] = 12 * MIB  # resumes
        failing[0] = True
        await mark(2)
        failing[0] = False
        (tmp_path / "cap-0001.jsonl").write_bytes(b"not ours")  # the next file cannot be created
        w.request_reopen("signal")
        await mark(3)
        w.request_reopen("signal")  # cap-0002: works
        await mark(4)
        await w.close()
        return outcomes

    outcomes = asyncio.run(run())
    assert outcomes == [
        "m0: written",
        "m1: the capture is paused: free space is under --min-free-mb (10 MB); writing resumes once 11 MB are free",
        "m2: the capture could not write it: [Errno 28] No space left on device",
        "m3: no capture file could be created (see the proxy's log)",
        "m4: written",
    ]
    written = records(tmp_path / "cap.jsonl") + records(tmp_path / "cap-0002.jsonl")
    assert _notes(written) == ["m0", "m4"]
    gaps = [r for r in written if r["kind"] == "gap"]
    assert sum(g["dropped"] for g in gaps) == 3

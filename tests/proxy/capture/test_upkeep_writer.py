"""The writer unattended: retention under --max-total-mb, the --min-free-mb pause, reopen, a deleted or renamed live file.

Retention and the free-space pause run on a real tmpfs of a few MB mounted inside the test's
directory (the tests run as root here; without ``mount`` they are skipped, and the free-space
test falls back to nothing: it needs the real filesystem to fill up). The deleted/renamed file
tests need no small filesystem; a pause that must last over several batches, or meet a renamed
file, sets the free space through ``WriterOptions.disk_usage`` (``_Disk``) instead of filling one.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog

from proxy.capture.budget import MIB
from proxy.capture.writer import CaptureWriter, WriterOptions
from replay.capture import events as ev
from replay.capture.reader import read_capture


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted at a fresh directory, unmounted at teardown."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _start() -> ev.CaptureStarted:
    return ev.CaptureStarted(t_ns=time.time_ns(), proxy_version="t", listen="l:1", upstream="u:2", options={})


def _msg(i: int) -> ev.MessageSeen:
    # ~400 bytes a line: enough to fill megabytes quickly, small enough for many records per file.
    return ev.MessageSeen(t_ns=1000 + i, call=f"c1.{i}", dir="c2s", index=0, size=300, compressed=False,
                          payload="x" * 300)  # fmt: skip


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line]


async def _until(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.01)


def _handled(w: CaptureWriter) -> int:
    written, dropped, _ = w.stats()
    return written + dropped


async def _emit(w: CaptureWriter, first: int, n: int) -> None:
    """Emit n records and wait until the writer thread wrote or dropped them (an empty queue is not enough:
    the batch may still be in the writer thread)."""
    before = _handled(w)
    for i in range(first, first + n):
        w.emit(_msg(i))
        if i % 200 == 0:
            await _until(lambda: w.backlog < 1000, "the writer to catch up")
    await _until(lambda: _handled(w) >= before + n, "the writer to write or drop them")


def _dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir() if p.name.startswith("capture-"))


def test_retention_keeps_the_directory_within_budget(tmpfs: Path) -> None:
    """3+ MB written under a 1 MiB budget: oldest files (an earlier run's first) go, files_removed names them."""
    old = tmpfs / "capture-20000101T000000-1.jsonl"  # an earlier proxy run's file: the oldest of all
    old.write_bytes(b"x" * 200_000)
    budget, rotate = MIB, 128 * 1024
    seen_max = [0]

    def watch(_: bytes) -> None:  # before each write: the directory never exceeds budget + one batch
        seen_max[0] = max(seen_max[0], _dir_bytes(tmpfs))

    async def run() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=tmpfs, rotate_bytes=rotate, max_total_bytes=budget,
                                        min_free_bytes=0, before_write=watch), _start())  # fmt: skip
        w.open()
        await _emit(w, 0, 8000)
        await w.close()
        return w

    w = asyncio.run(run())
    assert not old.exists()
    assert seen_max[0] <= budget + 64 * 1024, seen_max[0]
    assert _dir_bytes(tmpfs) <= budget + 64 * 1024
    left = sorted(p for p in tmpfs.iterdir() if p.name.startswith("capture-"))
    removed: list[str] = []
    for p in left:
        removed += [n for r in _lines(p) if r["kind"] == "files_removed" for n in r["files"]]
    all_files = {p.name for p in w.paths} | {old.name}
    assert old.name in removed or w.ops.files_removed > len(removed)  # the earliest note may itself be gone
    assert set(removed) <= all_files and not (set(removed) & {p.name for p in left})
    assert w.ops.files_removed >= len(set(removed)) > 0 and w.ops.bytes_removed > 0
    # What is left reads as one capture whose start was cut: the holes say so, seq runs on.
    reader = read_capture(tmpfs)
    seqs = [seq for seq, _ in reader]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    kinds = {g.kind for g in reader.gaps}
    assert "missing_file" in kinds and "files_removed" in kinds


def test_low_free_space_pauses_and_resumes_with_a_gap(tmpfs: Path) -> None:
    """Fill the tmpfs to under --min-free-mb: records are counted, not written; space back: a low_disk gap."""
    min_free = 1 * MIB
    filler = tmpfs / "filler"

    async def run() -> tuple[CaptureWriter, int]:
        # check_interval_s=0: free space measured before every batch (the default re-measures every 2 s
        # or when the estimate nears the threshold; the filler below is invisible to the estimate).
        w = CaptureWriter(WriterOptions(directory=tmpfs, min_free_bytes=min_free, check_interval_s=0), _start())
        w.open()
        await _emit(w, 0, 10)
        free = os.statvfs(tmpfs).f_bavail * os.statvfs(tmpfs).f_frsize
        filler.write_bytes(b"\0" * (free - min_free // 2))  # leave half of min_free
        size_before = w.path.stat().st_size
        await _emit(w, 10, 500)
        assert w.ops.paused and w.path.stat().st_size == size_before
        not_written = w.ops.low_disk_dropped
        filler.unlink()
        await _until(lambda: not w.ops.paused, "the writer to resume")
        await _emit(w, 510, 5)
        await w.close()
        return w, not_written

    w, not_written = asyncio.run(run())
    recs = _lines(w.path)
    assert not_written == 500 and w.ops.pauses == 1
    gaps = [r for r in recs if r["kind"] == "gap"]
    assert len(gaps) == 1 and gaps[0]["reason"].startswith("low_disk") and gaps[0]["dropped"] == 500
    assert (gaps[0]["first_t_ns"], gaps[0]["last_t_ns"]) == (1010, 1509)
    calls = [r["call"] for r in recs if r["kind"] == "message"]
    assert calls == [f"c1.{i}" for i in [*range(10), *range(510, 515)]]
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    assert recs[-1]["kind"] == "capture_end" and recs[-1]["counts"]["dropped"] == 500


def test_default_min_free_never_fills_a_small_disk(tmpfs: Path) -> None:
    """No --min-free-mb on a 4 MiB tmpfs: 5 % (~200 KiB) stays free; writing pauses instead of hitting ENOSPC."""

    async def run() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=tmpfs, check_interval_s=0.05), _start())
        w.open()
        await _emit(w, 0, 12000)  # ~5 MB: more than the filesystem holds
        await w.close()
        return w

    w = asyncio.run(run())
    st = os.statvfs(tmpfs)
    assert w.ops.min_free == int(4 * MIB * 0.05)
    assert st.f_bavail * st.f_frsize > 0 and w.ops.paused and w.ops.low_disk_dropped > 0
    recs = _lines(w.path)
    assert recs[-2]["kind"] == "gap" and recs[-2]["reason"].startswith("low_disk")
    assert recs[-1]["kind"] == "capture_end"


async def _sighup_then_close(w: CaptureWriter, seq: int) -> None:
    """SIGHUP's reopen, two more records (from ``seq``) in the file it starts, and the close."""
    first = w.path
    w.request_reopen("signal")
    await _until(lambda: w.path != first, "the next file")
    await _emit(w, seq, 2)
    await w.close()


def _reopen_run(
    tmp_path: Path, act: Callable[[CaptureWriter], None], start: ev.CaptureStarted | None = None
) -> CaptureWriter:
    async def run() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=tmp_path, min_free_bytes=0, check_interval_s=0.05), start or _start())
        w.open()
        await _emit(w, 0, 10)  # two batches after capture_start's: a file's span starts at its first
        await _emit(w, 10, 10)
        first = w.path
        act(w)
        await _until(lambda: w.path != first, "a new capture file")
        await _emit(w, 20, 5)
        await w.close()
        return w

    return asyncio.run(run())


def test_deleted_live_file_is_noticed_and_the_loss_recorded(tmp_path: Path) -> None:
    """rm of the live file (idle proxy): a new file whose gap says how many records went with it; the
    log names the file and the loss (docs/operating.md)."""
    start = _start()
    with structlog.testing.capture_logs() as logs:
        w = _reopen_run(tmp_path, lambda w: w.path.unlink(), start)
    (event,) = [e for e in logs if e["event"] == "capture_file_unlinked"]
    assert (event["file"], event["lost_records"], event["log_level"]) == (w.paths[0].name, 21, "warning")
    assert event["note"] == "the capture goes on in a new file, starting with a gap record"
    assert not w.paths[0].exists()
    recs = _lines(w.path)
    assert [r["kind"] for r in recs[:2]] == ["capture_start", "gap"]
    gap = recs[1]
    assert gap["reason"].startswith("file_unlinked") and gap["dropped"] == 21  # capture_start + 20 messages
    assert (gap["first_t_ns"], gap["last_t_ns"]) == (start.t_ns, 1019)  # its first record's time, its last's
    assert recs[0]["file_index"] == 1 and recs[0]["seq"] == 21
    assert w.ops.reopens == {"unlinked": 1}
    assert [r["call"] for r in recs if r["kind"] == "message"] == [f"c1.{i}" for i in range(20, 25)]


def test_renamed_live_file_is_closed_and_the_capture_goes_on(tmp_path: Path) -> None:
    """mv of the live file: it gets its capture_end (reopen); the new file names it in files_removed (moved)."""
    moved = tmp_path / "moved.jsonl"
    with structlog.testing.capture_logs() as logs:
        w = _reopen_run(tmp_path, lambda w: w.path.rename(moved))
    (event,) = [e for e in logs if e["event"] == "capture_file_moved"]
    assert (event["file"], event["note"], event["log_level"]) == (
        w.paths[0].name, "the capture goes on in a new file", "warning",
    )  # fmt: skip
    old = _lines(moved)
    assert old[-1]["kind"] == "capture_end" and old[-1]["reason"] == "reopen" and old[-1]["next_file"] == w.path.name
    recs = _lines(w.path)
    assert [r["kind"] for r in recs[:2]] == ["capture_start", "files_removed"]
    assert recs[1]["reason"] == "moved" and recs[1]["files"] == [w.paths[0].name]
    # What it held before its capture_end (seq 21), and where its records are.
    assert recs[1]["size"] == len(moved.read_bytes()) - len(moved.read_bytes().splitlines(keepends=True)[-1])
    assert recs[1]["detail"] == (f"{w.paths[0].name} was renamed or replaced while being written; its records "
                                 "(seq 0..21) are in the renamed file, not lost")  # fmt: skip
    assert isinstance(recs[1]["t_ns"], int) and recs[1]["t_ns"] >= recs[0]["t_ns"]
    assert [r["seq"] for r in old + recs] == list(range(len(old) + len(recs)))
    assert w.ops.reopens == {"moved": 1}


def test_a_rename_then_sighup_is_logrotates_reopen_not_a_file_moved_behind_the_writers_back(tmp_path: Path) -> None:
    """logrotate's recipe (docs/operating.md): mv of the live file, then SIGHUP. The SIGHUP finds it renamed: the
    same records as a rename (its capture_end under the new name, files_removed `moved` in the next file), but
    it is the signal's reopen, logged at info: it was counted `moved` and warned of, for doing as documented."""
    moved = tmp_path / "capture.jsonl.1"

    async def run() -> CaptureWriter:
        # No periodic check: only the SIGHUP's request finds the rename.
        w = CaptureWriter(WriterOptions(directory=tmp_path, min_free_bytes=0, check_interval_s=3600), _start())
        w.open()
        await _emit(w, 0, 5)
        w.path.rename(moved)
        await _sighup_then_close(w, 5)
        return w

    with structlog.testing.capture_logs() as logs:
        w = asyncio.run(run())
    (event,) = [e for e in logs if e["event"] == "capture_file_moved"]
    assert event["log_level"] == "info"
    assert w.ops.reopens == {"signal": 1}
    assert _lines(moved)[-1]["kind"] == "capture_end"
    recs = _lines(w.path)
    assert recs[1]["kind"] == "files_removed" and recs[1]["reason"] == "moved" and recs[1]["files"] == [w.paths[0].name]


def test_reopen_request_starts_a_new_file_without_holes(tmp_path: Path) -> None:
    """SIGHUP's path: capture_end(reopen) -> next file; the reader sees one capture with no hole."""
    w = _reopen_run(tmp_path, lambda w: w.request_reopen("signal"))
    assert len(w.paths) == 2
    reader = read_capture(tmp_path)
    recs = list(reader)
    assert reader.gaps == [] and [s for s, _ in recs] == list(range(len(recs)))
    ends = [r for _, r in recs if isinstance(r, ev.CaptureEnded)]
    assert [e.reason for e in ends] == ["reopen", "shutdown"] and ends[0].next_file == w.paths[1].name
    assert w.ops.reopens == {"signal": 1}


def test_a_deleted_later_file_loses_only_its_own_records(tmp_path: Path) -> None:
    """After a reopen, rm of the second file: the gap counts that file's records only (its seq range)."""

    async def run() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=tmp_path, min_free_bytes=0, check_interval_s=0.05), _start())
        w.open()
        await _emit(w, 0, 20)  # seq 0 capture_start, 1..20; 21 its capture_end
        first = w.path
        w.request_reopen("signal")
        await _until(lambda: w.path != first, "the second file")
        await _emit(w, 20, 3)  # seq 22 capture_start, 23..25
        second = w.path
        second.unlink()
        await _until(lambda: w.path != second, "a third file")
        await _emit(w, 23, 2)
        await w.close()
        return w

    w = asyncio.run(run())
    start, gap = _lines(w.path)[:2]
    assert start["file_index"] == 2 and w.path.name == w.paths[0].name.replace(".jsonl", "-0002.jsonl")
    assert gap["kind"] == "gap" and gap["dropped"] == 4
    assert gap["reason"].endswith("the 4 record(s) it held (seq 22..25) are lost")


class _Disk:
    """A filesystem whose free space the test sets (``WriterOptions.disk_usage``): pauses without filling a disk."""

    def __init__(self) -> None:
        self.free = 100 * MIB

    def __call__(self, _directory: Path) -> tuple[int, int]:
        return 1000 * MIB, self.free


def _paused_options(tmp_path: Path, disk: _Disk) -> WriterOptions:
    # check_interval_s=0: free space is measured before every batch, and the live file checked at every turn.
    return WriterOptions(directory=tmp_path, min_free_bytes=10 * MIB, check_interval_s=0, disk_usage=disk)


def test_a_pause_over_several_batches_counts_every_record_not_written(tmp_path: Path) -> None:
    """Free space stays low while three batches arrive: the low-disk metric, the dropped total and the
    one gap record written on resuming all count the three batches' records, not the last batch's."""
    disk = _Disk()

    async def run() -> tuple[CaptureWriter, list[int]]:
        w = CaptureWriter(_paused_options(tmp_path, disk), _start())
        w.open()
        await _emit(w, 0, 2)
        disk.free = 5 * MIB  # under --min-free-mb 10
        seen = []
        for first in (2, 5, 8):  # three batches of three, each handled before the next is queued
            await _emit(w, first, 3)
            seen.append(w.ops.low_disk_dropped)
        disk.free = 100 * MIB
        await _emit(w, 11, 1)
        await w.close()
        return w, seen

    with structlog.testing.capture_logs() as logs:
        w, seen = asyncio.run(run())
    assert seen == [3, 6, 9]
    assert (w.ops.low_disk_dropped, w.ops.pauses, w.ops.paused, w.stats()[1]) == (9, 1, False, 9)
    (resumed,) = [e for e in logs if e["event"] == "capture_resumed"]
    assert resumed["not_written"] == 9
    recs = _lines(w.path)
    assert [r["kind"] for r in recs] == ["capture_start", "message", "message", "gap", "message", "capture_end"]
    gap = recs[3]
    assert gap["reason"].startswith("low_disk") and gap["dropped"] == 9
    assert (gap["first_t_ns"], gap["last_t_ns"]) == (1002, 1010)
    assert recs[-1]["counts"]["dropped"] == 9


def test_a_file_moved_while_paused_still_says_where_its_records_went(tmp_path: Path) -> None:
    """The live file is renamed while writing is paused for low free space: the writer's own records
    are written even while paused, so the new file still starts with files_removed (moved), and that
    note is not counted as a record not written (only the traffic's records are)."""
    disk = _Disk()
    moved = tmp_path / "moved.jsonl"

    async def run() -> CaptureWriter:
        w = CaptureWriter(_paused_options(tmp_path, disk), _start())
        w.open()
        await _emit(w, 0, 3)
        disk.free = 5 * MIB
        await _emit(w, 3, 2)
        assert w.ops.paused
        first = w.path
        first.rename(moved)
        await _until(lambda: w.path != first, "a new capture file")
        await _emit(w, 5, 2)
        await w.close()
        return w

    w = asyncio.run(run())
    assert w.ops.paused and w.ops.reopens == {"moved": 1}
    assert (w.ops.low_disk_dropped, w.stats()[1]) == (4, 4)
    old, new = _lines(moved), _lines(w.path)
    assert old[-1]["kind"] == "capture_end" and old[-1]["next_file"] == w.path.name
    assert [r["kind"] for r in new[:2]] == ["capture_start", "files_removed"]
    assert new[1]["reason"] == "moved" and new[1]["files"] == [w.paths[0].name]
    assert not [r for r in old + new if r["kind"] == "message" and r["call"] not in {"c1.0", "c1.1", "c1.2"}]
    gaps = [r for r in old + new if r["kind"] == "gap"]
    assert sum(g["dropped"] for g in gaps) == 4 and all(g["reason"].startswith("low_disk") for g in gaps)
    assert new[-1]["kind"] == "capture_end" and new[-1]["counts"]["dropped"] == 4


def test_gzip_rotated_leaves_a_moved_file_and_its_replacement_alone(tmp_path: Path) -> None:
    """--gzip-rotated, and the live file is renamed with a new empty file put under its old name (what
    logrotate's ``create`` does): the proxy closes the renamed file where it now is, plain, and neither
    compresses nor removes the file that now has the old name (it is not the proxy's)."""

    async def run() -> tuple[CaptureWriter, Path]:
        opts = WriterOptions(directory=tmp_path, gzip_rotated=True, min_free_bytes=0, check_interval_s=0.05)
        w = CaptureWriter(opts, _start())
        w.open()
        await _emit(w, 0, 5)
        first = w.path
        os.link(first, tmp_path / "moved.jsonl")
        (tmp_path / "empty").write_bytes(b"")
        os.replace(tmp_path / "empty", first)  # the old name never stops existing: always "replaced"
        await _until(lambda: w.path != first, "a new capture file")
        await _emit(w, 5, 2)
        await w.close()
        return w, first

    with structlog.testing.capture_logs() as logs:
        w, first = asyncio.run(run())
    assert [e for e in logs if e["event"] == "capture_gzip_failed"] == []
    assert first.read_bytes() == b"" and w.paths == [first, w.path]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, "moved.jsonl", w.path.name])
    old = _lines(tmp_path / "moved.jsonl")
    assert [r["call"] for r in old if r["kind"] == "message"] == [f"c1.{i}" for i in range(5)]
    assert old[-1]["kind"] == "capture_end" and old[-1]["reason"] == "reopen"
    new = _lines(w.path)
    assert new[1]["kind"] == "files_removed" and new[1]["reason"] == "moved" and new[1]["files"] == [first.name]
    assert w.ops.reopens == {"moved": 1}


def test_a_live_file_that_cannot_be_checked_is_logged_and_the_capture_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check of the live file fails (``fstat`` gives EIO): a warning names the file and the error,
    and the capture goes on in the same file, nothing reopened or lost."""
    import errno

    from proxy.capture import retention

    def broken(_fd: int, _path: Path) -> str:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(retention, "live_state", broken)

    async def run() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=tmp_path, min_free_bytes=0, check_interval_s=0), _start())
        w.open()
        await _emit(w, 0, 5)
        await w.close()
        return w

    with structlog.testing.capture_logs() as logs:
        w = asyncio.run(run())
    failed = [e for e in logs if e["event"] == "capture_check_failed"]
    assert failed, [e["event"] for e in logs]
    assert {(e["file"], e["error"], e["log_level"]) for e in failed} == {
        (w.paths[0].name, "[Errno 5] Input/output error", "warning"),
    }  # fmt: skip
    assert len(w.paths) == 1 and w.ops.reopens == {} and w.stats()[:2] == (7, 0)
    recs = _lines(w.path)
    assert [r["call"] for r in recs if r["kind"] == "message"] == [f"c1.{i}" for i in range(5)]


def test_records_after_a_reopen_request_go_to_the_new_file(tmp_path: Path) -> None:
    """SIGHUP while records keep coming (logrotate's postrotate): what arrives after the request is
    written to the new file, never appended to the one just closed (logrotate may compress it next)."""

    async def run() -> CaptureWriter:
        # No periodic check during the test: only the request itself can start the new file.
        w = CaptureWriter(WriterOptions(directory=tmp_path, min_free_bytes=0, check_interval_s=3600), _start())
        w.open()
        await _emit(w, 0, 3)
        w.request_reopen("signal")
        w.emit(_msg(3))  # in the same loop turn as the request: the writer sees both at once
        await _until(lambda: _handled(w) >= 7, "the record written")  # start, 3, end, start, 1
        await w.close()
        return w

    w = asyncio.run(run())
    old, new = _lines(w.paths[0]), _lines(w.paths[1])
    assert [r["call"] for r in old if r["kind"] == "message"] == ["c1.0", "c1.1", "c1.2"]
    assert old[-1]["kind"] == "capture_end" and old[-1]["reason"] == "reopen"
    assert [r["call"] for r in new if r["kind"] == "message"] == ["c1.3"]
    assert w.ops.reopens == {"signal": 1}


def test_workers_sharing_a_budget_never_delete_each_others_live_file(tmp_path: Path) -> None:
    """`record --workers 2 --max-total-mb`: two writers, two chains, one directory, each enforcing the budget.
    Neither deletes the other's live file (each told it closed, oldest first: w0's went first, and its records
    with it, a `file_unlinked` gap); the oldest closed files still go, and room is kept for both live files."""
    budget, rotate = 600 * 1024, 64 * 1024
    set_stem = "capture-20261207T000000-7"
    sizes: list[int] = []  # the directory's size after each batch: the budget holds all along, not only at the end

    async def run() -> list[CaptureWriter]:
        ws = [CaptureWriter(WriterOptions(directory=tmp_path, rotate_bytes=rotate, max_total_bytes=budget,
                                          min_free_bytes=0, stem=f"{set_stem}.w{k}"), _start())
              for k in range(2)]  # fmt: skip
        for w in ws:
            w.open()
        for first in range(0, 6000, 500):
            for w in ws:  # (in turns, so that each rotates while the other's live file is older than its closed ones)
                await _emit(w, first, 500)
                sizes.append(_dir_bytes(tmp_path))
        for w in ws:
            await w.close()
        return ws

    with structlog.testing.capture_logs() as logs:
        ws = asyncio.run(run())
    assert not [e for e in logs if e["event"] == "capture_file_unlinked"], logs
    assert all(w.ops.reopens == {} for w in ws), [w.ops.reopens for w in ws]
    assert sum(w.ops.files_removed for w in ws) > 0
    # Room kept for one live file only would let the other's take the directory over the budget (656 KiB here).
    assert max(*sizes, _dir_bytes(tmp_path)) <= budget, sizes
    for w in ws:
        # Only closed files went, oldest first: what is left of each chain runs on to its last file, no hole in it
        # (a live file deleted is noticed only at the writer's next check, and leaves one).
        left = [p.exists() for p in w.paths]
        assert left[-1] and left == sorted(left), [p.name for p, there in zip(w.paths, left, strict=True) if not there]


class _Clock:
    """The writer module's ``time`` with a monotonic clock the test moves (wall time stays real)."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    @staticmethod
    def time_ns() -> int:
        return time.time_ns()


def test_a_vanished_capture_directory_is_tried_again_once_per_check_not_per_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The capture directory is removed and a reopen cannot create the next file: the writer tries again
    at the next check, and then not before the check after it, however many batches and idle ticks come
    in between (each try is a warning); the directory back, the next check's try works, under the name the
    first try had (a try that found no file to create took no index)."""
    from proxy.capture import writer as writer_module

    clock = _Clock()
    monkeypatch.setattr(writer_module, "time", clock)
    cap = tmp_path / "cap"
    cap.mkdir()

    def failures(logs: list[dict[str, Any]]) -> int:
        return len([e for e in logs if e["event"] == "capture_open_failed"])

    async def run(logs: list[dict[str, Any]]) -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=cap, min_free_bytes=0, check_interval_s=2.0), _start())
        w.open()
        await _emit(w, 0, 2)
        for p in cap.iterdir():
            p.unlink()
        cap.rmdir()
        w.request_reopen("signal")
        await _until(lambda: failures(logs) == 1, "the reopen's failed try")
        clock.now += 2.5  # the check is due: one more try
        await _until(lambda: failures(logs) == 2, "the check's try")
        for first in range(2, 12, 2):  # five batches and their ticks, all before the next check
            await _emit(w, first, 2)
        assert failures(logs) == 2
        cap.mkdir()
        clock.now += 2.5
        await _until(lambda: len(w.paths) == 2, "a capture file again")
        await _emit(w, 12, 1)
        await w.close()
        return w

    with structlog.testing.capture_logs() as logs:
        w = asyncio.run(run(logs))
    assert failures(logs) == 2
    assert [p.name for p in w.paths] == [w.paths[0].name, w.paths[0].name.replace(".jsonl", "-0001.jsonl")]
    recs = _lines(w.path)
    assert [r["kind"] for r in recs] == ["capture_start", "gap", "message", "capture_end"]
    # The live file went with its directory (3 records, noticed by the reopen), then 10 records had no file.
    assert recs[1]["dropped"] == 13 and recs[1]["reason"].startswith(f"file_unlinked: {w.paths[0].name} was deleted")


@pytest.mark.parametrize("how", ["signal", "rotate", "size"])
def test_a_live_file_deleted_just_before_it_is_closed_still_leaves_its_gap(tmp_path: Path, how: str) -> None:
    """rm of the live file, then, before any periodic check (there is none in this test), the file is closed
    by a reopen (SIGHUP), an admin rotate or its rotation size: the close notices the deletion, and the new
    file starts with the file_unlinked gap counting every record the deleted file held, as the periodic check's
    would; the log and the reopen counter say unlinked, not an ordinary reopen."""

    async def run() -> tuple[CaptureWriter, tuple[Path, Path] | None]:
        opts = WriterOptions(directory=tmp_path, min_free_bytes=0, check_interval_s=3600,
                             rotate_bytes=16 * 1024 if how == "size" else None)  # fmt: skip
        w = CaptureWriter(opts, _start())
        w.open()
        await _emit(w, 0, 5)
        first = w.path
        first.unlink()
        answer = None
        if how == "signal":
            w.request_reopen("signal")
        elif how == "rotate":
            answer = await w.rotate()
        else:
            await _emit(w, 5, 60)  # ~24 KB: the file reaches its rotation size within this batch
        await _until(lambda: w.path != first, "a new capture file")
        await _emit(w, 100, 2)
        await w.close()
        return w, answer

    with structlog.testing.capture_logs() as logs:
        w, answer = asyncio.run(run())
    assert not w.paths[0].exists()
    (event,) = [e for e in logs if e["event"] == "capture_file_unlinked"]
    assert not [e for e in logs if e["event"] == "capture_reopen" and e["reason"] != "unlinked"]
    assert w.ops.reopens == {"unlinked": 1}
    second = _lines(w.paths[1])
    start, gap = second[:2]
    assert start["kind"] == "capture_start" and gap["kind"] == "gap"
    # Everything the deleted file held, its capture_start included: every seq before the new file's.
    assert gap["reason"].startswith(f"file_unlinked: {w.paths[0].name} was deleted while being written")
    assert gap["dropped"] == start["seq"] == event["lost_records"] >= 6
    assert gap["reason"].endswith(f"(seq 0..{start['seq'] - 1}) are lost")
    if answer is not None:
        assert answer == (w.paths[0], w.paths[1])
    kept = [r["call"] for p in w.paths[1:] for r in _lines(p) if r["kind"] == "message"]
    assert kept[-2:] == ["c1.100", "c1.101"]


def test_a_gap_written_while_still_paused_does_not_say_writing_resumed(tmp_path: Path) -> None:
    """Free space stays under the floor through a reopen (SIGHUP) and the shutdown: the pending low_disk gap
    goes into the file the reopen closes and into the last file, each saying the capture was still paused
    there, not "until ... MB were free again"; nothing logs a resume, and the capture stays paused."""
    disk = _Disk()

    async def run() -> CaptureWriter:
        w = CaptureWriter(_paused_options(tmp_path, disk), _start())
        w.open()
        await _emit(w, 0, 2)
        disk.free = 5 * MIB  # under --min-free-mb 10, for good
        await _emit(w, 2, 3)
        await _sighup_then_close(w, 5)
        return w

    with structlog.testing.capture_logs() as logs:
        w = asyncio.run(run())
    assert not [e for e in logs if e["event"] in ("capture_write_resumed", "capture_resumed")]
    assert w.ops.paused and w.ops.low_disk_dropped == 5 and w.stats()[1] == 5
    old, new = _lines(w.paths[0]), _lines(w.paths[1])
    assert [r["kind"] for r in old] == ["capture_start", "message", "message", "gap", "capture_end"]
    assert [r["kind"] for r in new] == ["capture_start", "gap", "capture_end"]
    head = "low_disk: free space under --min-free-mb (10 MB); records were not written (forwarding went on); "
    resume = "(writing resumes once 11 MB are free)"
    assert old[3]["reason"] == f"{head}still paused when this file was closed {resume}"
    assert new[1]["reason"] == f"{head}still paused at shutdown {resume}"
    assert (old[3]["dropped"], old[3]["first_t_ns"], old[3]["last_t_ns"]) == (3, 1002, 1004)
    assert (new[1]["dropped"], new[1]["first_t_ns"], new[1]["last_t_ns"]) == (2, 1005, 1006)
    assert new[-1]["counts"]["dropped"] == 5


def test_a_file_that_could_not_be_created_for_a_while_keeps_the_chain_its_predecessor_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rotation whose next file cannot be created (the directory unwritable for a while; EACCES here): the
    closed file's capture_end names that file, and the try that works creates it under that name. Each try took
    a new index, so the next real file was -0007 and `replay check` reported rotated files 2-6 'not given',
    files that never existed, beside the gap record that counts what was lost."""
    from proxy.capture import writer as writer_module

    clock = _Clock()
    monkeypatch.setattr(writer_module, "time", clock)
    real_open = os.open
    refused = {"on": False}

    def open_(path: Any, flags: int, mode: int = 0o777) -> int:
        if refused["on"] and str(path).endswith("-0001.jsonl"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, mode)

    monkeypatch.setattr(writer_module.os, "open", open_)

    def failures(logs: list[dict[str, Any]]) -> int:
        return len([e for e in logs if e["event"] == "capture_open_failed"])

    async def run(logs: list[dict[str, Any]]) -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=tmp_path, min_free_bytes=0, check_interval_s=2.0), _start())
        w.open()
        await _emit(w, 0, 2)
        refused["on"] = True
        with pytest.raises(OSError, match="no new capture file could be created"):
            await w.rotate()
        for n in range(3):  # each check tries again, and fails
            clock.now += 2.5
            await _until(lambda n=n: failures(logs) == 2 + n, "a check's try")  # type: ignore[misc]
        await _emit(w, 2, 2)  # no file: counted into the gap
        refused["on"] = False
        clock.now += 2.5
        await _until(lambda: len(w.paths) == 2, "a capture file again")
        await _emit(w, 4, 1)
        await w.close()
        return w

    with structlog.testing.capture_logs() as logs:
        w = asyncio.run(run(logs))
    first = w.paths[0].name
    assert [p.name for p in w.paths] == [first, first.replace(".jsonl", "-0001.jsonl")]
    assert _lines(w.paths[0])[-1]["next_file"] == w.paths[1].name
    reader = read_capture(w.paths)
    list(reader)
    assert [g.kind for g in reader.gaps] == ["gap_record"]

"""The capture writer: gap-free seq, gap records on write failure, rotation, permissions."""

from __future__ import annotations

import asyncio
import errno
import stat
import time
from pathlib import Path
from typing import Any

import pytest
import structlog

from proxy.capture.writer import CaptureWriter, WriterOptions
from replay.capture import events as ev
from replay.capture import liveness
from replay.capture.reader import read_capture
from tests.support.capture import dense, records
from tests.support.writer import write_batches


def _start() -> ev.CaptureStarted:
    return ev.CaptureStarted(t_ns=1, proxy_version="t", listen="l:1", upstream="u:2", options={})


def _half(i: int) -> ev.HalfClosed:
    return ev.HalfClosed(t_ns=100 + i, call=f"c1.{i}")


def _lines(paths: list[Path]) -> list[dict[str, Any]]:
    out = []
    for p in paths:
        out += records(p)
    return out


async def _write(opts: WriterOptions, batches: list[list[Any]]) -> CaptureWriter:
    return await write_batches(opts, _start(), batches)


def test_disk_full_gives_gap_record_and_valid_file(tmp_path: Path) -> None:
    """ENOSPC on some writes: those records become one gap record; the file stays valid, seq gap-free."""
    failing = {"n": 0}

    def before_write(data: bytes) -> None:
        if b'"c1.1"' in data or b'"c1.2"' in data:
            failing["n"] += 1
            raise OSError(errno.ENOSPC, "No space left on device")

    opts = WriterOptions(directory=tmp_path, before_write=before_write)
    with structlog.testing.capture_logs() as logs:
        w = asyncio.run(_write(opts, [[_half(0)], [_half(1)], [_half(2)], [_half(3)], [_half(4)]]))
    # Logged once when writing starts failing, once when it works again (docs/reliability.md).
    events = [e for e in logs if e["event"].startswith("capture_write")]
    assert [(e["event"], e["log_level"]) for e in events] == [
        ("capture_write_failed", "warning"), ("capture_write_resumed", "warning"),
    ]  # fmt: skip
    failed, resumed = events
    assert failed["error"] == "[Errno 28] No space left on device" and failed["path"] == str(w.paths[0])
    assert failed["note"] == "dropping records until writing works again; a gap record will say how many"
    assert resumed["dropped"] == 2 and resumed["reason"] == "write_error: [Errno 28] No space left on device"
    recs = _lines(w.paths)
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    kinds = [r["kind"] for r in recs]
    assert kinds == ["capture_start", "half_close", "gap", "half_close", "half_close", "capture_end"]
    gap = recs[2]
    assert gap["dropped"] == 2 and "No space left" in gap["reason"]
    assert (gap["first_t_ns"], gap["last_t_ns"]) == (101, 102)
    assert recs[3]["call"] == "c1.3" and recs[-1]["counts"]["dropped"] == 2


def test_queue_overflow_is_counted_not_silent(tmp_path: Path) -> None:
    """Records beyond the queue bound are dropped and reported as a gap."""

    async def run() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=tmp_path, max_queue=3), _start())
        w.open()
        for i in range(10):  # no await in between: the writer cannot drain
            w.emit(_half(i))
        # Counted at once (admin Status, metrics), before any gap record is written.
        assert (w.counts()[2], w.stats()[1:]) == (7, (7, 3))
        await w.close()
        assert w.counts() == ({"capture_start": 1, "half_close": 3, "gap": 1, "capture_end": 1}, {}, 7)
        return w

    recs = _lines(asyncio.run(run()).paths)
    (gap,) = [r for r in recs if r["kind"] == "gap"]
    assert gap["dropped"] == 7 and gap["reason"].startswith("queue_full")
    assert recs[-1]["kind"] == "capture_end" and recs[-1]["counts"]["dropped"] == 7
    assert len([r for r in recs if r["kind"] == "half_close"]) == 3


def test_rotation_continues_seq_and_compresses(tmp_path: Path) -> None:
    """Rotated files chain by next_file, seq runs on across them, closed ones are gzip'd and 0600."""
    opts = WriterOptions(directory=tmp_path, rotate_bytes=300, gzip_rotated=True)
    w = asyncio.run(_write(opts, [[_half(i)] for i in range(8)]))
    assert len(w.paths) > 2
    assert all(p.suffix == ".gz" for p in w.paths[:-1]) and w.paths[-1].suffix == ".jsonl"
    recs = _lines(w.paths)
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    assert [r["call"] for r in recs if r["kind"] == "half_close"] == [f"c1.{i}" for i in range(8)]
    ends = [r for r in recs if r["kind"] == "capture_end"]
    assert [e["reason"] for e in ends] == ["rotate"] * (len(w.paths) - 1) + ["shutdown"]
    starts = [r["file_index"] for r in recs if r["kind"] == "capture_start"]
    assert starts == list(range(len(w.paths)))
    for p in w.paths:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    # Each closed file was let go once the next one was held (and the last at close): none is left open.
    assert _open_in(tmp_path) == []


def _open_in(directory: Path) -> list[str]:
    """What this process holds open in ``directory`` (its descriptors' targets)."""
    held = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = fd.readlink()
        except OSError:  # (the descriptor that listed the directory, gone by now)
            continue
        if target.parent == directory.resolve():
            held.append(target.name)
    return held


def test_unencodable_capture_start_leaves_no_file(tmp_path: Path) -> None:
    """A capture_start that cannot be written (an int beyond 64 bits): the error propagates, no file stays."""
    start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="l", upstream="u", options={"payload_cap": 2**80})

    async def go() -> None:
        w = CaptureWriter(WriterOptions(directory=tmp_path), start)
        w.open()

    try:
        asyncio.run(go())
    except Exception as e:  # orjson's error type is an implementation detail
        assert "64-bit" in str(e) or "Integer" in str(e)
    else:
        raise AssertionError("an unencodable capture_start was written")
    assert list(tmp_path.iterdir()) == []


def test_startup_failure_after_the_capture_opened_removes_it(tmp_path: Path, monkeypatch: Any) -> None:
    """A start-up failure after the capture file was created (here: the relay) leaves no capture_start-only file."""
    import socket

    import pytest

    from proxy.ops import server

    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen()

    def broken(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("relay failed to start")

    monkeypatch.setattr(server, "Relay", broken)
    proxy = server.RecordingProxy(server.ProxyConfig(
        listen="127.0.0.1:0", upstream=f"127.0.0.1:{upstream.getsockname()[1]}", capture_dir=tmp_path / "c",
    ))  # fmt: skip
    try:
        with pytest.raises(RuntimeError, match="relay failed"):
            asyncio.run(proxy.start())
    finally:
        upstream.close()
    assert list((tmp_path / "c").iterdir()) == []


def test_records_lost_to_a_full_disk_and_then_a_deleted_file_are_one_gap(tmp_path: Path) -> None:
    """The disk fills (a batch is dropped), then the operator deletes the live file to free space: the
    new file starts with one gap counting both losses, from the first lost record's time to the last,
    with the reason that started it; the capture's end counts them too."""

    failing = {"on": False}

    def before_write(data: bytes) -> None:
        if failing["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")

    def handled(w: CaptureWriter) -> int:
        written, dropped, _ = w.stats()
        return written + dropped

    async def run() -> CaptureWriter:
        opts = WriterOptions(directory=tmp_path, before_write=before_write, min_free_bytes=0, check_interval_s=0.05)
        w = CaptureWriter(opts, _start())
        w.open()
        for i in range(3):
            w.emit(_half(i))  # t_ns 100..102: written
        await _until(lambda: handled(w) >= 4, "the first records written")
        failing["on"] = True
        w.emit(ev.HalfClosed(t_ns=200, call="c2.0"))
        w.emit(ev.HalfClosed(t_ns=201, call="c2.1"))
        await _until(lambda: w.stats()[1] >= 2, "the batch dropped")
        failing["on"] = False
        first = w.path
        first.unlink()
        await _until(lambda: w.path != first, "a new capture file")
        w.emit(_half(9))
        await w.close()
        return w

    w = asyncio.run(run())
    recs = records(w.path)
    assert [r["kind"] for r in recs] == ["capture_start", "gap", "half_close", "capture_end"]
    gap = recs[1]
    assert gap["dropped"] == 6  # 2 never written + capture_start and 3 records gone with the file
    assert gap["reason"].startswith("write_error") and "No space left" in gap["reason"]
    assert (gap["first_t_ns"], gap["last_t_ns"]) == (200, 201)
    assert recs[-1]["counts"]["dropped"] == 6 and w.stats()[1] == 6


async def _until(cond: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_queue_overflow_while_the_disk_is_failing_joins_the_same_gap(tmp_path: Path) -> None:
    """A write fails (ENOSPC), then, before anything is written again, the queue overflows: one gap
    record counts both, with the reason that started it and then the overflow's with its count, from the first
    lost record to the last."""
    failing = {"on": True}

    def before_write(data: bytes) -> None:
        if failing["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")

    async def run() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=tmp_path, before_write=before_write, max_queue=3), _start())
        failing["on"] = False
        w.open()
        failing["on"] = True
        w.emit(_half(0))  # t_ns 100: its write fails
        await _until(lambda: w.stats()[1] == 1, "the failed write")
        failing["on"] = False
        for i in range(10, 20):  # no await in between: 3 queued (t_ns 110..112), 7 dropped (113..119)
            w.emit(_half(i))
        await w.close()
        return w

    w = asyncio.run(run())
    recs = _lines(w.paths)
    assert [r["kind"] for r in recs] == [
        "capture_start",
        "gap",
        "half_close",
        "half_close",
        "half_close",
        "capture_end",
    ]
    gap = recs[1]
    assert gap["dropped"] == 8
    head, then = gap["reason"].split("; then ")
    assert head == "write_error: [Errno 28] No space left on device" and then.startswith("7 record(s): queue_full")
    assert (gap["first_t_ns"], gap["last_t_ns"]) == (100, 119)
    assert recs[-1]["counts"]["dropped"] == 8 and w.stats()[1] == 8


async def _started_with_the_next_file_taken(tmp_path: Path, **options: Any) -> CaptureWriter:
    """A writer (stem ``cap``) with one record written, whose next file (``cap-0001.jsonl``) cannot be created: its
    name is taken, standing in for any open error. No periodic retry: only the reopens the test asks for."""
    (tmp_path / "cap-0001.jsonl").write_bytes(b"not ours")
    w = CaptureWriter(WriterOptions(directory=tmp_path, stem="cap", check_interval_s=3600, **options), _start())
    w.open()
    w.emit(_half(0))
    await _until(lambda: w.stats()[0] == 2, "the first record")
    return w


def test_records_while_no_capture_file_can_be_created_are_a_gap_in_the_next_file(tmp_path: Path) -> None:
    """A reopen cannot create the next file (here its name is taken, standing in for any open error):
    the records that arrive until a later attempt works are counted, and the file that attempt creates
    starts with a gap saying how many and why; seq runs on."""

    async def run() -> CaptureWriter:
        w = await _started_with_the_next_file_taken(tmp_path)
        w.request_reopen("signal")
        await _until(lambda: w.stats()[0] == 3, "the first file's capture_end")

        async def dropped(*calls: int) -> None:  # one batch, handled before the next
            target = w.stats()[1] + len(calls)
            for i in calls:
                w.emit(_half(i))
            await _until(lambda: w.stats()[1] == target, "the batch dropped")

        # The closed file stays locked while no next file exists: a follow tells this writer, which goes on,
        # from a proxy killed between two files (neither the file held nor the next one there).
        assert liveness.being_written(tmp_path / "cap.jsonl")
        await dropped(1, 2)
        await dropped(3)
        w.request_reopen("signal")
        await _until(lambda: w.path.name == "cap-0002.jsonl", "the next file")
        assert liveness.being_written(w.path) and not liveness.being_written(tmp_path / "cap.jsonl")
        w.emit(_half(4))
        await w.close()
        return w

    with structlog.testing.capture_logs() as logs:
        w = asyncio.run(run())
    assert (tmp_path / "cap-0001.jsonl").read_bytes() == b"not ours"
    assert [p.name for p in w.paths] == ["cap.jsonl", "cap-0002.jsonl"]
    (failed,) = [e for e in logs if e["event"] == "capture_open_failed"]
    assert failed["file"] == "cap-0001.jsonl" and "File exists" in failed["error"]
    old, new = records(w.paths[0]), records(w.paths[1])
    assert [r["kind"] for r in new] == ["capture_start", "gap", "half_close", "capture_end"]
    gap = new[1]
    assert gap["dropped"] == 3 and gap["reason"] == "write_error: no capture file could be created"
    assert (gap["first_t_ns"], gap["last_t_ns"]) == (101, 103)
    assert [r["seq"] for r in old + new] == list(range(len(old) + len(new)))
    assert new[-1]["counts"]["dropped"] == 3 and w.stats()[1] == 3


def test_with_gzip_rotated_a_closed_file_is_gzipped_once_the_next_one_exists(tmp_path: Path) -> None:
    """--gzip-rotated, and the next file cannot be created yet: the closed file stays as it is and locked, so a
    follow at its capture_end knows the writer goes on. It was gzipped at once: the lock stayed on a file no
    name reached, and a follow that opened the .gz took the proxy for stopped. Gzipped once the next one exists."""
    plain, gz = tmp_path / "cap.jsonl", tmp_path / "cap.jsonl.gz"

    async def run() -> CaptureWriter:
        w = await _started_with_the_next_file_taken(tmp_path, gzip_rotated=True)
        w.request_reopen("signal")
        await _until(lambda: w.stats()[0] == 3, "the first file's capture_end")
        assert liveness.being_written(plain) and not gz.exists()
        w.request_reopen("signal")
        await _until(lambda: w.path.name == "cap-0002.jsonl", "the next file")
        await _until(lambda: gz.exists() and not plain.exists(), "the closed file gzipped")
        await w.close()
        return w

    w = asyncio.run(run())
    assert [p.name for p in w.paths] == ["cap.jsonl.gz", "cap-0002.jsonl"]
    assert [r["kind"] for r in records(gz)] == ["capture_start", "half_close", "capture_end"]
    assert _open_in(tmp_path) == []


def test_a_live_file_deleted_by_hand_stays_held_until_the_next_file_exists(tmp_path: Path) -> None:
    """The live file deleted (rm) while the next one cannot be created yet: the writer keeps holding the deleted
    file, so a follow reading it waits there rather than give up on a next file that takes more than its 10 s."""

    async def run() -> CaptureWriter:
        w = await _started_with_the_next_file_taken(tmp_path)
        (tmp_path / "cap.jsonl").unlink()
        with structlog.testing.capture_logs() as logs:
            w.request_reopen("signal")
            await _until(lambda: any(e["event"] == "capture_open_failed" for e in logs), "the failed next file")
        assert _open_in(tmp_path) == ["cap.jsonl (deleted)"]
        w.request_reopen("signal")
        await _until(lambda: w.path.name == "cap-0002.jsonl", "the next file")
        await _until(lambda: _open_in(tmp_path) == ["cap-0002.jsonl"], "the deleted file let go")
        await w.close()
        return w

    asyncio.run(run())
    assert _open_in(tmp_path) == []


def test_the_tap_gets_each_written_record_as_a_line_that_reads_alone(tmp_path: Path) -> None:
    """record --admin's Tail: every record written reaches the tap with its seq, as a line that means
    what the file's (sparse) line means without the lines before it; nothing not written reaches it."""
    tapped: list[tuple[int, list[Any], list[bytes]]] = []

    def before_write(data: bytes) -> None:
        if b'"c1.1"' in data:
            raise OSError(errno.ENOSPC, "No space left on device")

    w = asyncio.run(write_batches(WriterOptions(directory=tmp_path, before_write=before_write), _start(),
                                  [[_half(0)], [_half(1)], [_half(2), _half(3)]],
                                  tap=lambda first, recs, lines: tapped.append((first, list(recs), list(lines)))))  # fmt: skip
    on_disk = records(w.path)
    firsts = [first for first, _, _ in tapped]
    lines = [line for _, _, ls in tapped for line in ls]
    assert len(lines) == len(on_disk) and firsts[0] == 0
    assert [len(recs) for _, recs, _ in tapped] == [len(ls) for _, _, ls in tapped]
    assert [r.kind for _, recs, _ in tapped for r in recs] == [r["kind"] for r in on_disk]
    assert [dense([line])[0] for line in lines] == on_disk  # each line read on its own
    seq = 0
    for first, recs, _ in tapped:
        assert first == seq
        seq += len(recs)
    assert "c1.1" not in b"".join(lines).decode()


def test_calls_ended_are_counted_by_cause(tmp_path: Path) -> None:
    """capture_end and the admin Status count the calls ended by each cause, and the records by kind."""

    def end(i: int, cause: str) -> ev.CallEnded:
        return ev.CallEnded(t_ns=200 + i, call=f"c1.{i}", status="CANCELLED", details=None, cause=cause,
                            trailers=None, initial_metadata=None, duration_ms=1.0, messages_c2s=1, messages_s2c=0)  # fmt: skip

    batches = [[end(0, "client_cancel"), _half(1)], [end(2, "deadline"), end(3, "client_cancel")]]
    w = asyncio.run(_write(WriterOptions(directory=tmp_path), batches))
    counts = records(w.path)[-1]["counts"]
    assert {k: v for k, v in counts.items() if k.startswith("calls.")} == {
        "calls.client_cancel": 2,
        "calls.deadline": 1,
    }
    assert (counts["records.call_end"], counts["records.half_close"], counts["dropped"]) == (3, 1, 0)
    assert w.counts()[1] == {"client_cancel": 2, "deadline": 1}


def test_a_gap_spans_every_record_it_counts_whatever_order_they_were_lost_in(tmp_path: Path) -> None:
    """The queue overflows (the burst's later records are dropped first), then the write of its
    earlier, queued records fails: the gap's span (what the report draws as time lost) runs from the
    earliest of them to the latest, not from the first counted to the last counted."""
    failing = {"on": False}

    def before_write(data: bytes) -> None:
        if failing["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")

    async def run() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=tmp_path, before_write=before_write, max_queue=3), _start())
        w.open()
        failing["on"] = True
        for i in range(10, 20):  # no await in between: 3 queued (t_ns 110..112), 7 dropped (113..119)
            w.emit(_half(i))
        await _until(lambda: w.stats()[1] == 10, "the queued records' write failed")
        failing["on"] = False
        w.emit(_half(20))
        await w.close()
        return w

    w = asyncio.run(run())
    recs = _lines(w.paths)
    assert [r["kind"] for r in recs] == ["capture_start", "gap", "half_close", "capture_end"]
    gap = recs[1]
    assert gap["dropped"] == 10 and gap["reason"].startswith("queue_full")
    assert (gap["first_t_ns"], gap["last_t_ns"]) == (110, 119)


def test_a_file_that_reaches_the_rotation_size_exactly_is_closed_there(tmp_path: Path) -> None:
    """--rotate-mb is the size at which a file is closed: a file whose records make exactly that many
    bytes gets its capture_end then, and the next record starts the next file."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "rotated").mkdir()
    plain = asyncio.run(_write(WriterOptions(directory=tmp_path / "plain"), [[_half(0)], [_half(1)]]))
    size = sum(len(line) for line in plain.path.read_bytes().splitlines(keepends=True)[:2])  # start + c1.0
    opts = WriterOptions(directory=tmp_path / "rotated", rotate_bytes=size)
    w = asyncio.run(_write(opts, [[_half(0)], [_half(1)]]))
    first = records(w.paths[0])
    assert [r["kind"] for r in first] == ["capture_start", "half_close", "capture_end"]
    assert w.paths[0].stat().st_size == size + len(w.paths[0].read_bytes().splitlines(keepends=True)[-1])
    assert [r["call"] for r in records(w.paths[1]) if r["kind"] == "half_close"] == ["c1.1"]


def test_steady_traffic_is_written_in_batches_of_a_tick_not_one_per_write(tmp_path: Path, monkeypatch: Any) -> None:
    """Records that keep coming one at a time (a real Triton's responses each arrive alone) are handed to
    the writer thread once per tick, not again as soon as each write ends: every hand-over costs a
    thread wake-up, the event loop's wake-up and a compressed frame.

    An upper bound on the writes only (a loaded machine makes fewer, larger batches, never more)."""
    monkeypatch.setattr("proxy.capture.writer.FLUSH_INTERVAL_S", 0.05)
    monkeypatch.setattr("proxy.capture.writer.FLUSH_AT", 10**9)  # the tick alone (a full queue is handed over at once)
    writes: list[int] = []

    async def run() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=tmp_path), _start())
        w.open()
        real = w._write_batch

        def counted(batch: list[Any], *args: Any, **kwargs: Any) -> None:
            writes.append(len(batch))
            real(batch, *args, **kwargs)

        monkeypatch.setattr(w, "_write_batch", counted)
        t0 = time.monotonic()
        i = 0
        while time.monotonic() - t0 < 0.3:
            w.emit(_half(i))
            i += 1
            await asyncio.sleep(0)  # one record per loop turn, as the relay emits them
        elapsed, n = time.monotonic() - t0, len(writes)
        # The first record's write at once, then one per tick begun.
        assert n <= elapsed / 0.05 + 2, (n, elapsed, writes[:20])
        await w.close()
        return w

    recs = _lines(asyncio.run(run()).paths)
    # Every record but capture_start (written at open) went through those writes, many per write.
    assert sum(writes) == len(recs) - 1 > 100 * len(writes)


@pytest.mark.parametrize(
    ("fails", "first", "lost"),
    [
        # the rotation's capture_end: the file stays live, the rotation comes after the next write that works
        (b'"capture_end"', 1, 0),
        # the next file's capture_start: it goes first, with the next write that works
        (b'"file_index":1', 1, 0),
        # the disk full from the rotation's end on, for two batches of traffic too: those are lost (a gap)
        (b'"capture_end"', 3, 2),
        # from the next file's start on, for two batches of traffic too
        (b'"file_index":1', 3, 2),
    ],
)
def test_a_full_disk_at_a_rotation_leaves_the_files_chained(tmp_path: Path, fails: bytes, first: int, lost: int) -> None:
    """ENOSPC (--min-free-mb 0) on the writes of a rotation: every file still starts with its capture_start and
    ends with its capture_end, and only traffic is lost. (The old file lost its capture_end and the new one its
    capture_start, both counted as dropped records: check then read the new file as a later file of a capture
    whose file 2 was not given, and the old one as left by a proxy that died.)"""
    attempts: list[bytes] = []
    failing = {"left": 0, "armed": 1}

    def before_write(data: bytes) -> None:
        attempts.append(data)
        if fails in data and failing["armed"]:  # (the first time only: the write it fails is tried again)
            failing["left"], failing["armed"] = first, 0
        if failing["left"]:
            failing["left"] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")

    async def run() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=tmp_path, before_write=before_write, rotate_bytes=300,
                                        min_free_bytes=0, check_interval_s=3600), _start())  # fmt: skip
        w.open()
        try:
            for i in range(12):
                dropped = w.stats()[1]
                w.emit(_half(i))
                # One batch a record: wait until the writer tried to write it, or counted it lost untried (a
                # batch is cut where the file reached its size, and a failed write loses the rest with it).
                call = f'"c1.{i}"'.encode()
                await _until(lambda: any(call in a for a in attempts) or w.stats()[1] > dropped,  # noqa: B023 (awaited here)
                             f"record {i} handled")  # fmt: skip
        finally:
            await w.close()
        return w

    w = asyncio.run(run())
    assert len(w.paths) >= 3
    reader = read_capture(w.paths)
    recs = list(reader)
    # No hole but the records lost: no missing capture_end, no file "not given".
    assert [(g.kind, g.count) for g in reader.gaps] == ([("gap_record", lost)] if lost else [])
    assert reader.warnings == []
    assert [seq for seq, _ in recs] == list(range(len(recs)))
    by_file = [records(p) for p in w.paths]
    assert all(f[0]["kind"] == "capture_start" and f[-1]["kind"] == "capture_end" for f in by_file)
    assert [f[0]["file_index"] for f in by_file] == list(range(len(w.paths)))
    assert [f[-1]["reason"] for f in by_file] == ["rotate"] * (len(w.paths) - 1) + ["shutdown"]
    gaps = [r for _, r in recs if isinstance(r, ev.GapRecorded)]
    assert sum(g.dropped for g in gaps) == lost and by_file[-1][-1]["counts"]["dropped"] == lost
    calls = [r.call for _, r in recs if isinstance(r, ev.HalfClosed)]
    assert len(calls) == 12 - lost and calls == sorted(calls, key=lambda c: int(c.split(".")[1]))


def test_a_stop_while_writing_fails_says_what_the_capture_lost(tmp_path: Path) -> None:
    """ENOSPC from some batch to the stop: the records dropped since, the capture_end among them, are in no file
    and no later write can report them: the stop does (``not_closed``, an error line). (It logged only the usual
    `capture_closed`, and the proxy exited 0, the file reading as a proxy killed.)"""
    failing = {"on": False}

    def before_write(data: bytes) -> None:
        if failing["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")

    async def run() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=tmp_path, before_write=before_write, min_free_bytes=0), _start())
        w.open()
        w.emit(_half(0))
        await _until(lambda: w.stats()[0] >= 2, "the first records written")
        failing["on"] = True
        w.emit(_half(1))
        w.emit(_half(2))
        await w.close()
        return w

    with structlog.testing.capture_logs() as logs:
        w = asyncio.run(run())
    assert w.not_closed == (3, "the capture could not write it: [Errno 28] No space left on device")
    (line,) = [e for e in logs if e["event"] == "capture_not_closed"]
    assert (line["log_level"], line["not_written"]) == ("error", 3)
    assert [r["kind"] for r in records(w.path)] == ["capture_start", "half_close"]


def test_a_live_file_deleted_with_its_directory_before_the_stop_is_not_closed(tmp_path: Path) -> None:
    """The capture directory removed between two of the writer's checks, then the stop: the records the
    deleted file held and the capture_end are in no file (the end was written into the deleted file, and
    `capture_closed` named it)."""
    directory = tmp_path / "cap"
    directory.mkdir()

    async def run() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=directory, min_free_bytes=0, check_interval_s=3600), _start())
        w.open()
        w.emit(_half(0))
        await _until(lambda: w.stats()[0] >= 2, "the first records written")
        w.path.unlink()
        directory.rmdir()
        await w.close()
        return w

    w = asyncio.run(run())
    assert w.not_closed is not None and w.not_closed[0] == 3  # capture_start, the half-close, the end
    assert not directory.exists()

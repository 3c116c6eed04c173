"""The writer's side file (``--payload full`` message bytes, raw): order, rotation, retention, failures.

Records here carry their bytes in ``payload_at`` as the relay hands them over (proxy/relay/recording.py);
what the writer leaves on disk is read back with the replay reader and :func:`payload_bytes`.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.capture import sidefile
from proxy.capture.writer import CaptureWriter, WriterOptions
from replay.capture import events as ev
from replay.capture import naming
from replay.capture.payload import PayloadAt, payload_bytes
from replay.capture.reader import read_capture
from tests.support.capture import records
from tests.support.writer import write_batches


def _start() -> ev.CaptureStarted:
    return ev.CaptureStarted(t_ns=1, proxy_version="t", listen="l:1", upstream="u:2", options={"payload": "full"})


def _body(i: int, size: int = 300) -> bytes:
    return bytes((i * 7 + k) % 251 for k in range(size))


def _msg(i: int, size: int = 300) -> ev.MessageSeen:
    """A c2s message as the relay emits it with the side-file store: its stored bytes in payload_at."""
    body = _body(i, size)
    return ev.MessageSeen(t_ns=100 + i, call=f"c1.{i}", dir="c2s", index=0, size=len(body),
                          payload_sha256=hashlib.sha256(body).hexdigest(), payload_truncated=False,
                          payload_at=body)  # type: ignore[arg-type]  # fmt: skip


async def _write(opts: WriterOptions, batches: list[list[Any]]) -> CaptureWriter:
    return await write_batches(opts, _start(), batches)


def _read_back(directory: Path) -> dict[str, bytes]:
    """call -> the message bytes the capture gives back (through the reader and payload_bytes)."""
    out = {}
    reader = read_capture(directory)
    for _, rec in reader:
        if isinstance(rec, ev.MessageSeen):
            data = payload_bytes(rec)
            assert data is not None and hashlib.sha256(data).hexdigest() == rec.payload_sha256
            out[rec.call] = data
    assert reader.warnings == []
    return out


def test_bytes_go_raw_to_the_side_file_and_lines_point_at_them(tmp_path: Path) -> None:
    """No base64 in the line: payload null, payload_at [offset, length] into <name>.payload, in order."""
    w = asyncio.run(_write(WriterOptions(directory=tmp_path, compress="zstd"), [[_msg(0), _msg(1, 0)], [_msg(2, 70_000)]]))
    (path,) = w.paths
    side = tmp_path / naming.side_name(path.name)
    assert side.name.endswith(".payload") and sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, side.name])
    assert side.stat().st_mode & 0o777 == 0o600
    msgs = [r for r in records(path) if r["kind"] == "message"]
    assert [(r["payload"], r["payload_at"]) for r in msgs] == [(None, [0, 300]), (None, [300, 0]), (None, [300, 70_000])]
    assert side.read_bytes() == _body(0) + _body(2, 70_000)
    assert _read_back(tmp_path) == {"c1.0": _body(0), "c1.1": b"", "c1.2": _body(2, 70_000)}


def test_a_capture_without_payload_bytes_has_no_side_file(tmp_path: Path) -> None:
    w = asyncio.run(_write(WriterOptions(directory=tmp_path), [[ev.HalfClosed(t_ns=5, call="c1.1")]]))
    assert [p.name for p in tmp_path.iterdir()] == [w.paths[0].name]


def test_a_failed_write_truncates_both_files_and_the_gap_covers_the_batch(tmp_path: Path) -> None:
    """The side bytes are written first; when the lines then fail, both files go back to the last
    complete batch, the batch is one gap, and later messages point at the right bytes."""
    sizes: list[int] = []

    def before_write(data: bytes) -> None:
        side = [p for p in tmp_path.iterdir() if p.name.endswith(".payload")]
        sizes.append(side[0].stat().st_size if side else 0)
        if b'"c1.1"' in data:
            raise OSError(errno.ENOSPC, "No space left on device")

    opts = WriterOptions(directory=tmp_path, before_write=before_write)
    w = asyncio.run(_write(opts, [[_msg(0)], [_msg(1), _msg(2)], [_msg(3)]]))
    # The failed batch's 600 bytes had reached the side file when the line write failed.
    assert 900 in sizes
    side = tmp_path / naming.side_name(w.paths[0].name)
    assert side.read_bytes() == _body(0) + _body(3)
    recs = records(w.paths[0])
    (gap,) = [r for r in recs if r["kind"] == "gap"]
    assert gap["dropped"] == 2 and (gap["first_t_ns"], gap["last_t_ns"]) == (101, 102)
    assert [r["payload_at"] for r in recs if r["kind"] == "message"] == [[0, 300], [300, 300]]
    assert _read_back(tmp_path) == {"c1.0": _body(0), "c1.3": _body(3)}


def test_a_failed_side_write_is_a_gap_and_nothing_is_left_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """writev failing mid-batch (after writing part of it): the side file is cut back as well."""
    real = os.writev
    calls = {"n": 0}

    def failing_writev(fd: int, buffers: list[bytes]) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            os.write(fd, buffers[0][:100])  # a partial write, then the error
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, buffers)

    monkeypatch.setattr(os, "writev", failing_writev)
    w = asyncio.run(_write(WriterOptions(directory=tmp_path), [[_msg(0)], [_msg(1)], [_msg(2)]]))
    assert (tmp_path / naming.side_name(w.paths[0].name)).read_bytes() == _body(0) + _body(2)
    assert [r["dropped"] for r in records(w.paths[0]) if r["kind"] == "gap"] == [1]
    assert _read_back(tmp_path) == {"c1.0": _body(0), "c1.2": _body(2)}


def test_rotation_counts_the_side_file(tmp_path: Path) -> None:
    """--rotate-mb bounds a capture file plus its side file; each file gets its own side file, offsets from 0."""
    opts = WriterOptions(directory=tmp_path, rotate_bytes=2_000)
    w = asyncio.run(_write(opts, [[_msg(i, 700) for i in range(10)]]))
    assert len(w.paths) >= 4
    for path in w.paths:
        side = path.with_name(naming.side_name(path.name))
        lines = records(path)
        ats = [r["payload_at"] for r in lines if r["kind"] == "message"]
        assert ats and ats[0][0] == 0 and side.stat().st_size == sum(n for _, n in ats)
        # The cut comes at the message that reaches the size: at most one message over it.
        assert path.stat().st_size + side.stat().st_size < 2_000 + 700 + 1_000
    assert _read_back(tmp_path) == {f"c1.{i}": _body(i, 700) for i in range(10)}


def test_rotation_of_a_compressed_capture_counts_the_side_file(tmp_path: Path) -> None:
    opts = WriterOptions(directory=tmp_path, rotate_bytes=5_000, compress="zstd")
    w = asyncio.run(_write(opts, [[_msg(i, 3_000)] for i in range(6)]))
    # zstd lines are ~200 bytes a batch: without the side file's 3,000 no file would reach 5,000.
    assert len(w.paths) >= 3
    assert _read_back(tmp_path) == {f"c1.{i}": _body(i, 3_000) for i in range(6)}


def test_a_compressed_captures_batch_is_cut_where_its_side_bytes_reach_the_size(tmp_path: Path) -> None:
    """zstd and --payload full: one batch of 10 messages of 3,000 bytes is 30,000 side-file bytes. The batch
    went whole into one file (845 KB files at --rotate-mb 0.1, and the budget over by 60%, found live); it
    is cut where the side file's raw bytes reach the size, as a plain capture's lines are."""
    opts = WriterOptions(directory=tmp_path, rotate_bytes=7_000, compress="zstd")
    w = asyncio.run(_write(opts, [[_msg(i, 3_000) for i in range(10)]]))
    assert len(w.paths) >= 4
    for path in w.paths:
        side = path.with_name(naming.side_name(path.name))
        assert side.stat().st_size <= 7_000 + 3_000  # the message that reaches the size goes in, no more
    assert _read_back(tmp_path) == {f"c1.{i}": _body(i, 3_000) for i in range(10)}


def test_retention_deletes_and_counts_a_capture_file_with_its_side_file(tmp_path: Path) -> None:
    opts = WriterOptions(directory=tmp_path, rotate_bytes=2_000, max_total_bytes=6_000)
    w = asyncio.run(_write(opts, [[_msg(i, 700)] for i in range(16)]))
    left = {p.name for p in tmp_path.iterdir()}
    removed = [r for p in w.paths if p.exists() for r in records(p) if r["kind"] == "files_removed"]
    gone = [name for r in removed for name in r["files"]]
    assert gone and not left & set(gone)
    sides = [n for n in gone if n.endswith(".payload")]
    # Every removed capture file went with its side file, named beside it in the record.
    assert sides == [naming.side_name(n) for n in gone if not n.endswith(".payload")]
    assert all(r["size"] > 700 * len([n for n in r["files"] if n.endswith(".payload")]) for r in removed)
    total = sum((tmp_path / n).stat().st_size for n in left)
    assert total <= 6_000 + 700 + 1_000  # the live file may be one message over its rotation size
    # What is left reads back whole: no capture file without its side file, no side file without its capture file.
    kept = {n for n in left if n.endswith(".payload")}
    assert kept == {naming.side_name(n) for n in left if not n.endswith(".payload")}
    reader = read_capture(tmp_path)
    for _, rec in reader:
        if isinstance(rec, ev.MessageSeen):
            assert payload_bytes(rec) == _body(int(rec.call.split(".")[1]), 700)


def test_writev_all_finishes_partial_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """writev may write fewer bytes (or buffers) than asked: every byte still lands, in order."""
    real = os.writev

    def stingy(fd: int, buffers: list[bytes]) -> int:
        return real(fd, [bytes(memoryview(b"".join(buffers))[:1000])])

    monkeypatch.setattr(os, "writev", stingy)
    parts = [_body(i, n) for i, n in enumerate([10, 2500, 0, 999, 1, 3000])] + [b"z"] * 2500
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        sidefile.writev_all(fd, parts)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(parts)


def test_payload_at_read_back_equals_the_written_list(tmp_path: Path) -> None:
    """The reader's PayloadAt is the line's [offset, length] (equal to the list, JSON-encodes as it)."""
    asyncio.run(_write(WriterOptions(directory=tmp_path), [[_msg(0)]]))
    (rec,) = [r for _, r in read_capture(tmp_path) if isinstance(r, ev.MessageSeen)]
    assert isinstance(rec.payload_at, PayloadAt) and rec.payload_at == [0, 300]
    assert rec.payload_at.side == tmp_path / naming.side_name(next(tmp_path.glob("*.jsonl")).name)


def test_the_admin_tap_gets_lines_that_point_into_the_side_file(tmp_path: Path) -> None:
    """record --admin's Tail lines say the same payload_at as the file's lines."""
    tapped: list[bytes] = []

    w = asyncio.run(write_batches(WriterOptions(directory=tmp_path), _start(),
                                  [[_msg(0), ev.HalfClosed(t_ns=150, call="c1.0")], [_msg(1, 2000)]],
                                  tap=lambda first, recs, lines: tapped.extend(lines)))  # fmt: skip
    from_tap = [orjson.loads(line) for line in tapped]
    from_file = records(w.paths[0])
    assert [r.get("payload_at") for r in from_tap if r["kind"] == "message"] == [[0, 300], [300, 2000]]
    assert [r.get("payload_at") for r in from_tap] == [r["payload_at"] if r["kind"] == "message" else None
                                                       for r in from_file[: len(from_tap)]]  # fmt: skip


def test_a_live_file_renamed_says_where_its_message_bytes_are(tmp_path: Path) -> None:
    """The writer cannot rename the side file along (it does not know the new name): the record says which it is."""

    async def run() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=tmp_path, check_interval_s=0.05), _start())
        w.open()
        w.emit(_msg(0))
        while not (tmp_path / naming.side_name(w.paths[0].name)).exists():
            await asyncio.sleep(0.01)
        w.paths[0].rename(tmp_path / "kept.jsonl")
        while len(w.paths) < 2:
            await asyncio.sleep(0.01)
        await w.close()
        return w

    w = asyncio.run(asyncio.wait_for(run(), 30))
    (moved,) = [r for r in records(w.paths[-1]) if r["kind"] == "files_removed"]
    assert moved["reason"] == "moved" and naming.side_name(w.paths[0].name) in moved["detail"]

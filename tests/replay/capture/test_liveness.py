"""A capture file without its capture_end: still being written, or left by a proxy that died.

The writer holds each capture file locked while it writes it (replay/capture/liveness.py); `replay check`
and `tail --follow` ask. Before, check said "the proxy stopped without closing the capture (killed?)" of
a capture its running proxy was writing, and `tail DIR --follow` waited for ever on a dead proxy's file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import os
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.admin.hub import TailFilter
from proxy.admin.tail import Printer, tail_files
from proxy.capture.writer import CaptureWriter, WriterOptions
from replay.capture import events as ev
from replay.capture import liveness
from replay.capture.holes import DEAD_END, LIVE_END
from replay.capture.reader import read_capture
from replay.errors import UpstreamError
from tests.data.make_golden import Builder
from tests.support.capture import without_left_note

NAME = "capture-20261206T100000-4242.jsonl"


def _open_capture(path: Path) -> Builder:
    """A capture with one finished call and no capture_end (written as far as a live writer had)."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r1")
    b.response("c1.1", "r1", "tok", final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    path.write_bytes(b.render())
    return b


def _held(path: Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    assert liveness.hold(fd)
    return fd


def test_a_held_file_is_being_written_and_a_closed_one_not(tmp_path: Path) -> None:
    path = tmp_path / NAME
    path.write_bytes(b"")
    assert not liveness.being_written(path)
    fd = _held(path)
    try:
        assert liveness.being_written(path)
        assert liveness.being_written(path)  # (asking takes no lock that stays)
    finally:
        os.close(fd)
    assert not liveness.being_written(path)
    assert not liveness.being_written(tmp_path / "gone.jsonl")


def test_a_named_pipe_is_never_opened_to_ask(tmp_path: Path) -> None:
    """A capture piped in through a FIFO is no live file, and asking must not open it: an open waits for its
    writer (here there is none: it would never return), and a close right after can leave a writer that
    came meanwhile with no reader (EPIPE), the capture it writes lost (the reader then waits for ever)."""
    fifo = tmp_path / "piped.jsonl"
    os.mkfifo(fifo)
    answer: list[bool] = []
    t = threading.Thread(target=lambda: answer.append(liveness.being_written(fifo)), daemon=True)
    t.start()
    t.join(timeout=5)
    answered = list(answer)
    if not answered:  # blocked in open, waiting for a writer: one comes, so that the thread ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(timeout=10)
    assert answered == [False], "being_written opened the pipe and waited for its writer"


def test_check_says_a_live_capture_is_still_being_written(tmp_path: Path) -> None:
    """Held by its writer: the missing capture_end is "not yet", not "killed?"; once nobody holds it, "killed?"."""
    path = tmp_path / NAME
    _open_capture(path)
    fd = _held(path)
    try:
        reader = read_capture(path)
        list(reader)
        assert [(g.kind, g.detail) for g in reader.gaps] == [("missing_capture_end", LIVE_END)]
    finally:
        os.close(fd)
    reader = read_capture(path)
    list(reader)
    assert [(g.kind, g.detail) for g in reader.gaps] == [("missing_capture_end", DEAD_END)]


def test_the_writer_holds_its_live_file_only(tmp_path: Path) -> None:
    """The proxy's writer: its live file is held from its capture_start on; a rotated file, once closed, is
    not; after close, none is."""

    async def run() -> list[tuple[str, bool]]:
        start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="l:1", upstream="u:2", options={})
        w = CaptureWriter(WriterOptions(directory=tmp_path, stem="cap", check_interval_s=3600), start)
        w.open()
        seen = [(w.paths[0].name, liveness.being_written(w.paths[0]))]
        await w.rotate()
        seen += [(p.name, liveness.being_written(p)) for p in w.paths]
        await w.close()
        return seen + [(p.name, liveness.being_written(p)) for p in w.paths]

    assert asyncio.run(run()) == [
        ("cap.jsonl", True),
        ("cap.jsonl", False), ("cap-0001.jsonl", True),
        ("cap.jsonl", False), ("cap-0001.jsonl", False),
    ]  # fmt: skip


async def _until(cond: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_follow_stops_on_a_file_its_dead_writer_left(tmp_path: Path) -> None:
    """`tail DIR --follow` on a file without capture_end that nobody holds: every line, then exit 1 (an
    UpstreamError naming the file), not a wait for lines that will never come."""
    path = tmp_path / NAME
    b = _open_capture(path)
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(UpstreamError, match=f"{NAME}: its proxy stopped without closing the capture"):
        asyncio.run(asyncio.wait_for(tail_files(tmp_path, TailFilter(), Printer(out, err, True)), 30))
    assert len(out.getvalue().splitlines()) == len(b.records)
    # (said first: the stop is an earlier proxy's, not one's started beside the follow)
    assert without_left_note(err.getvalue(), NAME) == ""


def test_follow_waits_on_a_held_file_until_its_end(tmp_path: Path) -> None:
    """Held (an idle proxy): the follow prints what is there and keeps waiting; the writer's capture_end then
    ends it as any clean stop does (exit 0). Released without an end, it would have stopped with the error."""
    path = tmp_path / NAME
    b = _open_capture(path)
    fd = _held(path)
    out = io.StringIO()

    async def run() -> None:
        task = asyncio.create_task(tail_files(tmp_path, TailFilter(), Printer(out, out, True)), name="test-follow")
        try:
            await _until(lambda: len(out.getvalue().splitlines()) == len(b.records), "the lines written so far")
            # Ten polls of an idle held file: still following.
            for _ in range(10):
                await asyncio.sleep(0.1)
                assert not task.done()
            before = len(b.records)
            b.finish()
            os.write(fd, b.render()[len(_rendered(b, before)) :])
            os.close(fd)
            await asyncio.wait_for(task, 30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(run())
    assert out.getvalue().splitlines()[-1].startswith('{"v":')
    assert '"kind":"capture_end"' in out.getvalue().splitlines()[-1]


def _rendered(b: Builder, n: int) -> bytes:
    """The bytes of ``b``'s first ``n`` records as rendered."""
    return b"".join(line + b"\n" for line in b.render().split(b"\n")[:n])


def test_follow_of_a_set_prints_the_other_workers_ends_before_saying_one_died(tmp_path: Path) -> None:
    """`record --workers 2`, worker 1 killed (its chain left open, nobody holds it) while worker 0 still drains
    (held) and then closes its chain as the set stops: every line of both, worker 0's capture_end included,
    then the error naming worker 1's file. (It raised at worker 1's end and lost worker 0's last lines.)"""
    sets = "capture-20261206T100000-4242"
    builders = []
    for k in (0, 1):
        b = Builder(t=Builder().t + k * 1_000_000).start()
        b.call(f"w{k}c1.1")
        b.request(f"w{k}c1.1", f"r{k}")
        b.records[0] = dataclasses.replace(b.records[0], capture_set=sets, worker=k, workers=2)
        (tmp_path / f"{sets}.w{k}.jsonl").write_bytes(b.render())
        builders.append(b)
    fd = _held(tmp_path / f"{sets}.w0.jsonl")
    out = io.StringIO()

    async def run() -> None:
        task = asyncio.create_task(tail_files(tmp_path, TailFilter(), Printer(out, out, True)), name="test-follow")
        try:
            lines = sum(len(b.records) for b in builders)
            await _until(lambda: len(out.getvalue().splitlines()) == lines, "both chains' lines")
            # Worker 1's death is found within a few polls: time for it to be (it ended the follow here before).
            deadline = time.monotonic() + 1.0
            while not task.done() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            b = builders[0]
            before = _rendered(b, len(b.records))
            b.finish()
            os.write(fd, b.render()[len(before) :])
            os.close(fd)
            await asyncio.wait_for(task, 30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    with pytest.raises(UpstreamError, match=rf"{sets}\.w1\.jsonl: its proxy stopped"):
        asyncio.run(run())
    kinds = [orjson.loads(line)["kind"] for line in out.getvalue().splitlines()]
    assert kinds.count("capture_start") == 2 and kinds.count("capture_end") == 1

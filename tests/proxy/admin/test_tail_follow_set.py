"""`tail CAPTURE_DIR --follow` on a capture set of `record --workers`: every worker's chain, not one of them."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import os
import time
from pathlib import Path

import orjson
import pytest

from proxy.admin.follow import newest_chains
from proxy.admin.hub import TailFilter
from proxy.admin.tail import Printer, tail_files
from replay.capture import liveness
from replay.capture.reader import read_capture
from replay.capture.schema import decode
from replay.errors import UserError
from tests.data.make_golden import Builder
from tests.support.capture import without_left_note

SET = "capture-20261206T100000-4242"


def _chain(worker: int, offset_ns: int) -> Builder:
    b = Builder(t=Builder().t + offset_ns).start()
    call = f"w{worker}-c1.1"
    b.call(call)
    b.request(call, f"r{worker}")
    b.response(call, f"r{worker}", "tok", final=True)
    b.half_close(call)
    b.end(call)
    b.finish()
    b.records[0] = dataclasses.replace(b.records[0], capture_set=SET, worker=worker, workers=2)
    return b


def test_every_workers_chain_is_followed(tmp_path: Path) -> None:
    """Two workers' chains (and an older single capture beside them): the follow prints every record of both
    chains, each once, and ends when both ended. It followed the chain it found first only, half the calls."""
    (tmp_path / "capture-20261206T090000-7.jsonl").write_bytes(_chain(0, 0).render())  # older: not followed
    for k in (0, 1):
        (tmp_path / f"{SET}.w{k}.jsonl").write_bytes(_chain(k, k * 1_000_000).render())
    assert [p.name for p in newest_chains(tmp_path)] == [f"{SET}.w0.jsonl", f"{SET}.w1.jsonl"]
    out, err = io.StringIO(), io.StringIO()
    asyncio.run(asyncio.wait_for(tail_files(tmp_path, TailFilter(), Printer(out, err, True)), 30))
    assert without_left_note(err.getvalue(), f"{SET}.w0.jsonl") == ""
    printed = [decode(orjson.loads(line)) for line in out.getvalue().splitlines()]
    want = [pair for k in (0, 1) for pair in read_capture(tmp_path / f"{SET}.w{k}.jsonl")]
    assert sorted(printed, key=repr) == sorted(want, key=repr)
    assert {r.call for _, r in printed if r.kind == "call_start"} == {"w0-c1.1", "w1-c1.1"}


def test_a_filter_follows_calls_across_the_chains(tmp_path: Path) -> None:
    """--request-id r1 on the set: worker 1's call, all of it, and the capture-level records of both chains."""
    for k in (0, 1):
        (tmp_path / f"{SET}.w{k}.jsonl").write_bytes(_chain(k, k * 1_000_000).render())
    out, err = io.StringIO(), io.StringIO()
    flt = TailFilter(request_ids=frozenset({"r1"}))
    asyncio.run(asyncio.wait_for(tail_files(tmp_path, flt, Printer(out, err, True)), 30))
    assert without_left_note(err.getvalue(), f"{SET}.w0.jsonl") == ""
    printed = [decode(orjson.loads(line))[1] for line in out.getvalue().splitlines()]
    assert {r.call for r in printed if hasattr(r, "call")} == {"w1-c1.1"}
    assert sorted(r.kind for r in printed if not hasattr(r, "call")) == ["capture_end"] * 2 + ["capture_start"] * 2


def test_a_workers_chain_that_appears_after_the_follow_started_is_followed_too(tmp_path: Path) -> None:
    """A follow started as `record --workers 2` starts: worker 0's file is there, worker 1's comes a moment
    later. Both chains are printed in full (it followed the chains present at its start only: half the calls,
    and nothing said so)."""
    first = _chain(0, 0)
    (tmp_path / f"{SET}.w0.jsonl").write_bytes(_open(first))
    held = os.open(tmp_path / f"{SET}.w0.jsonl", os.O_RDONLY)  # worker 0 is running: it holds its file
    assert liveness.hold(held)
    out = io.StringIO()

    async def run() -> None:
        task = asyncio.create_task(tail_files(tmp_path, TailFilter(), Printer(out, out, True)), name="test-follow")
        try:
            deadline = time.monotonic() + 30
            while len(out.getvalue().splitlines()) < 2:  # worker 0's first lines: the follow is under way
                assert time.monotonic() < deadline and not task.done()
                await asyncio.sleep(0.01)
            (tmp_path / f"{SET}.w1.jsonl").write_bytes(_chain(1, 1_000_000).render())
            while '"call":"w1-c1.1"' not in out.getvalue():
                assert time.monotonic() < deadline and not task.done()
                await asyncio.sleep(0.01)
            with open(tmp_path / f"{SET}.w0.jsonl", "ab") as f:  # worker 0 ends its chain: the follow ends
                f.write(first.render()[len(_open(first)) :])
            os.close(held)
            await asyncio.wait_for(task, 30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(run())
    printed = [decode(orjson.loads(line)) for line in out.getvalue().splitlines()]
    want = [pair for k in (0, 1) for pair in read_capture(tmp_path / f"{SET}.w{k}.jsonl")]
    assert sorted(printed, key=repr) == sorted(want, key=repr)


def _open(b: Builder) -> bytes:
    """``b``'s lines before its capture_end (a chain still being written)."""
    lines = b.render().split(b"\n")
    return b"\n".join(lines[:2]) + b"\n"


def test_a_follow_started_before_the_proxy_made_its_directory_waits_for_the_first_capture(tmp_path: Path) -> None:
    """`tail DIR --follow` started with `record` (a script starting both): DIR does not exist yet, then holds no
    capture, then the proxy's first file. It said "not a directory" / "no capture files", exit 2; it now waits,
    says so once on stderr, and follows the capture once there. A path that is a file is refused at once."""
    directory = tmp_path / "captures"
    out, err = io.StringIO(), io.StringIO()

    async def run() -> None:
        task = asyncio.create_task(tail_files(directory, TailFilter(), Printer(out, err, True)), name="test-follow")
        try:
            deadline = time.monotonic() + 30
            while "waiting for a capture" not in err.getvalue():
                assert time.monotonic() < deadline and not task.done()
                await asyncio.sleep(0.01)
            directory.mkdir()
            (directory / "capture-20261206T090000-7.jsonl").write_bytes(_chain(0, 0).render())
            await asyncio.wait_for(task, 30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(run())
    assert err.getvalue().count("waiting for a capture") == 1
    assert len(out.getvalue().splitlines()) == len(_chain(0, 0).records)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match="is not a directory"):
        asyncio.run(tail_files(tmp_path / "afile", TailFilter(), Printer(out, err, True)))

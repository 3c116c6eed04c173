"""`tail CAPTURE_DIR --follow` and the flags of `tail`: `--from-seq` is honoured, the connection's flags refused."""

from __future__ import annotations

import asyncio
import io
import os
import time
from pathlib import Path

import orjson
import pytest

from proxy.admin import follow
from proxy.admin.hub import TailFilter
from proxy.admin.tail import Printer, tail_files
from proxy.capture.writer import CaptureWriter, WriterOptions
from proxy.cli import main
from replay.capture import events as ev
from replay.capture import liveness
from replay.capture.schema import encode
from tests.data.make_golden import Builder
from tests.support.aio import running, until
from tests.support.capture import without_left_note

STEM = "capture-20261207T100000-4343"


def _two_calls() -> Builder:
    """Call c1.1 (request r1) starts before seq 4; its response, half-close and end come after it."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r1")
    b.call("c2.1")
    b.request("c2.1", "r2")
    b.response("c1.1", "r1", "tok", final=True)
    b.response("c2.1", "r2", "tok", final=True)
    for call in ("c1.1", "c2.1"):
        b.half_close(call)
        b.end(call)
    return b.finish()


def _follow(directory: Path, flt: TailFilter, from_seq: int | None) -> tuple[list[dict[str, object]], str]:
    out, err = io.StringIO(), io.StringIO()
    asyncio.run(asyncio.wait_for(tail_files(directory, flt, Printer(out, err, True), from_seq), 30))
    return [orjson.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


@pytest.mark.parametrize("flt", [TailFilter(), TailFilter(request_ids=frozenset({"r1"}))])
def test_from_seq_prints_the_records_from_that_seq_on(tmp_path: Path, flt: TailFilter) -> None:
    """`tail DIR --follow --from-seq 4`: the records from seq 4 on, as the filter selects them; a call that started
    before seq 4 is still told by its request id (the records before it go through the filter unprinted). The
    flag was ignored in silence: the capture was printed from seq 0."""
    (tmp_path / f"{STEM}.jsonl").write_bytes(_two_calls().render())
    everything, _ = _follow(tmp_path, flt, None)
    got, err = _follow(tmp_path, flt, 4)
    assert got == [r for r in everything if isinstance(r["seq"], int) and r["seq"] >= 4]
    assert without_left_note(err, f"{STEM}.jsonl") == ""
    assert min(r["seq"] for r in everything) == 0  # (there was something before seq 4 to leave out)
    if flt.request_ids:
        assert [r["kind"] for r in got if r.get("call") == "c1.1"] == ["message", "half_close", "call_end"]
        assert all(r.get("call") != "c2.1" for r in got)


def test_from_seq_of_a_removed_file_starts_at_the_first_file_left_with_a_warning(tmp_path: Path) -> None:
    """The seq asked for was in a file retention removed: the follow starts at the first file still there and
    says so in one line, as `tail --admin` does of a seq no longer in the proxy's memory."""
    start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="a:1", upstream="b:2", options={}, file_index=1)
    records = [start, ev.MarkRecorded(t_ns=2, note="m", labels={}), ev.CaptureEnded(t_ns=3, reason="shutdown", counts={})]
    name = f"{STEM}-0001.jsonl"
    (tmp_path / name).write_bytes(b"".join(encode(r, 5 + k) for k, r in enumerate(records)))
    got, err = _follow(tmp_path, TailFilter(), 2)
    assert [r["seq"] for r in got] == [5, 6, 7]
    assert without_left_note(err, name) == f"triton-tap: warning: seq 2 is no longer in the capture files: starting at 5 ({name})\n"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["DIR", "--follow", "--ca", "ca.pem"], "--ca is for tail --admin: tail CAPTURE_DIR --follow reads files"),
        (["DIR", "--follow", "--server-name", "n"], "--server-name is for tail --admin"),
        (["DIR", "--follow", "--cert", "c.pem", "--key", "k.pem"], "--cert is for tail --admin"),
        (["--admin", "127.0.0.1:1", "--follow"], "--follow goes with CAPTURE_DIR"),
        (["--admin", "127.0.0.1:1", "--live"], "--live goes with CAPTURE_DIR --follow"),
    ],
)
def test_flags_of_the_other_source_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str],
                                               says: str) -> None:  # fmt: skip
    """A flag that does nothing for the source given was ignored in silence (`--ca` on a follow of files, which
    connects to nothing; `--follow` on a Tail stream): one line and exit 2, nothing read or connected."""
    args = [str(tmp_path) if a == "DIR" else a for a in flags]
    assert main(["tail", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("triton-tap: error: ") and says in err[0], err


# -- --live: a capture being written, not one an earlier run left ----------------------------------------------


def test_live_waits_past_the_captures_an_earlier_run_left_for_the_one_being_written(tmp_path: Path) -> None:
    """The default capture directory an earlier day's runs left files in: one that ended cleanly, and one whose
    proxy was killed (no capture_end, held by no one), its name the newest (the same second as the new one's,
    its pid larger as text). `tail DIR --follow --live` started beside a new `record`, before the new proxy has
    opened its file: it says once that the newest capture is not being written, waits, and then prints the new
    capture, whole, and nothing of the old ones, and ends at its end. (A follow printed the killed run's capture
    and stopped with "its proxy stopped ... (killed?)", exit 1, while the new proxy recorded.)"""
    old = Builder().start()
    old.records.append(ev.MarkRecorded(t_ns=old.tick(), note="yesterday", labels={}))
    (tmp_path / "capture-20261206T080000-7.jsonl").write_bytes(old.finish().render())
    killed = Builder().start()
    killed.records.append(ev.MarkRecorded(t_ns=killed.tick(), note="killed", labels={}))
    (tmp_path / "capture-20261207T100000-99999.jsonl").write_bytes(killed.render())
    stem = "capture-20261207T100000-100"
    out, err = io.StringIO(), io.StringIO()

    async def run() -> None:
        follow = tail_files(tmp_path, TailFilter(), Printer(out, err, True), live=True)
        async with running(follow, "test-follow-live") as task:
            await until(lambda: "waiting for one that is" in err.getvalue() or task.done(), "the waiting note")
            assert not task.done() and out.getvalue() == ""
            start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="l:1", upstream="u:2", options={})
            w = CaptureWriter(WriterOptions(directory=tmp_path, stem=stem, compress="none", min_free_bytes=0), start)
            w.open()
            try:
                w.emit(ev.MarkRecorded(t_ns=2, note="today", labels={}))
                await until(lambda: "today" in out.getvalue() or task.done(), "the new capture's mark")
            finally:
                await w.close()  # (its capture_end ends the follow)

    asyncio.run(run())
    printed = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["kind"], r.get("note")) for r in printed] == [("capture_start", None), ("mark", "today"),
                                                            ("capture_end", None)]  # fmt: skip
    assert err.getvalue() == (f"triton-tap: warning: the newest capture in {str(tmp_path)!r} "
                              "(capture-20261207T100000-99999) is not being written (its proxy closed it or stopped): "
                              "waiting for one that is (Ctrl-C to stop)\n")  # fmt: skip


def test_live_follows_a_capture_being_written_at_once(tmp_path: Path) -> None:
    """The new proxy opened its file before the follow started: --live follows it at once, with no note."""
    stem = "capture-20261207T100000-100"
    start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="l:1", upstream="u:2", options={})
    out, err = io.StringIO(), io.StringIO()

    async def run() -> None:
        w = CaptureWriter(WriterOptions(directory=tmp_path, stem=stem, compress="none", min_free_bytes=0), start)
        w.open()
        follow = tail_files(tmp_path, TailFilter(), Printer(out, err, True), live=True)
        async with running(follow, "test-follow-live-now") as task:
            await until(lambda: '"capture_start"' in out.getvalue() or task.done(), "the capture's first line")
            await w.close()

    asyncio.run(run())
    assert [orjson.loads(line)["kind"] for line in out.getvalue().splitlines()] == ["capture_start", "capture_end"]
    assert err.getvalue() == ""


def test_live_follows_a_run_that_began_and_ended_between_two_looks(tmp_path: Path) -> None:
    """A capture that appeared after the follow started is the run it was started for, even when that run was
    over before the follow looked again (a proxy started and stopped within a poll, or a loaded machine): it is
    printed whole and the follow ends. (The follow took it for an earlier run's and waited for ever: an e2e
    test's SIGTERMed `record` timed out its `tail --follow --live`.) A capture there before it started is not."""
    killed = Builder().start()
    killed.records.append(ev.MarkRecorded(t_ns=killed.tick(), note="killed", labels={}))
    (tmp_path / "capture-20261207T100000-99999.jsonl").write_bytes(killed.render())
    short = Builder().start()
    short.records.append(ev.MarkRecorded(t_ns=short.tick(), note="short run", labels={}))
    out, err = io.StringIO(), io.StringIO()

    async def run() -> None:
        follow = tail_files(tmp_path, TailFilter(), Printer(out, err, True), live=True)
        async with running(follow, "test-follow-live-short") as task:
            await until(lambda: "waiting for one that is" in err.getvalue() or task.done(), "the waiting note")
            assert not task.done() and out.getvalue() == ""
            # Begun, written and closed within one poll: never held when the follow looks.
            (tmp_path / "capture-20261207T100001-5.jsonl").write_bytes(short.finish().render())
            await until(task.done, "the follow's end")

    asyncio.run(run())
    printed = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["kind"], r.get("note")) for r in printed] == [("capture_start", None), ("mark", "short run"),
                                                            ("capture_end", None)]  # fmt: skip


def test_a_capture_is_being_written_while_a_writer_holds_a_file_of_it(tmp_path: Path) -> None:
    """What --live and the default's note go by: a file held (any of the capture's: a rotation keeps the closed
    one held until the next is); none held but an empty file younger than the grace (its writer creates it, then
    locks it): starting, neither followed nor given up; else over (an empty file that old is a killed writer's)."""
    now = time.time()
    full, empty = tmp_path / f"{STEM}.jsonl", tmp_path / f"{STEM}-0001.jsonl"
    full.write_bytes(b'{"v":4}\n')
    empty.write_bytes(b"")
    assert liveness.capture_state([full], now) == "over"
    assert liveness.capture_state([full, empty], now) == "starting"
    os.utime(empty, (now - liveness.LOCK_GRACE_S - 1, now - liveness.LOCK_GRACE_S - 1))
    assert liveness.capture_state([full, empty], now) == "over"
    assert liveness.capture_state([full, tmp_path / "gone.jsonl"], now) == "over"
    fd = os.open(empty, os.O_WRONLY)
    try:
        assert liveness.hold(fd)
        assert liveness.capture_state([full, empty], now) == "written"
        # The captures found over are the caller's to keep, and not looked at again.
        over: set[str] = set()
        assert follow.newest_written(tmp_path, over) == ([full], STEM)
        assert follow.newest_written(tmp_path, {STEM}) == (None, STEM)
    finally:
        os.close(fd)
    over = set()
    assert follow.newest_written(tmp_path, over) == (None, STEM) and over == {STEM}

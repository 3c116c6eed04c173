"""``tail --follow``'s reader of capture files (proxy/admin/follow.py), on files written by the test.

The race it must survive: the directory is listed (``capture-X.jsonl`` is the newest capture), then
the writer rotates and compresses that file to ``capture-X.jsonl.gz`` before the follow opens it. And
the live file deleted by hand: the proxy's writer goes on in the chain's next file, and so does the follow.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import io
import os
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from proxy.admin import follow
from proxy.capture.writer import CaptureWriter, WriterOptions
from replay.capture import events as ev
from replay.capture import liveness
from replay.capture.schema import encode
from replay.errors import CaptureError, UpstreamError
from tests.support.aio import running, until
from tests.support.capture import without_left_note


def _lines(reason: str) -> bytes:
    start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="a:1", upstream="b:2", options={})
    end = ev.CaptureEnded(t_ns=2, reason=reason, counts={})  # type: ignore[arg-type]
    return encode(start, 0) + encode(end, 1)


async def _all(first: Path) -> list[bytes]:
    return [line async for _, line in follow.follow_lines(first)]


def test_a_file_compressed_between_listing_and_opening_is_read_as_its_gz(tmp_path: Path) -> None:
    plain = tmp_path / "capture-20261203T000000-1.jsonl"
    (tmp_path / f"{plain.name}.gz").write_bytes(gzip.compress(_lines("shutdown")))
    got = asyncio.run(_all(plain))  # the name as listed; only the .gz is there now
    assert [b'"kind":"capture_start"' in got[0], follow.is_end(got[1])] == [True, True]


def test_a_file_gone_for_good_is_a_capture_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follow, "VANISHED_S", 0.2)
    with pytest.raises(CaptureError, match="vanished while it was followed"):
        asyncio.run(_all(tmp_path / "capture-20261203T000000-1.jsonl"))




@pytest.mark.parametrize("compress", ["none", "zstd"])
def test_a_live_file_deleted_by_hand_is_followed_into_the_file_its_writer_went_on_in(
    tmp_path: Path, compress: str
) -> None:
    """rm of the live file: the proxy's writer lets it go without a capture_end and goes on in the chain's next
    file, whose gap record says what went with it. The follow goes there too and ends at the capture's end
    (it said "its proxy stopped without closing the capture (killed?)" of a proxy that was running)."""
    stem = "capture-20261207T000000-77"
    start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="l:1", upstream="u:2", options={})

    def msg(i: int) -> ev.MessageSeen:
        return ev.MessageSeen(t_ns=10 + i, call=f"c1.{i}", dir="c2s", index=0, size=3, compressed=False)

    async def run() -> list[tuple[str, dict[str, object]]]:
        w = CaptureWriter(WriterOptions(directory=tmp_path, stem=stem, compress=compress, min_free_bytes=0,
                                        check_interval_s=0.05), start)  # fmt: skip
        w.open()
        first = w.path
        got: list[tuple[str, dict[str, object]]] = []

        async def tail() -> None:
            async for path, line in follow.follow_lines(first):
                got.append((path.name, orjson.loads(line)))

        async with running(tail(), "test-follow-deleted"):
            try:
                w.emit(msg(0))
                await until(lambda: any(r["kind"] == "message" for _, r in got), "the first message followed")
                first.unlink()
                await until(lambda: w.path != first, "the writer's next file")
                w.emit(msg(1))
            finally:
                await w.close()  # (its capture_end ends the follow)
        return got

    got = asyncio.run(run())
    second = f"{stem}-0001.jsonl" + ("" if compress == "none" else ".zst")
    assert [(name == second, r["kind"]) for name, r in got] == [
        (False, "capture_start"), (False, "message"),
        (True, "capture_start"), (True, "gap"), (True, "message"), (True, "capture_end"),
    ]  # fmt: skip
    assert str(got[3][1]["reason"]).startswith("file_unlinked")


@pytest.mark.parametrize("how", ["deleted", "renamed"])
def test_a_deleted_file_whose_writer_died_too_is_an_upstream_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Deleted (or renamed) and let go without its end, and no next file comes: the proxy died (or was killed)
    with it; the follow waits a moment for the chain's next file, then stops with the error rather than wait
    for ever."""
    monkeypatch.setattr(follow, "VANISHED_S", 0.3)
    path = tmp_path / "capture-20261207T000000-78.jsonl"
    start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="a:1", upstream="b:2", options={})
    path.write_bytes(encode(start, 0))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    assert liveness.hold(fd)

    async def run() -> list[bytes]:
        got: list[bytes] = []

        async def tail() -> None:
            async for _, line in follow.follow_lines(path):
                got.append(line)

        async with running(tail(), "test-follow-deleted-dead"):
            await until(lambda: len(got) == 1, "the capture_start followed")
            if how == "deleted":
                path.unlink()
            else:
                path.rename(tmp_path / "elsewhere.jsonl")
            os.close(fd)
        return got

    with pytest.raises(UpstreamError, match=f"was {how} while being written, and its proxy opened no next file"):
        asyncio.run(run())


def _counting_lock_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the follow's tests of the writer's lock (by name or by descriptor): one element per test."""
    checks: list[int] = []
    for name in ("being_written", "fd_being_written"):
        real = getattr(liveness, name, None)
        if real is None:
            continue

        def counted(arg: object, real: Callable[[object], bool] = real) -> bool:
            checks.append(1)
            return real(arg)

        monkeypatch.setattr(liveness, name, counted)
    return checks


def _live_file(tmp_path: Path, stem: str) -> tuple[Path, Path, ev.CaptureStarted, int]:
    """``{stem}.jsonl`` with its capture_start, locked by the descriptor returned as its writer holds it, and the
    chain's next file (not created)."""
    path = tmp_path / f"{stem}.jsonl"
    start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="a:1", upstream="b:2", options={})
    path.write_bytes(encode(start, 0))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    assert liveness.hold(fd)
    return path, tmp_path / f"{stem}-0001.jsonl", start, fd


async def _kinds_into(got: list[tuple[str, str]], path: Path) -> None:
    """Follows ``path``: the file and record kind of each line, into ``got``."""
    async for p, line in follow.follow_lines(path):
        got.append((p.name, orjson.loads(line)["kind"]))


def test_a_live_file_renamed_while_followed_is_followed_to_its_end_and_into_the_next_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """logrotate's mv of the live file: its writer still holds it and closes it with capture_end (reopen) under
    its new name, then goes on in the chain's next file. The follow, at the end of what was written, tests the
    lock while the file has its new name; it tested the old name (gone: "nobody holds it") and stopped with
    "its proxy stopped without closing the capture (killed?)" of a proxy that was running."""
    checks = _counting_lock_checks(monkeypatch)
    path, nxt, start, fd = _live_file(tmp_path, "capture-20261207T000000-79")

    async def run() -> list[tuple[str, str]]:
        got: list[tuple[str, str]] = []
        async with running(_kinds_into(got, path), "test-follow-renamed") as task:
            await until(lambda: len(got) == 1, "the capture_start followed")
            path.rename(tmp_path / "moved-by-operator.jsonl")
            before = len(checks)
            # Two tests of the lock on the renamed file (the first one that failed was followed by the stop).
            await until(lambda: len(checks) >= before + 2 or task.done(), "the follow at the end of the file")
            assert not task.done(), task.exception()
            os.write(fd, encode(ev.CaptureEnded(t_ns=2, reason="reopen", counts={}, next_file=nxt.name), 1))
            nxt.write_bytes(encode(dataclasses.replace(start, file_index=1), 2)
                            + encode(ev.CaptureEnded(t_ns=3, reason="shutdown", counts={}), 3))  # fmt: skip
            os.close(fd)
        return got

    assert asyncio.run(run()) == [
        (path.name, "capture_start"), (path.name, "capture_end"), (nxt.name, "capture_start"), (nxt.name, "capture_end"),
    ]  # fmt: skip


@pytest.mark.parametrize("proxy", ["goes on", "dies"])
def test_a_follow_waits_for_the_next_file_while_the_writer_holds_the_one_that_named_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxy: str
) -> None:
    """A rotated file's capture_end names the next file, which is not there yet (a writer that cannot create it,
    a full disk, tries again later): the follow waits, past VANISHED_S, for as long as the writer holds the file
    that named it, and goes on when the next file comes. A proxy killed there lets that file go with no next file:
    the follow said nothing and waited for ever; it stops with the error once VANISHED_S has passed."""
    monkeypatch.setattr(follow, "VANISHED_S", 0.3)
    checks = _counting_lock_checks(monkeypatch)
    path, nxt, start, fd = _live_file(tmp_path, "capture-20261207T000000-83")

    async def run() -> list[tuple[str, str]]:
        got: list[tuple[str, str]] = []
        async with running(_kinds_into(got, path), "test-follow-between-files") as task:
            os.write(fd, encode(ev.CaptureEnded(t_ns=2, reason="rotate", counts={}, next_file=nxt.name), 1))
            await until(lambda: len(got) == 2, "the capture_end followed")
            before = len(checks)
            # Held: more lock tests than VANISHED_S has polls, and still waiting.
            polls = int(follow.VANISHED_S / follow.POLL_S) + 3
            await until(lambda: len(checks) >= before + polls or task.done(), "the follow waiting for the next file")
            assert not task.done(), task.exception()
            if proxy == "dies":
                os.close(fd)
                return got
            nxt.write_bytes(encode(dataclasses.replace(start, file_index=1), 2)
                            + encode(ev.CaptureEnded(t_ns=3, reason="shutdown", counts={}), 3))  # fmt: skip
            os.close(fd)
        return got

    if proxy == "dies":
        with pytest.raises(UpstreamError, match=(
            f"^{path.name} names {nxt.name} as its next file, which is not there, and its proxy no longer holds it: "
            "the proxy stopped")):  # fmt: skip
            asyncio.run(run())
        return
    assert asyncio.run(run()) == [
        (path.name, "capture_start"), (path.name, "capture_end"), (nxt.name, "capture_start"), (nxt.name, "capture_end"),
    ]  # fmt: skip


def test_a_mark_labelled_kind_capture_end_does_not_end_the_follow(tmp_path: Path) -> None:
    """`mark --label kind=capture_end`: the mark's line holds the bytes "kind":"capture_end" (its labels). The
    follow goes on to the capture's real end; it stopped at the mark (exit 0) while the proxy went on recording."""
    path = tmp_path / "capture-20261207T000000-80.jsonl"
    start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="a:1", upstream="b:2", options={})
    marks = [ev.MarkRecorded(t_ns=2, note="first", labels={"kind": "capture_end"}),
             ev.MarkRecorded(t_ns=3, note='"kind":"capture_end"', labels={"reason": "rotate"})]  # fmt: skip
    end = ev.CaptureEnded(t_ns=4, reason="shutdown", counts={})
    path.write_bytes(b"".join(encode(r, seq) for seq, r in enumerate([start, *marks, end])))
    got = asyncio.run(_all(path))
    assert [orjson.loads(line)["kind"] for line in got] == ["capture_start", "mark", "mark", "capture_end"]
    assert [follow.is_end(line) for line in got] == [False, False, False, True]


def test_a_follow_behind_retention_skips_to_the_oldest_file_left_and_says_what_it_did_not_show(
    tmp_path: Path,
) -> None:
    """A follow that fell behind (a paused pager) while --max-total-mb removed the files after the one it reads:
    the capture_end it reads names a file that is gone. It goes on in the oldest file of the chain still there
    and says, in one line on stderr, which files and which records it did not show; it waited for ever for the
    removed file, showing nothing more (not even after the proxy stopped)."""
    from proxy.admin.hub import TailFilter
    from proxy.admin.tail import Printer, tail_files

    stem = "capture-20261207T000000-81"
    start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="a:1", upstream="b:2", options={})
    seq = 0
    for index in range(4):
        name = f"{stem}-{index:04d}.jsonl" if index else f"{stem}.jsonl"
        end = ev.CaptureEnded(t_ns=3, reason="rotate", counts={}, next_file=f"{stem}-{index + 1:04d}.jsonl")
        if index == 3:
            end = ev.CaptureEnded(t_ns=3, reason="shutdown", counts={})
        records = [dataclasses.replace(start, file_index=index), ev.MarkRecorded(t_ns=2, note=f"m{index}", labels={}), end]
        if index not in (1, 2):  # (removed by retention before the follow got there)
            (tmp_path / name).write_bytes(b"".join(encode(r, seq + k) for k, r in enumerate(records)))
        seq += len(records)
    out, err = io.StringIO(), io.StringIO()
    asyncio.run(asyncio.wait_for(tail_files(tmp_path, TailFilter(), Printer(out, err, True)), 30))
    assert [orjson.loads(line)["seq"] for line in out.getvalue().splitlines()] == [0, 1, 2, 9, 10, 11]
    assert without_left_note(err.getvalue(), f"{stem}.jsonl") == (
        f"triton-tap: warning: 2 files ({stem}-0001.jsonl and the 1 after it) removed before this follow read them "
        "(--max-total-mb retention, or by hand): seq 3..8 (6 record(s)) not shown; going on in "
        f"{stem}-0003.jsonl\n"
    )


def test_a_next_file_the_writer_never_created_is_no_removed_file_with_records(tmp_path: Path) -> None:
    """The writer could not create the file its capture_end named and went on in the next index: nothing was
    removed and no record is missing (the seqs run on). The follow said the file was removed and its records
    'not shown'; it says the file is not there and nothing is missing."""
    from proxy.admin.hub import TailFilter
    from proxy.admin.tail import Printer, tail_files

    stem = "capture-20261207T000000-82"
    start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="a:1", upstream="b:2", options={})
    first = [start, ev.CaptureEnded(t_ns=3, reason="rotate", counts={}, next_file=f"{stem}-0001.jsonl")]
    (tmp_path / f"{stem}.jsonl").write_bytes(b"".join(encode(r, k) for k, r in enumerate(first)))
    later = [dataclasses.replace(start, file_index=2), ev.CaptureEnded(t_ns=4, reason="shutdown", counts={})]
    (tmp_path / f"{stem}-0002.jsonl").write_bytes(b"".join(encode(r, 2 + k) for k, r in enumerate(later)))
    out, err = io.StringIO(), io.StringIO()
    asyncio.run(asyncio.wait_for(tail_files(tmp_path, TailFilter(), Printer(out, err, True)), 30))
    assert [orjson.loads(line)["seq"] for line in out.getvalue().splitlines()] == [0, 1, 2, 3]
    assert without_left_note(err.getvalue(), f"{stem}.jsonl") == (f"triton-tap: warning: {stem}-0001.jsonl named as the next file is not there, and no "
                              f"record is missing (seq 1, then 2): going on in {stem}-0002.jsonl\n")  # fmt: skip


def test_an_empty_file_no_writer_holds_is_a_stopped_proxy_after_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer creates a file, locks it, then writes its first line. A proxy killed in between, or one that could
    not write that line (a full disk) and then stopped, leaves an empty file nobody holds: the follow waited for
    it for ever; it stops with the error once LOCK_GRACE_S has passed. Held, the same empty file is waited for past
    that, and followed once it has lines."""
    monkeypatch.setattr(liveness, "LOCK_GRACE_S", 0.3)
    dead = tmp_path / "capture-20261207T000000-80.jsonl"
    dead.write_bytes(b"")
    with pytest.raises(UpstreamError, match=r"^capture-20261207T000000-80\.jsonl: its proxy stopped before it wrote"):
        asyncio.run(_all(dead))

    live = tmp_path / "capture-20261207T000000-81.jsonl"
    fd = os.open(live, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        assert liveness.hold(fd)

        async def run() -> list[tuple[str, str]]:
            got: list[tuple[str, str]] = []
            async with running(_kinds_into(got, live), "test-follow-empty-held"):
                await asyncio.sleep(3 * liveness.LOCK_GRACE_S)  # (past the grace: still waiting, held)
                os.write(fd, _lines("shutdown"))
            return got

        assert asyncio.run(run()) == [(live.name, "capture_start"), (live.name, "capture_end")]
    finally:
        os.close(fd)


def test_a_file_a_fast_rotation_named_compressed_and_passed_is_not_taken_for_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follow looks for the next file a capture_end named, finds neither name, then lists the directory: by
    then the writer created it, closed it, went on in the one after and gzipped it, and the listing saw the one
    after only. The follow skipped the file as removed by retention; it looks again and reads it."""
    stem = "capture-20261207T000000-82"
    named = f"{stem}-0001.jsonl"
    (tmp_path / f"{named}.gz").write_bytes(gzip.compress(_lines("rotate")))
    (tmp_path / f"{stem}-0002.jsonl").write_bytes(_lines("shutdown"))
    real, looks = follow._existing, [0]

    def existing(directory: Path, name: str) -> Path | None:
        looks[0] += 1
        return None if looks[0] == 1 else real(directory, name)  # (the first look came before it was created)

    monkeypatch.setattr(follow, "_existing", existing)
    assert asyncio.run(follow._named_or_later(tmp_path, named, 1.0)) == (tmp_path / f"{named}.gz", 0)


def test_a_capture_directory_removed_while_followed_is_one_error(tmp_path: Path) -> None:
    """rm -rf of the directory, then the proxy stops: the follow looked for the chain's next file in a directory
    that is gone, and ended with a traceback (FileNotFoundError); it is one line's error."""
    with pytest.raises(CaptureError, match="the capture directory was removed while it was followed"):
        follow._later_of_chain(tmp_path / "gone", "capture-20261207T000000-83.jsonl")

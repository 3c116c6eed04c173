"""The streaming capture reader: rotation, compression, tolerated and fatal damage, holes."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import os
import socket
import tempfile
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest
import zstandard

from proxy.resend.plan import scripts
from replay.capture import events as ev
from replay.capture.holes import SeqWatch
from replay.capture.reader import read_capture
from replay.capture.schema import encode
from replay.cli.main import main as check_main
from replay.cli.report import build_report
from replay.errors import CaptureError, CaptureTooNew
from replay.machine.tracker import track
from replay.tools.captured import summarize
from replay.tools.feed import stream_calls
from tests.data.make_golden import Builder
from tests.support.paths import DATA

STEM = "capture-20260101T000000-4242"  # a 4-digit pid must not read as a rotation index


def _sample() -> Builder:
    b = Builder().start()
    b.call("c1.1")
    for rid in ("a", "b", "c"):
        b.request("c1.1", rid)
        b.response("c1.1", rid, f"{rid}-0")
        b.response("c1.1", rid, None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    return b.finish()


def _rotated(directory: Path, b: Builder, cuts: list[int], gz: frozenset[int] = frozenset()) -> list[Path]:
    """Write ``b`` as the writer would rotate it at record indexes ``cuts`` (gzipping files in ``gz``)."""
    records = b.records
    parts = [records[i:j] for i, j in zip([0, *cuts], [*cuts, len(records)], strict=True)]
    paths: list[Path] = []
    seq = 0
    start = records[0]
    assert isinstance(start, ev.CaptureStarted)
    for n, part in enumerate(parts):
        name = STEM + (f"-{n:04d}" if n else "") + ".jsonl"
        body = list(part)
        if n:
            body.insert(0, ev.CaptureStarted(t_ns=start.t_ns, proxy_version="0.1.0", listen=start.listen,
                                             upstream=start.upstream, options=start.options, file_index=n))  # fmt: skip
        if n < len(parts) - 1:
            nxt = STEM + f"-{n + 1:04d}.jsonl" + (".gz" if n + 1 in gz else "")
            body.append(ev.CaptureEnded(t_ns=start.t_ns, reason="rotate", counts={}, next_file=nxt))
        data = b"".join(encode(r, seq + i) for i, r in enumerate(body))
        seq += len(body)
        path = directory / name
        if n in gz:
            path = directory / (name + ".gz")
            path.write_bytes(gzip.compress(data, mtime=0))
        else:
            path.write_bytes(data)
        paths.append(path)
    return paths


def test_a_live_file_renamed_by_hand_and_read_is_no_missing_file(tmp_path: Path) -> None:
    """The operator renamed the live file; the proxy went on in the next file (its capture_end names it, the
    next one starts at file 1). Both read: nothing is missing, though the renamed file is a capture of its own
    by name (check said "earlier files were not given" and "continues in ..., which was not given"). Either
    file alone still has its hole."""
    paths = _rotated(tmp_path, _sample(), [5])
    renamed = paths[0].rename(tmp_path / "renamed-by-operator.jsonl")
    reader = read_capture(tmp_path)
    list(reader)
    assert reader.gaps == []
    for alone in (renamed, paths[1]):
        only = read_capture(alone)
        list(only)
        assert [g.kind for g in only.gaps] == ["missing_file"], only.gaps


def test_rotated_and_gzipped_files_are_read_in_seq_order_from_a_directory(tmp_path: Path) -> None:
    """A directory of rotated files (some .jsonl.gz) reads as one gap-free capture in seq order."""
    _rotated(tmp_path, _sample(), [4, 8], gz=frozenset({1}))
    reader = read_capture(tmp_path)
    seqs = [seq for seq, _ in reader]
    assert seqs == list(range(len(seqs)))
    assert (reader.gaps, reader.warnings, reader.captures) == ([], [], 1)
    assert [r.outcome for r in track(tmp_path).requests] == ["completed"] * 3


def test_files_given_out_of_order_are_sorted_by_rotation_index(tmp_path: Path) -> None:
    """Naming files in any order (even twice, or with their directory) still reads them in rotation order."""
    paths = _rotated(tmp_path, _sample(), [5])
    reader = read_capture([paths[1], paths[0], paths[1], tmp_path])
    seqs = [seq for seq, _ in reader]
    assert seqs == sorted(seqs)
    assert reader.files == paths


def test_plain_file_is_preferred_while_its_gzip_is_being_written(tmp_path: Path) -> None:
    """Mid-rotation both x.jsonl and x.jsonl.gz exist: the complete plain file is read, once."""
    paths = _rotated(tmp_path, _sample(), [5])
    (tmp_path / (paths[0].name + ".gz")).write_bytes(gzip.compress(paths[0].read_bytes()[:50]))
    reader = read_capture(tmp_path)
    assert reader.files == paths
    assert [seq for seq, _ in reader] == list(range(len(_sample().records) + 2))


def test_missing_rotated_files_are_reported(tmp_path: Path) -> None:
    """Given only some files of a capture, the missing beginning or continuation is a reported hole."""
    paths = _rotated(tmp_path, _sample(), [5])
    first = read_capture(paths[0])
    list(first)
    assert [g.kind for g in first.gaps] == ["missing_file"]
    assert paths[1].name in first.gaps[0].detail
    second = read_capture(paths[1])
    list(second)
    assert [g.kind for g in second.gaps] == ["missing_file"]


def test_truncated_last_line_of_the_last_file_is_a_warning(tmp_path: Path) -> None:
    """A line cut short at the end of the capture is skipped with a warning naming file and line."""
    reader = read_capture(DATA / "truncated_last_line.jsonl")
    records = list(reader)
    assert len(records) == 7
    assert len(reader.warnings) == 1
    assert "truncated_last_line.jsonl:8: last line cut short" in reader.warnings[0]


def test_truncated_line_in_an_earlier_rotated_file_is_an_error(tmp_path: Path) -> None:
    """A cut line followed by more of the capture is damage, not a crash artefact: CaptureError naming file and line."""
    paths = _rotated(tmp_path, _sample(), [5])
    data = paths[0].read_bytes()
    paths[0].write_bytes(data[:-10])
    with pytest.raises(CaptureError) as info:
        list(read_capture(tmp_path))
    assert (info.value.path, info.value.line) == (str(paths[0]), 6)


def test_cut_gzip_at_the_end_is_a_warning_but_in_the_middle_an_error(tmp_path: Path) -> None:
    """A compressed file cut short is tolerated only as the capture's last file."""
    paths = _rotated(tmp_path, _sample(), [5], gz=frozenset({1}))
    data = paths[1].read_bytes()
    paths[1].write_bytes(data[: len(data) - 20])
    reader = read_capture(tmp_path)
    list(reader)
    assert any("compressed file cut short" in w for w in reader.warnings)
    (tmp_path / "mid").mkdir()
    paths = _rotated(tmp_path / "mid", _sample(), [3, 6], gz=frozenset({1}))
    whole = [seq for seq, _ in read_capture(tmp_path / "mid")]
    data = paths[1].read_bytes()
    paths[1].write_bytes(data[: len(data) - 20])
    with pytest.raises(CaptureError, match="broken compressed file"):
        list(read_capture(tmp_path / "mid"))
    # --skip-damaged: the cut is a hole (its bytes, then the seqs the next file skips), and the files after it are
    # read. It stopped every tool (check, report, export) with the same error: a copy interrupted mid-file made
    # the rest of the capture unreadable.
    reader = read_capture(tmp_path / "mid", skip_damaged=True)
    got = [seq for seq, _ in reader]
    assert got[-1] == whole[-1] and set(got) < set(whole)
    kinds = [g.kind for g in reader.gaps]
    assert kinds == ["damaged_frame", "seq_gap"], reader.gaps
    assert "cut short (the file ends inside it)" in reader.gaps[0].detail and reader.gaps[0].file == str(paths[1])
    assert not any("compressed file cut short" in w for w in reader.warnings)


def test_garbled_middle_line_is_an_error_naming_file_and_line() -> None:
    """Bad JSON in the middle of a capture raises CaptureError with path and line."""
    with pytest.raises(CaptureError) as info:
        list(read_capture(DATA / "garbled_middle.jsonl"))
    assert info.value.line == 3
    assert str(info.value).startswith(f"{DATA / 'garbled_middle.jsonl'}:3: not valid JSON")


def test_newer_schema_version_is_capture_too_new() -> None:
    """A record from a newer schema raises CaptureTooNew naming the line."""
    with pytest.raises(CaptureTooNew) as info:
        list(read_capture(DATA / "too_new.jsonl"))
    assert info.value.line == 2


def test_missing_path_and_empty_directory_are_errors(tmp_path: Path) -> None:
    """Nothing to read is a CaptureError at once, not an empty report."""
    with pytest.raises(CaptureError, match="no such file"):
        read_capture(tmp_path / "nope.jsonl")
    with pytest.raises(CaptureError, match=r"no \*\.jsonl"):
        read_capture(tmp_path)


def test_seq_gaps_duplicates_and_gap_records_are_reported(tmp_path: Path) -> None:
    """Missing seq numbers, a repeated seq and a gap record each become a reported hole."""
    lines = (DATA / "one_response.jsonl").read_bytes().splitlines(keepends=True)
    damaged = [lines[0], lines[1], lines[3], lines[3], *lines[4:]]
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"".join(damaged))
    reader = read_capture(path)
    list(reader)
    assert [(g.kind, g.first_seq, g.last_seq, g.count) for g in reader.gaps] == [
        ("seq_gap", 2, 2, 1),
        ("duplicate_seq", 3, 3, 1),
    ]
    gaps = read_capture(DATA / "gaps.jsonl")
    list(gaps)
    assert [(g.kind, g.count) for g in gaps.gaps] == [("gap_record", 3), ("seq_gap", 2)]


def test_reader_streams_without_reading_the_whole_file_first(tmp_path: Path) -> None:
    """The first record is yielded while the rest of the capture is not even written yet (a FIFO)."""
    fifo = tmp_path / "live.jsonl"
    os.mkfifo(fifo)
    lines = (DATA / "many_responses.jsonl").read_bytes().splitlines(keepends=True)
    first_read = threading.Event()
    done = threading.Event()

    def writer() -> None:
        with open(fifo, "wb", buffering=0) as f:
            f.write(lines[0])
            # Hold the rest back until the reader proves it got the first record.
            first_read.wait(timeout=30)
            for line in lines[1:]:
                f.write(line)
        done.set()

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    reader = iter(read_capture(fifo))
    seq, record = next(reader)
    assert (seq, record.kind) == (0, "capture_start")
    assert not done.is_set()
    first_read.set()
    rest = list(reader)
    t.join(timeout=30)
    assert len(rest) == len(lines) - 1


def test_unknown_record_kind_is_skipped_with_one_warning(tmp_path: Path) -> None:
    """A record kind from a newer writer of the same schema is skipped, warned once, and leaves no hole."""
    b = _sample()
    body, seq = [], 0
    for i, r in enumerate(b.records):
        if i in (4, 5):  # one unknown record before each of these
            body.append(b'{"v":1,"seq":%d,"kind":"from_the_future","x":1}\n' % seq)
            seq += 1
        body.append(encode(r, seq))
        seq += 1
    path = tmp_path / "future.jsonl"
    path.write_bytes(b"".join(body))
    reader = read_capture(path)
    got = list(reader)
    assert [type(r) for _, r in got] == [type(r) for r in b.records]
    assert reader.gaps == []
    assert len(reader.warnings) == 1 and "'from_the_future' is unknown" in reader.warnings[0]


def test_record_without_kind_is_still_an_error(tmp_path: Path) -> None:
    """A line with no kind at all is damage, not a newer writer: the reader names file and line."""
    path = tmp_path / "nokind.jsonl"
    path.write_bytes(encode(_sample().records[0], 0) + b'{"v":1,"seq":1}\n')
    with pytest.raises(CaptureError, match=r"nokind.jsonl:2: missing or invalid record kind"):
        list(read_capture(path))


def test_holes_are_reported_as_check_json_lists_them() -> None:
    """Each hole's `check --json` entry: its kind, the file and line where it shows, the seq range, how
    many records, and the sentence users read."""
    from tests.support.paths import DATA

    gaps = read_capture(str(DATA / "gaps.jsonl"))
    list(gaps)
    killed = read_capture(str(DATA / "proxy_killed.jsonl"))
    list(killed)
    name = str(DATA / "gaps.jsonl")
    assert [g.to_json() for g in gaps.gaps] == [
        {"kind": "gap_record", "file": name, "line": 4, "first_seq": 3, "last_seq": 3, "count": 3,
         "detail": "the proxy dropped 3 record(s): queue_full: the capture disk is slower than the traffic"},
        {"kind": "seq_gap", "file": name, "line": 7, "first_seq": 6, "last_seq": 7, "count": 2,
         "detail": "2 record(s) missing before seq 8"},
    ]  # fmt: skip
    assert [g.to_json() for g in killed.gaps] == [
        {"kind": "missing_capture_end", "file": str(DATA / "proxy_killed.jsonl"), "line": 6, "first_seq": None,
         "last_seq": None, "count": None,
         "detail": "no capture_end: the proxy stopped without closing the capture (killed?)"},
    ]  # fmt: skip


def test_a_rotated_file_read_without_its_next_names_it_where_it_ends(tmp_path: Path) -> None:
    """Only the first of two rotated files: one `missing_file` hole at its last line, naming the next file."""
    first, second = _rotated(tmp_path, _sample(), [5])
    reader = read_capture(first)
    list(reader)
    assert [g.to_json() for g in reader.gaps] == [
        {"kind": "missing_file", "file": str(first), "line": 6, "first_seq": None, "last_seq": None, "count": None,
         "detail": f"the capture continues in {second.name}, which was not given"},
    ]  # fmt: skip


def test_a_capture_read_from_a_later_rotated_file_names_the_records_before_it(tmp_path: Path) -> None:
    """Only the second of two rotated files: one `missing_file` hole at its first line, saying every record
    before its first one (seqs up to 5) is in files that were not given."""
    _, second = _rotated(tmp_path, _sample(), [5])
    reader = read_capture(second)
    list(reader)
    assert [g.to_json() for g in reader.gaps] == [
        {"kind": "missing_file", "file": str(second), "line": 1, "first_seq": None, "last_seq": 5, "count": None,
         "detail": "the capture starts at rotated file 1: its earlier files were not given"},
    ]  # fmt: skip


def test_a_rotated_file_missing_between_two_read_is_a_missing_file_hole(tmp_path: Path) -> None:
    """Files 0 and 2 of three, given as a directory: besides the seqs missing, a `missing_file` hole at file 2's
    start naming file 1, so the capture is not called complete (it was only a `seq_gap`, and `complete: true`)."""
    from replay.machine.tracker import track

    _, middle, last = _rotated(tmp_path, _sample(), [3, 6])
    middle.unlink()
    reader = read_capture(tmp_path)
    list(reader)
    assert [(g.kind, g.file, g.line) for g in reader.gaps] == [
        ("missing_file", str(last), 1), ("seq_gap", str(last), 1),
    ]  # fmt: skip
    assert reader.gaps[0].detail == "rotated file 1 was not given (between the files read)"
    assert track(tmp_path).summary()["complete"] is False


def test_a_rotated_file_starting_at_seq_0_claims_no_record_before_it(tmp_path: Path) -> None:
    """A later rotated file whose first record is seq 0 (numbered anew): the earlier files are still missing,
    but no seq before 0 is named as lost."""
    start = _sample().records[0]
    path = tmp_path / f"{STEM}-0002.jsonl"
    path.write_bytes(encode(ev.CaptureStarted(t_ns=start.t_ns, proxy_version="0.1.0", listen=start.listen,
                                              upstream=start.upstream, options=start.options, file_index=2), 0))  # fmt: skip
    reader = read_capture(path)
    list(reader)
    assert [(g.kind, g.line, g.first_seq, g.last_seq) for g in reader.gaps] == [
        ("missing_file", 1, None, None), ("missing_capture_end", 1, None, None),
    ]  # fmt: skip


def test_any_one_lost_record_is_a_seq_gap_naming_it(tmp_path: Path) -> None:
    """Whichever single record is missing (after a request, a response, a call's start...), the hole is
    exactly that seq, and every other record is read."""
    b = _sample()
    for lost in range(1, len(b.records)):
        path = tmp_path / f"lost{lost}.jsonl"
        path.write_bytes(b.render(skip_seqs=(lost,)))
        reader = read_capture(path)
        records = list(reader)
        assert len(records) == len(b.records), lost
        assert [(g.kind, g.first_seq, g.last_seq, g.count) for g in reader.gaps] == [("seq_gap", lost, lost, 1)], lost


def test_any_one_line_written_twice_is_read_once_and_reported(tmp_path: Path) -> None:
    """Whichever line is repeated exactly, the records read are the capture's own, and one `duplicate_seq`
    hole names the repeated seq at the repeat's line."""
    b = _sample()
    lines = b.render().splitlines(keepends=True)
    clean = list(read_capture(_write(tmp_path / "clean.jsonl", lines)))
    for i in range(1, len(lines)):
        path = _write(tmp_path / f"dup{i}.jsonl", [*lines[: i + 1], lines[i], *lines[i + 1 :]])
        reader = read_capture(path)
        assert list(reader) == clean, i
        assert [(g.kind, g.file, g.line, g.first_seq, g.last_seq, g.count) for g in reader.gaps] == [
            ("duplicate_seq", str(path), i + 2, i, i, 1),
        ], i


def test_an_exact_repeat_is_told_from_a_conflicting_one_after_the_ring_wrapped() -> None:
    """SeqWatch keeps the last RECENT records: a repeat among them is recognised even laps later;
    an older seq, or the same seq with other content, is a conflict (not skipped)."""
    watch = SeqWatch()
    msgs = [ev.MessageSeen(t_ns=s, call="c", dir="s2c", index=s, size=1, request_id="", final=False)
            for s in range(3 * SeqWatch.RECENT + 7)]  # fmt: skip
    watch.record(0, ev.CaptureStarted(t_ns=0, proxy_version="x", listen="l", upstream="u", options={}), "f", 1)
    for s, m in enumerate(msgs[1:], 1):
        assert watch.record(s, m, "f", s + 1) is False
    last = len(msgs) - 1
    assert watch.record(last - 5, msgs[last - 5], "f", 0) is True  # exact, within the ring
    assert watch.record(last - SeqWatch.RECENT - 5, msgs[last - SeqWatch.RECENT - 5], "f", 0) is False  # fell out
    assert watch.record(last - 3, msgs[last - 2], "f", 0) is False  # same seq, other content
    assert [("repeated exactly" in g.detail) for g in watch.gaps] == [True, False, False]


def _write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(lines))
    return path


def test_a_capture_whose_start_record_is_not_seq_0_lost_the_records_before_it(tmp_path: Path) -> None:
    """The first file of a capture starting at seq 2: records 0 and 1 were lost, said at its first line."""
    records = _sample().records
    path = _write(tmp_path / "late.jsonl", [encode(r, seq) for seq, r in enumerate(records, 2)])
    reader = read_capture(path)
    assert len(list(reader)) == len(records)
    assert [g.to_json() for g in reader.gaps] == [
        {"kind": "seq_gap", "file": str(path), "line": 1, "first_seq": 0, "last_seq": 1, "count": 2,
         "detail": "2 record(s) missing before seq 2"},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("files", "named"),
    [
        (2, "2 capture file(s) left the directory (retention): old-0.jsonl, old-1.jsonl"),
        (5, "5 capture file(s) left the directory (retention): " + ", ".join(f"old-{i}.jsonl" for i in range(5))),
        (6, "6 capture file(s) left the directory (retention): " + ", ".join(f"old-{i}.jsonl" for i in range(5))
         + " ..."),
    ],
)  # fmt: skip
def test_files_removed_by_retention_are_a_hole_naming_the_first_five(tmp_path: Path, files: int, named: str) -> None:
    """The proxy deleted old files to stay within its budget: a `files_removed` hole at that record, naming
    how many files and the first five (history before it is cut, the records after it are all read)."""
    records = _sample().records
    removed = ev.FilesRemoved(t_ns=records[1].t_ns, reason="retention", files=[f"old-{i}.jsonl" for i in range(files)],
                              size=100, detail="over --max-total-mb")  # fmt: skip
    body = [*records[:2], removed, *records[2:]]
    path = _write(tmp_path / "kept.jsonl", [encode(r, seq) for seq, r in enumerate(body)])
    reader = read_capture(path)
    assert len(list(reader)) == len(body)
    assert [g.to_json() for g in reader.gaps] == [
        {"kind": "files_removed", "file": str(path), "line": 3, "first_seq": 2, "last_seq": 2, "count": None,
         "detail": named},
    ]  # fmt: skip


def _worker(offset_ns: int, call: str) -> Builder:
    b = Builder(t=Builder().t + offset_ns).start()
    b.call(call)
    for rid in ("a", "b"):
        b.request(call, rid)
        b.response(call, rid, None, final=True)
    b.half_close(call)
    b.end(call)
    return b.finish()


def test_the_chains_of_a_capture_set_are_one_capture_interleaved_by_time(tmp_path: Path) -> None:
    """`record --workers 2` wrote one chain per worker, each numbered from 0: a directory of them reads as
    one capture, every record of both, in time order (each chain's own order kept), without holes."""
    chains = {0: _worker(0, "c1.1"), 1: _worker(500_000, "c2.1")}
    for k, b in chains.items():
        (tmp_path / f"{STEM}.w{k}.jsonl").write_bytes(b.render())
    reader = read_capture(tmp_path)
    got = [(seq, r) for seq, r in reader]
    timeline = sorted(((r.t_ns, k, seq, r) for k, b in chains.items() for seq, r in enumerate(b.records)),
                      key=lambda t: (t[0], t[1]))  # fmt: skip
    assert got == [(seq, r) for _, _, seq, r in timeline]
    assert (reader.captures, reader.records, reader.gaps) == (1, len(got), [])


def test_a_workers_chain_starting_after_another_workers_call_is_the_same_capture(tmp_path: Path) -> None:
    """As `record --workers 2` writes them (each chain's capture_start naming the set): worker 1's chain
    starts 5 ms after worker 0's first call; its start is no new capture for the tools, so worker 0's
    call is neither ended there nor renamed (it was `incomplete`, its later records ignored as orphans
    of a call `2:c1.1`)."""
    import dataclasses

    chains = {0: _worker(0, "c1.1"), 1: _worker(5_000_000, "c2.1")}
    for k, b in chains.items():
        b.records[0] = dataclasses.replace(b.records[0], capture_set=STEM, worker=k, workers=2)
        (tmp_path / f"{STEM}.w{k}.jsonl").write_bytes(b.render())
    assert chains[1].records[0].t_ns > chains[0].records[1].t_ns  # worker 0's call started first
    result = track(tmp_path)
    assert (result.captures, result.warnings) == (1, ())
    assert [(r.call, r.outcome) for r in result.requests] == [("c1.1", "completed")] * 2 + [("c2.1", "completed")] * 2


@pytest.mark.parametrize(("given", "missing"), [((0, 1, 2), None), ((0,), "workers 1, 2' files were"),
                                               ((0, 2), "worker 1's files were"), ((2,), "workers 0, 1' files were")])
def test_a_worker_none_of_whose_files_was_given_is_a_hole(tmp_path: Path, given: tuple[int, ...],
                                                          missing: str | None) -> None:  # fmt: skip
    """Each worker's chain says which of how many workers wrote it: a set read without one worker's files
    misses every call the kernel gave that worker. It read as complete, 0 holes, whatever was left out."""
    import dataclasses

    written = 0
    for k in given:
        b = _worker(k * 1_000_000, f"c{k + 1}.1")
        b.records[0] = dataclasses.replace(b.records[0], capture_set=STEM, worker=k, workers=3)
        (tmp_path / f"{STEM}.w{k}.jsonl").write_bytes(b.render())
        written += len(b.records)
    reader = read_capture(tmp_path)
    assert len(list(reader)) == written
    if missing is None:
        assert reader.gaps == []
    else:
        (gap,) = reader.gaps
        assert (gap.kind, gap.detail) == ("missing_file", f"capture set {STEM} was written by 3 workers: {missing} not "
                                          "given, so the calls it relayed are not in this reading")  # fmt: skip


def test_counts_say_how_many_captures_and_records_were_read_on_every_pass(tmp_path: Path) -> None:
    """Two unrelated capture files: two captures; `records` counts what was yielded, afresh on each pass."""
    one, other = tmp_path / "one.jsonl", tmp_path / "other.jsonl"
    one.write_bytes(_sample().render())
    other.write_bytes(_worker(0, "c1.1").render())
    reader = read_capture([one, other])
    for _ in range(2):
        n = len(list(reader))
        assert (reader.captures, reader.records, n) == (2, len(_sample().records) + len(_worker(0, "c1.1").records), n)


def _lines(name: str = "one_response.jsonl") -> list[bytes]:
    return (DATA / name).read_bytes().splitlines(keepends=True)


def test_blank_lines_between_records_are_skipped(tmp_path: Path) -> None:
    """Empty and whitespace-only lines (a hand-edited capture) are no records and no damage."""
    lines = _lines()
    path = _write(tmp_path / "blank.jsonl", [lines[0], b"\n", b"  \n", *lines[1:3], b"\n", *lines[3:]])
    reader = read_capture(path)
    assert list(reader) == list(read_capture(DATA / "one_response.jsonl"))
    assert (reader.warnings, reader.gaps) == ([], [])


def test_a_record_missing_only_its_newline_at_the_end_is_read(tmp_path: Path) -> None:
    """The last line is complete JSON without its newline: a record like the others, no warning."""
    path = _write(tmp_path / "nonl.jsonl", [(DATA / "one_response.jsonl").read_bytes()[:-1]])
    reader = read_capture(path)
    assert list(reader) == list(read_capture(DATA / "one_response.jsonl"))
    assert (reader.warnings, reader.gaps) == ([], [])


def test_a_record_line_indented_by_hand_is_read(tmp_path: Path) -> None:
    """A record line starting with spaces is still one JSON object: read like the others."""
    lines = _lines()
    path = _write(tmp_path / "indented.jsonl", [lines[0], b"  " + lines[1], *lines[2:]])
    assert list(read_capture(path)) == list(read_capture(DATA / "one_response.jsonl"))


def test_a_junk_line_in_the_middle_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    """A line that is not JSON at all (not even starting with `{`) in the middle: file, line, and why."""
    lines = _lines()
    path = _write(tmp_path / "junk.jsonl", [lines[0], b"garbage\n", *lines[1:]])
    with pytest.raises(CaptureError) as info:
        list(read_capture(path))
    assert (info.value.path, info.value.line) == (str(path), 2)
    assert str(info.value).startswith(f"{path}:2: not valid JSON: ")


def test_what_an_unterminated_line_means_depends_on_where_it_is(tmp_path: Path) -> None:
    """A cut line at the very end: a warning saying why it is tolerated. The same in a file a later rotated
    file follows: an error. A file of nothing but an unterminated junk line: not a capture."""
    reader = read_capture(DATA / "truncated_last_line.jsonl")
    list(reader)
    cut = len(_lines("truncated_last_line.jsonl")[-1])
    assert reader.warnings == [
        f"{DATA / 'truncated_last_line.jsonl'}:8: last line cut short ({cut} bytes): skipped "
        "(the proxy stopped mid-write, or the file is still being written)"
    ]
    paths = _rotated(tmp_path, _sample(), [5])
    paths[0].write_bytes(paths[0].read_bytes()[:-10])
    with pytest.raises(CaptureError) as info:
        list(read_capture(tmp_path))
    assert str(info.value) == f"{paths[0]}:6: line cut short in the middle of a capture (a later file follows)"
    junk = _write(tmp_path / "junk.txt", [b"this is not a capture"])
    with pytest.raises(CaptureError) as info:
        list(read_capture(junk))
    assert str(info.value) == f"{junk}:1: not a capture: no record, only an unterminated line that is not JSON"


def _unknown(seq: int, kind: str = "from_the_future") -> bytes:
    return b'{"v":3,"seq":%d,"kind":"%s","x":1}\n' % (seq, kind.encode())


def test_each_unknown_record_kind_is_warned_about_once(tmp_path: Path) -> None:
    """One warning per unknown kind, at its first line, saying what is skipped and why; known records read."""
    records = _sample().records
    lines = [encode(records[0], 0), _unknown(1), encode(records[1], 2), _unknown(3, "later_still"), _unknown(4)]
    lines += [encode(r, seq) for seq, r in enumerate(records[2:], 5)]
    path = _write(tmp_path / "future.jsonl", lines)
    reader = read_capture(path)
    assert [r for _, r in reader] == records
    assert reader.warnings == [
        f"{path}:{line}: record kind {kind!r} is unknown to this triton-tap (written by a newer version?): "
        "such records are skipped"
        for line, kind in ((2, "from_the_future"), (4, "later_still"))
    ]
    assert (reader.gaps, reader.records) == ([], len(records))


def test_a_file_of_one_record_and_one_unknown_kind_is_a_capture(tmp_path: Path) -> None:
    """A capture_start then one record of a newer kind: a (short) capture, not "no capture records"."""
    start = _sample().records[0]
    for lines in ([encode(start, 0), _unknown(1)], [_unknown(0), encode(start, 1)]):
        path = _write(tmp_path / "short.jsonl", lines)
        reader = read_capture(path)
        assert [r for _, r in reader] == [start]
        assert len(reader.warnings) == 1


def test_records_lost_before_an_unknown_kind_are_a_hole_at_its_line(tmp_path: Path) -> None:
    """Seqs 2..3 missing, then a record of an unknown kind at seq 4: the seq_gap names that line."""
    records = _sample().records
    lines = [encode(records[0], 0), encode(records[1], 1), _unknown(4)]
    lines += [encode(r, seq) for seq, r in enumerate(records[2:], 5)]
    path = _write(tmp_path / "lost.jsonl", lines)
    reader = read_capture(path)
    list(reader)
    assert [g.to_json() for g in reader.gaps] == [
        {"kind": "seq_gap", "file": str(path), "line": 3, "first_seq": 2, "last_seq": 3, "count": 2,
         "detail": "2 record(s) missing before seq 4"},
    ]  # fmt: skip


def test_a_compressed_file_that_cannot_be_read_says_which_compression(tmp_path: Path) -> None:
    """A .gz that is not gzip, a .zst whose only frame is cut: one line naming the file and its compression."""
    plain = (DATA / "one_response.jsonl").read_bytes()
    notgz = _write(tmp_path / "capture.jsonl.gz", [plain])
    with pytest.raises(CaptureError) as info:
        list(read_capture(notgz))
    assert (info.value.line, str(info.value).startswith(f"{notgz}: not a readable gzip capture: ")) == (None, True)
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(plain)
    cut = _write(tmp_path / "capture.jsonl.zst", [frame[: len(frame) // 2]])
    with pytest.raises(CaptureError) as info:
        list(read_capture(cut))
    assert (info.value.line, str(info.value).startswith(f"{cut}: not a readable zstd capture: ")) == (None, True)


def test_a_gzip_broken_before_a_later_file_names_the_file_and_the_line_it_broke_at(tmp_path: Path) -> None:
    """A rotated .gz cut short with another file after it: the error names that file and the first line it
    could not give (the one after the last complete line)."""
    paths = _rotated(tmp_path, _sample(), [3, 6], gz=frozenset({1}))
    data = paths[1].read_bytes()
    paths[1].write_bytes(data[: len(data) - 20])
    complete = zlib.decompressobj(wbits=31).decompress(data[: len(data) - 20]).count(b"\n")
    with pytest.raises(CaptureError) as info:
        list(read_capture(tmp_path))
    assert (info.value.path, info.value.line) == (str(paths[1]), complete + 1)
    assert str(info.value).startswith(f"{paths[1]}:{complete + 1}: broken compressed file: ")


def test_a_file_without_records_says_so(tmp_path: Path) -> None:
    """A file of blank lines: one line naming it and that it holds no record (not an empty capture)."""
    path = _write(tmp_path / "blank.jsonl", [b"\n", b"\n"])
    with pytest.raises(CaptureError) as info:
        list(read_capture(path))
    assert str(info.value) == f"{path}: no capture records in this file (empty, or not a triton-tap capture)"


def test_a_path_that_cannot_be_opened_is_one_line_naming_it_and_why() -> None:
    """A Unix socket given as a capture (it exists, but cannot be opened as a file): the OS's reason."""
    with tempfile.TemporaryDirectory() as d, socket.socket(socket.AF_UNIX) as s:  # a short path: AF_UNIX limit
        path = Path(d) / "s.jsonl"
        s.bind(str(path))
        with pytest.raises(CaptureError) as info:
            list(read_capture(path))
    assert (info.value.path, info.value.line) == (str(path), None)
    assert str(info.value) == f"{path}: cannot read: No such device or address"


def test_a_reader_and_a_watch_report_nothing_before_they_read() -> None:
    """Before iterating: no warning, hole, record or capture; a SeqWatch fed nothing has not started and
    finds no hole at its end (``track`` ends one at every capture_start of in-memory records)."""
    reader = read_capture(DATA / "one_response.jsonl")
    assert (reader.warnings, reader.gaps, reader.records, reader.captures) == ([], [], 0, 0)
    watch = SeqWatch()
    watch.end()
    assert (watch.started, watch.gaps) == (False, [])


def test_a_directory_is_read_for_its_capture_files_only(tmp_path: Path) -> None:
    """Notes, other files and a sub-directory (even one named like a capture) beside a capture are left alone."""
    (tmp_path / "capture.jsonl").write_bytes((DATA / "one_response.jsonl").read_bytes())
    (tmp_path / "README.txt").write_text("notes")
    (tmp_path / "old.jsonl").mkdir()
    reader = read_capture(tmp_path)
    assert reader.files == [tmp_path / "capture.jsonl"]
    assert list(reader) == list(read_capture(DATA / "one_response.jsonl"))


def test_nothing_to_read_names_the_path_and_why(tmp_path: Path) -> None:
    """A path that does not exist, a directory without capture files: one line each, naming the path."""
    with pytest.raises(CaptureError) as info:
        read_capture(tmp_path / "nope.jsonl")
    assert str(info.value) == f"{tmp_path / 'nope.jsonl'}: no such file or directory"
    with pytest.raises(CaptureError) as info:
        read_capture(tmp_path)
    assert str(info.value) == f"{tmp_path}: no *.jsonl, *.jsonl.zst or *.jsonl.gz capture files in this directory"


def test_a_file_then_its_directory_reads_every_file_once(tmp_path: Path) -> None:
    """One rotated file named, then the directory holding it and the other one: both files, once each,
    whichever of them was named first."""
    paths = _rotated(tmp_path, _sample(), [5])
    for named in paths:
        reader = read_capture([named, tmp_path])
        assert reader.files == paths
        assert [seq for seq, _ in reader] == list(range(len(_sample().records) + 2))


def test_every_capture_in_a_directory_is_its_own_capture(tmp_path: Path) -> None:
    """Two captures by the proxy (different stems) and two named by hand: four captures, each read whole."""
    other = "capture-20260101T000500-4243"
    for name in (f"{STEM}.jsonl", f"{other}.jsonl", "mine.jsonl", "yours.jsonl"):
        (tmp_path / name).write_bytes(_sample().render())
    reader = read_capture(tmp_path)
    got = list(reader)
    assert (reader.captures, len(got), reader.gaps) == (4, 4 * len(_sample().records), [])
    assert [seq for seq, _ in got] == list(range(len(_sample().records))) * 4


def test_records_counts_what_was_yielded_also_when_the_reading_stops_early(tmp_path: Path) -> None:
    """`records` is added up per file (not per record, issue 15): a reader left after 3 records says 3."""
    path = tmp_path / "c.jsonl"
    path.write_bytes(_sample().render())
    reader = read_capture(path)
    it = iter(reader)
    got = [next(it) for _ in range(3)]
    del it  # the file's generator is closed: what it yielded is counted
    assert (len(got), reader.records) == (3, 3)
    assert sum(1 for _ in reader) == reader.records == len(_sample().records)


def test_each_loss_is_told_before_the_record_after_it_and_only_losses(tmp_path: Path) -> None:
    """`on_loss` hears of a hole where records were lost (a seq hole, a `gap` record, a damaged line, a
    rotated file missing between two) as it is found, before the next record is given: what a tracker
    needs to know what was open there. A repeated line, files removed before and a missing
    `capture_end` lose nothing where anything read was open: listed as holes, not told."""
    records = _sample().records[:-1]  # no capture_end
    removed = ev.FilesRemoved(t_ns=records[1].t_ns, reason="retention", files=["old-0.jsonl"], size=1, detail="")
    dropped = ev.GapRecorded(t_ns=records[1].t_ns, dropped=2, reason="queue_full", first_t_ns=0, last_t_ns=0)
    body = [*records[:2], removed, *records[2:5], dropped, *records[5:]]
    lines = [encode(r, seq) for seq, r in enumerate(body)]
    lines = [*lines[:4], lines[3], *lines[4:8], *lines[9:11], b"not json\n", *lines[11:]]
    path = _write(tmp_path / "holes.jsonl", lines)
    reader = read_capture(path, skip_damaged=True)
    heard: list[tuple[str, int | str]] = []
    reader.on_loss = lambda gap: heard.append(("loss", gap.kind))
    for seq, _ in reader:
        heard.append(("record", seq))
    assert heard == [
        *(("record", s) for s in range(6)), ("loss", "gap_record"), ("record", 6), ("record", 7),
        ("loss", "seq_gap"), ("record", 9), ("record", 10), ("loss", "damaged_line"),
        *(("record", s) for s in range(11, len(body))),
    ]  # fmt: skip
    assert [g.kind for g in reader.gaps] == [
        "files_removed", "duplicate_seq", "gap_record", "seq_gap", "damaged_line", "missing_capture_end",
    ]  # fmt: skip
    # A rotated file missing between two read: told at the later file's start, before its first record.
    rotated = tmp_path / "rotated"
    rotated.mkdir()
    _, middle, _ = _rotated(rotated, _sample(), [3, 6])
    middle.unlink()
    reader = read_capture(rotated)
    kinds: list[str] = []
    reader.on_loss = lambda gap: kinds.append(gap.kind)
    seen = [(seq, list(kinds)) for seq, _ in reader]
    assert kinds == ["missing_file", "seq_gap"]
    first_of_last = next(i for i, (_, told) in enumerate(seen) if told)
    assert seen[first_of_last - 1][1] == [] and seen[first_of_last][1] == ["missing_file", "seq_gap"]


def _capture_cut_then_another(directory: Path) -> None:
    """Two captures in ``directory``: the first cut with a request open on call ``c1.2``; then another
    whose first file is gone (rotated out) and whose call ``c1.2`` completes its request."""
    a = Builder().start()
    a.call("c1.2")
    a.request("c1.2", "x")
    (directory / f"{STEM}.jsonl").write_bytes(a.render())
    b = Builder().start()
    b.call("c1.2")
    b.request("c1.2", "x")
    b.response("c1.2", "x", None, final=True)
    b.half_close("c1.2")
    b.end("c1.2")
    later = [dataclasses.replace(b.finish().records[0], file_index=1), *b.records[1:]]
    (directory / "capture-20260102T000000-4243-0001.jsonl").write_bytes(
        b"".join(encode(r, 10 + i) for i, r in enumerate(later))
    )


def test_a_capture_whose_first_files_are_gone_is_a_capture_of_its_own_in_every_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The records alone cannot tell a later capture's `capture_start` of file 1 from a rotation: the
    reader, which knows which files go together, tells every tool where each capture begins (before,
    the two captures' `c1.2` read as one call: a group of two requests, a `missing_final`, 1 capture)."""
    _capture_cut_then_another(tmp_path)
    reader = read_capture(tmp_path)
    heard: list[str | int] = []
    reader.on_capture = lambda: heard.append("capture")
    heard.extend(seq for seq, _ in reader)
    assert heard == ["capture", 0, 1, 2, "capture", *range(10, 17)]  # before each capture's first record
    result = track(tmp_path)
    assert [(r.call, r.outcome, r.violations) for r in result.requests] == [
        ("c1.2", "incomplete", ()), ("2:c1.2", "completed", ()),
    ]  # fmt: skip
    assert (result.captures, result.warnings) == (2, ())
    assert stream_calls(tmp_path) == ["c1.2", "2:c1.2"]
    assert [(c.id, c.conn) for c in scripts(read_capture(tmp_path))] == [("c1.2", "c1"), ("2:c1.2", "2:c1")]
    assert [r.call for r in summarize(tmp_path).outcomes.requests] == ["c1.2", "2:c1.2"]
    model = build_report([str(tmp_path)], tmp_path / "r.html", err=io.StringIO())
    assert model["calls"]["id"] == ["c1.2", "2:c1.2"] and model["calls"]["conn"] == ["c1", "2:c1"]
    assert check_main(["check", "--json", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["call"], r["outcome"]) for r in out["requests"]] == [("c1.2", "incomplete"), ("2:c1.2", "completed")]
    assert out["summary"]["captures"] == 2
    # In memory, without a reader, the run's first capture_start still begins capture 1 (before: 0).
    assert track(list(read_capture(tmp_path))[:3]).captures == 1


def test_rotated_files_renamed_are_still_joined_by_their_records(tmp_path: Path) -> None:
    """Files whose names are not the writer's (renamed copies of one capture's rotated files) are not
    known to be captures of their own: a later one's `capture_start` of file 1 continues the one before,
    and calls that span them are whole (the reader still says their chain starts at a rotated file)."""
    renamed = []
    for i, path in enumerate(_rotated(tmp_path, _sample(), [4, 8])):
        renamed.append(path.rename(tmp_path / f"part-{'abc'[i]}.jsonl"))
    result = track(renamed)
    assert [(r.call, r.outcome) for r in result.requests] == [("c1.1", "completed")] * 3
    assert (result.captures, result.warnings) == (1, ())


def test_one_captures_files_in_two_directories_are_still_one_capture(tmp_path: Path) -> None:
    """The writer-named files of one capture split between an archive and the live directory: the
    reader does not tell a new capture at the second directory (one name, one capture), and the records
    join them as before: one capture, every request whole."""
    paths = _rotated(tmp_path, _sample(), [4, 8])
    (tmp_path / "archive").mkdir()
    (tmp_path / "live").mkdir()
    first = paths[0].rename(tmp_path / "archive" / paths[0].name)
    rest = [p.rename(tmp_path / "live" / p.name) for p in paths[1:]]
    for given in ([first, *rest], [tmp_path / "archive", tmp_path / "live"]):
        result = track(given)
        assert [(r.call, r.outcome) for r in result.requests] == [("c1.1", "completed")] * 3
        assert result.captures == 1


def test_sparse_fields_a_lost_line_stated_are_unknown_after_it_not_the_older_lines(tmp_path: Path) -> None:
    """A stream's second response changed its sticky fields (outputs [] -> ["TEXT"]) and its line is lost (a
    deleted line, or damage): the lines after the hole that leave those fields out read them as unknown (null)
    and a warning says so, never as the line before the hole said (an empty response: request b's two text
    responses read as empty, its model as the other request's). A line stating them all is whole again."""
    from tests.data.make_golden import Builder

    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "x", prompt="p", empty_final=True)
    b.response("c1.1", "x", None)  # an empty response: outputs []
    b.response("c1.1", "x", "x-0")  # outputs ["TEXT"]: the line the hole takes
    b.request("c1.1", "b", prompt="q", empty_final=True)
    b.response("c1.1", "b", "b-0")  # the same outputs: left out
    b.response("c1.1", "b", "b-1")
    b.response("c1.1", "b", None, final=True)  # outputs [] stated again, the model still left out
    b.response("c1.1", "x", "x-1")  # outputs stated again; the model still left out: unknown
    b.half_close("c1.1")
    b.end("c1.1")
    whole = b.finish().render()
    lines = whole.splitlines(keepends=True)
    lost = 4  # seq 4, line 4: x's text response (capture_start, call_start, x's request, its empty response)
    assert b'"seq":4,' in lines[lost] and b'"outputs":["TEXT"]' in lines[lost]
    (tmp_path / "whole.jsonl").write_bytes(whole)
    (tmp_path / "holed.jsonl").write_bytes(b"".join(lines[:lost] + lines[lost + 1 :]))
    kept = {seq: rec for seq, rec in read_capture(tmp_path / "whole.jsonl")}
    reader = read_capture(tmp_path / "holed.jsonl")
    got = {seq: rec for seq, rec in reader}
    after = [seq for seq in got if seq > lost and isinstance(got[seq], ev.MessageSeen) and got[seq].dir == "s2c"]
    assert after, got
    for seq in after:
        rec, truth = got[seq], kept[seq]
        assert isinstance(rec, ev.MessageSeen) and isinstance(truth, ev.MessageSeen)
        # What the line itself says is kept; what it left out is unknown, never the older line's.
        for name in ev.MessageSeen.sticky:
            value = getattr(rec, name)
            assert value is None or value == getattr(truth, name), (seq, name, value, getattr(truth, name))
    assert [g.kind for g in reader.gaps] == ["seq_gap"]
    (warning,) = [w for w in reader.warnings if "after a hole" in w]
    assert f"{len(after)} response message(s) after a hole leave out fields a lost line stated" in warning
    whole_reader = read_capture(tmp_path / "whole.jsonl")
    assert len(list(whole_reader)) == len(kept) and [w for w in whole_reader.warnings if "after a hole" in w] == []


def _holed(whole: bytes, lost: int, tmp_path: Path) -> tuple[dict[int, Any], dict[int, Any], Any]:
    """A capture whole and without the line of seq ``lost``: (whole records, records read, reader)."""
    lines = whole.splitlines(keepends=True)
    assert f'"seq":{lost},'.encode() in lines[lost]
    (tmp_path / "holed.jsonl").write_bytes(b"".join(lines[:lost] + lines[lost + 1 :]))
    (tmp_path / "whole.jsonl").write_bytes(whole)
    kept = dict(read_capture(tmp_path / "whole.jsonl"))
    reader = read_capture(tmp_path / "holed.jsonl")
    return kept, dict(reader), reader


def test_a_response_line_right_after_the_hole_is_checked_too(tmp_path: Path) -> None:
    """The line right after the hole is a response of the call whose line was lost (its index skips one):
    what it leaves out is unknown (and the model the next leaves out); the same line after a lost line of
    another call (its index follows on) keeps its call's state, every field as written, and no warning."""
    from tests.data.make_golden import Builder

    b = Builder().start()
    b.call("c1.1")
    b.call("c1.3")
    b.request("c1.1", "x", prompt="p", empty_final=True)
    b.request("c1.3", "y", prompt="q", empty_final=True)
    b.response("c1.1", "x", None)  # seq 5: outputs []
    b.response("c1.3", "y", "y-0")  # seq 6: the other call's
    b.response("c1.1", "x", "x-0")  # seq 7: outputs ["TEXT"]
    b.response("c1.1", "x", "x-1")  # seq 8: the same outputs, left out
    b.response("c1.1", "x", None, final=True)  # seq 9: outputs [] and model_version stated, the model left out
    whole = b.finish().render()
    kept, got, reader = _holed(whole, 7, tmp_path)
    assert (got[8].outputs, got[8].model, kept[8].outputs, kept[8].model) == (None, None, ["TEXT"], "tokens")
    assert (got[9].outputs, got[9].model) == ([], None)
    assert [w for w in reader.warnings if ": 2 response message(s) after a hole" in w], reader.warnings
    kept, got, reader = _holed(whole, 6, tmp_path)  # the other call's line lost: c1.1's indexes follow on
    assert {seq: repr(r) for seq, r in got.items()} == {seq: repr(r) for seq, r in kept.items() if seq != 6}
    assert [w for w in reader.warnings if "after a hole" in w] == []


def test_each_workers_file_counts_its_own_lines_read_unknown_after_a_hole(tmp_path: Path) -> None:
    """The chains of a capture set are read interleaved by time: a hole in worker 0's file is that file's
    warning, whichever file ends first (one count for the reader would have named the other file)."""
    from tests.data.make_golden import Builder

    chains = {}
    for k, (offset, call) in enumerate(((0, "c1.1"), (500_000, "c2.1"))):
        b = Builder(t=Builder().t + offset).start()
        b.records[0] = dataclasses.replace(b.records[0], capture_set=STEM, worker=k, workers=2)
        b.call(call)
        b.request(call, "x", prompt="p", empty_final=True)
        b.response(call, "x", None)
        b.response(call, "x", "x-0")  # worker 0's: the line lost
        b.response(call, "x", "x-1")
        b.response(call, "x", None, final=True)
        if k == 0:  # worker 0's file ends last: its count must not be read when worker 1's ends
            b.request(call, "y", prompt="q", empty_final=True)
            for _ in range(6):
                b.response(call, "y", "y-0", final=False)
        chains[k] = b.finish().render().splitlines(keepends=True)
    lost = 4
    assert b'"outputs":["TEXT"]' in chains[0][lost]
    (tmp_path / f"{STEM}.w0.jsonl").write_bytes(b"".join(chains[0][:lost] + chains[0][lost + 1 :]))
    (tmp_path / f"{STEM}.w1.jsonl").write_bytes(b"".join(chains[1]))
    reader = read_capture(tmp_path)
    got = list(reader)
    warned = [w for w in reader.warnings if "after a hole" in w]
    # y's outputs were stated after the hole (["TEXT"], then left out as repeats): known; only the model is not
    ys = [r for _, r in got if isinstance(r, ev.MessageSeen) and r.dir == "s2c" and r.request_id == "y"]
    assert [(r.outputs, r.model) for r in ys] == [(["TEXT"], None)] * 6
    # 8: x's two after the hole, and y's six (they leave out the model, which no line since the hole stated)
    assert len(warned) == 1 and warned[0].startswith(str(tmp_path / f"{STEM}.w0.jsonl") + ": 8 response"), warned

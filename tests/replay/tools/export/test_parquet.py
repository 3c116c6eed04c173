"""`export --parquet`: one table per kind, partitioned by capture, row groups, holes kept, OUT never damaged."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from replay.capture import events as ev
from replay.capture.reader import read_capture
from replay.capture.schema import Encoder
from replay.errors import CaptureError, UserError
from replay.tools.export.parquet import HOLE, export_parquet, partition
from tests.support.paths import DATA


def _rows(out: Path, kind: str, capture: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for part in sorted((out / kind / partition(capture)).glob("part-*.parquet")):
        rows += pq.read_table(part).to_pylist()
    return rows


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_every_record_is_a_row_of_its_kinds_table_with_its_fields(tmp_path: Path) -> None:
    """Row for row what the reader yields (seq and every field; nulls stay null), one table per kind."""
    (done,) = export_parquet([DATA / "stream_cancel.jsonl"], tmp_path / "out")
    assert done.capture == "stream_cancel"
    records = list(read_capture(DATA / "stream_cancel.jsonl"))
    assert sum(done.records.values()) == len(records)
    for kind in {r.kind for _, r in records}:
        rows = _rows(tmp_path / "out", kind, "stream_cancel")
        expected = [(seq, r) for seq, r in records if r.kind == kind]
        assert [row["seq"] for row in rows] == [seq for seq, _ in expected]
        assert {row["kind"] for row in rows} == {kind}
        for row, (_, r) in zip(rows, expected, strict=True):
            for name in ("t_ns", "call", "dir", "final", "request_id", "cause", "status", "model", "error"):
                if hasattr(r, name):
                    assert row[name] == getattr(r, name), (kind, name)
    c2s = [row for row in _rows(tmp_path / "out", "message", "stream_cancel") if row["dir"] == "c2s"]
    assert c2s and all(row["final"] is None for row in c2s)  # null on requests: no default invented


def test_every_kind_has_its_table_even_without_rows(tmp_path: Path) -> None:
    """A query or a Spark read of any kind finds the table (and its typed columns)."""
    export_parquet([DATA / "one_response.jsonl"], tmp_path / "out")
    tables = {p.name for p in (tmp_path / "out").iterdir()}
    assert tables == {cls.kind for cls in ev.RECORD_TYPES} | {HOLE}
    empty = tmp_path / "out" / "late" / "capture=one_response" / "part-0.parquet"
    assert pq.read_metadata(empty).num_rows == 0
    assert pq.read_schema(empty).field("since_cancel_ms").type == "double"


def test_rows_are_written_in_row_groups_of_the_given_size(tmp_path: Path) -> None:
    """The bound on memory: a table holds at most `rows` records before writing them as a row group."""
    (done,) = export_parquet([DATA / "many_responses.jsonl"], tmp_path / "out", rows=3)
    n = done.records["message"]
    meta = pq.read_metadata(tmp_path / "out" / "message" / "capture=many_responses" / "part-0.parquet")
    assert n == 7 and meta.num_rows == n and meta.num_row_groups == 3  # 3 + 3 + 1


def test_a_worker_set_is_one_capture_with_a_part_per_worker(tmp_path: Path) -> None:
    """`.w<k>` chains of one set: one partition (the set's name), part-0 and part-1, every record kept."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(DATA / "stream_cancel.jsonl", src / "capture-20260528T000000-9.w0.jsonl")
    shutil.copy(DATA / "one_response.jsonl", src / "capture-20260528T000000-9.w1.jsonl")
    (done,) = export_parquet([src], tmp_path / "out")
    assert done.capture == "capture-20260528T000000-9"
    parts = sorted(p.name for p in (tmp_path / "out" / "message" / "capture=capture-20260528T000000-9").iterdir())
    assert parts == ["part-0.parquet", "part-1.parquet"]
    expected = sum(1 for _ in read_capture(DATA / "stream_cancel.jsonl")) + sum(1 for _ in read_capture(DATA / "one_response.jsonl"))
    assert sum(done.records.values()) == expected


def test_holes_and_warnings_are_kept_in_the_hole_table(tmp_path: Path) -> None:
    """A dropped-records gap, a seq hole, a cut last line and a missing capture_end are rows, not lost."""
    done = export_parquet([DATA / "gaps.jsonl", DATA / "truncated_last_line.jsonl"], tmp_path / "out")
    assert [len(d.holes) + len(d.warnings) for d in done] == [2, 2]
    gaps = _rows(tmp_path / "out", HOLE, "gaps")
    assert sorted(r["hole"] for r in gaps) == ["gap_record", "seq_gap"]
    seq_gap = next(r for r in gaps if r["hole"] == "seq_gap")
    assert (seq_gap["first_seq"], seq_gap["last_seq"], seq_gap["count"], seq_gap["file"]) == (6, 7, 2, "gaps.jsonl")
    cut = _rows(tmp_path / "out", HOLE, "truncated_last_line")
    assert sorted(r["hole"] for r in cut) == ["missing_capture_end", "warning"]
    warning = next(r for r in cut if r["hole"] == "warning")
    assert warning["line"] == 8 and warning["detail"].startswith("last line cut short")
    assert warning["file"] == "truncated_last_line.jsonl" and warning["kind"] == HOLE


def test_a_non_empty_out_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """Never write into (or delete) what is there without --overwrite."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(UserError, match="not empty"):
        export_parquet([DATA / "stream_cancel.jsonl"], out)
    assert _tree(out) == {"mine.txt": b"keep me"}


def test_overwrite_replaces_the_exported_captures_partitions_and_keeps_the_rest(tmp_path: Path) -> None:
    """--overwrite: the capture exported again is replaced (not doubled); another capture and user files stay."""
    out = tmp_path / "out"
    export_parquet([DATA / "stream_cancel.jsonl", DATA / "one_response.jsonl"], out)
    (out / "mine.txt").write_text("keep me")
    before = _tree(out)
    export_parquet([DATA / "stream_cancel.jsonl"], out, overwrite=True)
    after = _tree(out)
    assert after.keys() == before.keys() and after["mine.txt"] == b"keep me"
    assert all(after[k] == v for k, v in before.items() if "capture=one_response" in k)
    assert len(_rows(out, "message", "stream_cancel")) == sum(
        1 for _, r in read_capture(DATA / "stream_cancel.jsonl") if r.kind == "message")  # fmt: skip
    assert not [p for p in out.iterdir() if p.name.startswith(".export-")]


def test_an_unreadable_capture_leaves_out_as_it_was(tmp_path: Path) -> None:
    """A capture damaged in the middle (read after a good one): CaptureError, nothing added, nothing left over."""
    out = tmp_path / "out"
    export_parquet([DATA / "one_response.jsonl"], out)
    before = _tree(out)
    with pytest.raises(CaptureError, match=r"garbled_middle\.jsonl"):
        export_parquet([DATA / "stream_cancel.jsonl", DATA / "garbled_middle.jsonl"], out, overwrite=True)
    assert _tree(out) == before
    assert not [p for p in out.iterdir() if p.name.startswith(".export-")]


def test_bad_paths_and_clashing_names_are_refused_before_writing(tmp_path: Path) -> None:
    """A missing capture, OUT that is a file, two captures of one name: one error each, nothing written."""
    with pytest.raises(CaptureError, match="no such file"):
        export_parquet([tmp_path / "nope.jsonl"], tmp_path / "out")
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match="not a directory"):
        export_parquet([DATA / "stream_cancel.jsonl"], tmp_path / "file")
    (tmp_path / "a").mkdir()
    shutil.copy(DATA / "stream_cancel.jsonl", tmp_path / "a" / "stream_cancel.jsonl")
    with pytest.raises(UserError, match="both named 'stream_cancel'"):
        export_parquet([DATA / "stream_cancel.jsonl", tmp_path / "a" / "stream_cancel.jsonl"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_request_parameters_keep_the_type_the_client_sent(tmp_path: Path) -> None:
    """`sequence_id` 7, `sequence_start` true, `sequence_end` "1": JSON text, so each reads back as sent."""
    enc = Encoder()
    recs: list[ev.Record] = [
        ev.CaptureStarted(t_ns=1, proxy_version="0", listen="a:1", upstream="b:2", options={"payload": "meta"}),
        ev.MessageSeen(t_ns=2, call="c1.1", dir="c2s", index=0, size=10, model="m", request_id="",
                       sequence_id=7, sequence_start=True, sequence_end="1"),
        ev.CaptureEnded(t_ns=3, reason="shutdown", counts={"message": 1}),
    ]  # fmt: skip
    path = tmp_path / "params.jsonl"
    path.write_bytes(b"".join(enc.encode(r, i) for i, r in enumerate(recs)))
    export_parquet([path], tmp_path / "out")
    (row,) = _rows(tmp_path / "out", "message", "params")
    assert (row["sequence_id"], row["sequence_start"], row["sequence_end"]) == ("7", "true", '"1"')
    assert row["enable_empty_final"] is None and row["inputs"] is None
    (end,) = _rows(tmp_path / "out", "capture_end", "params")
    assert end["counts"] == [("message", 1)] and end["next_file"] is None
    (start,) = _rows(tmp_path / "out", "capture_start", "params")
    assert start["options"] == '{"payload":"meta"}' and start["worker"] is None


@pytest.mark.parametrize(("given", "holes"), [((0, 1, 2), 0), ((0, 2), 1)])
def test_a_worker_sets_holes_are_those_check_reports(tmp_path: Path, given: tuple[int, ...], holes: int) -> None:
    """`record --workers 3`: each worker's chain is exported on its own (its own part file), and each, read
    alone, took the set for one missing its other workers: a complete set had a `missing_file` hole per chain,
    where check reports none. The holes are check's: none for the whole set, one for a worker not given."""
    import dataclasses

    from tests.data.make_golden import Builder

    stem = "capture-20260101T000000-4242"
    src = tmp_path / "src"
    src.mkdir()
    for k in given:
        b = Builder(t=Builder().t + k * 1_000_000).start()
        b.call(f"c{k + 1}.1")
        b.request(f"c{k + 1}.1", "a")
        b.response(f"c{k + 1}.1", "a", None, final=True)
        b.half_close(f"c{k + 1}.1")
        b.end(f"c{k + 1}.1")
        b.finish()
        b.records[0] = dataclasses.replace(b.records[0], capture_set=stem, worker=k, workers=3)
        (src / f"{stem}.w{k}.jsonl").write_bytes(b.render())
    reader = read_capture(src)
    list(reader)
    (done,) = export_parquet([src], tmp_path / "out")
    assert [(g.kind, g.detail) for g in done.holes] == [(g.kind, g.detail) for g in reader.gaps]
    assert len(done.holes) == holes and len(_rows(tmp_path / "out", HOLE, stem)) == holes

"""docs/sql.md's recipes run with DuckDB on plain, zstd and rotated captures and give the known answers,
and the same answers over the Parquet export (`triton-tap export --parquet`) of the same captures; its
PySpark recipe runs in a local Spark (pyspark, a JRE) over that export and gives DuckDB's answers."""

from __future__ import annotations

import asyncio
import gzip
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import duckdb
import pytest
import zstandard

from bench.captures import steady_records as records
from proxy.capture.writer import CaptureWriter, WriterOptions
from replay.capture import events as ev
from replay.capture import naming
from replay.tools.export.parquet import export_parquet
from tests.support.paths import ROOT

DATA = ROOT / "tests" / "data"
DOC = (ROOT / "docs" / "sql.md").read_text()
JSONL_PART, PARQUET_PART = DOC.split("\n## Parquet\n")
BLOCKS = re.findall(r"```sql\n(.*?)```", JSONL_PART, re.S)
(PARQUET_MACRO,) = re.findall(r"```sql\n(.*?)```", PARQUET_PART, re.S)
(SPARK,) = re.findall(r"```python\n(.*?)```", PARQUET_PART, re.S)


def _run(files: str, macro: str | None = None) -> list[list[tuple[Any, ...]]]:
    """Every recipe over ``files`` with the JSONL macro (or ``macro``)."""
    jsonl_macro, *recipes = BLOCKS
    con = duckdb.connect()
    con.execute(macro or jsonl_macro)
    return [con.execute(sql.replace("captures/*.jsonl*", files)).fetchall() for sql in recipes]


def _zst(src: Path, dst: Path) -> None:
    lines = src.read_bytes().splitlines(keepends=True)
    cctx = zstandard.ZstdCompressor(level=3)
    dst.write_bytes(b"".join(cctx.compress(b"".join(lines[i : i + 2])) for i in range(0, len(lines), 2)))


def test_the_docs_hold_the_macro_and_four_recipes() -> None:
    """One macro, four recipes, the Parquet macro and the Spark read: nothing in docs/sql.md goes untested."""
    assert len(BLOCKS) == 5 and "CREATE MACRO capture" in BLOCKS[0]
    assert "CREATE MACRO capture" in PARQUET_MACRO and "spark.read" in SPARK


@pytest.mark.parametrize("compressed", [False, True])
def test_recipes_on_the_stream_cancel_golden(tmp_path: Path, compressed: bool) -> None:
    """Plain and zstd: 3 requests, `a`/`b` without a final, one client_cancel, gaps between responses."""
    name = "capture-20260528T000000-1.jsonl"
    if compressed:
        _zst(DATA / "stream_cancel.jsonl", tmp_path / f"{name}.zst")
    else:
        shutil.copy(DATA / "stream_cancel.jsonl", tmp_path / name)
    by_model, cancels, unfinished, gaps = _run(f"{tmp_path}/*.jsonl*")
    ((model, requests, per_request, p50, p99),) = by_model
    # `b` got no response: a request still (it was left out), counted as 0 responses, with no first response
    assert (model, requests) == ("tokens", 3) and per_request == 4 / 3 and 0 < p50 <= p99
    assert cancels == [("client_cancel", 1)]
    assert [(call, rid) for _, call, rid in unfinished] == [("c1.1", "a"), ("c1.1", "b")]
    assert gaps[0][2] == 2 and gaps[0][0] > 0


def _rotated(directory: Path, n: int = 3000) -> list[ev.Record]:
    """A capture of about ``n`` synthetic records written by the writer itself as rotated .jsonl.zst files."""
    recs = list(records(n))
    start, body = recs[0], recs[1:-1]
    assert isinstance(start, ev.CaptureStarted)

    async def go() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=directory, compress="zstd", rotate_bytes=2_000), start)
        w.open()
        for i in range(0, len(body), 300):
            for r in body[i : i + 300]:
                w.emit(r)
            while w.backlog:  # a batch per chunk: rotation is checked after each written batch
                await asyncio.sleep(0.005)
        await w.close()
        return w

    w = asyncio.run(go())
    assert len(w.paths) > 3
    return body


def test_recipes_on_a_directory_of_rotated_zstd_files(tmp_path: Path) -> None:
    """The writer's own rotated .jsonl.zst files: every request of the synthetic stream has its 21 responses."""
    body = _rotated(tmp_path)
    by_model, cancels, unfinished, gaps = _run(f"{tmp_path}/*.jsonl.zst")
    # the synthetic stream reuses request id "" per call: one (call, "") group per stream
    ((model, requests, per_request, _, _),) = by_model
    assert model == "tokens" and requests == 4 and per_request == sum(
        1 for r in body if isinstance(r, ev.MessageSeen) and r.dir == "s2c") / 4  # fmt: skip
    assert cancels == [] and unfinished == []
    assert gaps[0][2] > 0


# -- the same recipes over the Parquet export ------------------------------------------------------


def _parquet(out: Path) -> list[list[tuple[Any, ...]]]:
    return _run(f"{out}/*/*/*.parquet", PARQUET_MACRO)


def test_parquet_gives_the_jsonl_answers_on_the_stream_cancel_golden(tmp_path: Path) -> None:
    """Plain and zstd copies of one golden, and a second capture: every recipe, the same rows, capture ids included."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(DATA / "stream_cancel.jsonl", src / "capture-20260528T000000-1.jsonl")
    _zst(DATA / "interleaved.jsonl", src / "capture-20260528T000001-2.jsonl.zst")
    export_parquet([src], tmp_path / "out")
    jsonl, parquet = _run(f"{src}/*.jsonl*"), _parquet(tmp_path / "out")
    assert parquet == jsonl
    by_model, cancels, unfinished, _ = parquet
    assert by_model[0][:2] == ("tokens", 5) and cancels == [("client_cancel", 1)]  # 3 requests and 2
    assert {capture for capture, _, _ in unfinished} == {"capture-20260528T000000-1"}


def test_parquet_gives_the_jsonl_answers_on_rotated_zstd_files(tmp_path: Path) -> None:
    """The writer's rotated .jsonl.zst files are one capture, one partition; the recipes agree."""
    src = tmp_path / "src"
    src.mkdir()
    _rotated(src)
    (done,) = export_parquet([src], tmp_path / "out")
    assert [p.name for p in (tmp_path / "out" / "message").iterdir()] == [f"capture={done.capture}"]
    jsonl, parquet = _run(f"{src}/*.jsonl.zst"), _parquet(tmp_path / "out")
    assert parquet == jsonl and parquet[0][0][1] == 4


def test_two_captures_are_two_partitions(tmp_path: Path) -> None:
    """Call ids repeat across captures (`c1.1` in both): the partition keeps them apart, as capture_id does."""
    export_parquet([DATA / "stream_cancel.jsonl", DATA / "one_response.jsonl"], tmp_path / "out")
    con = duckdb.connect()
    con.execute(PARQUET_MACRO)
    got = con.execute("SELECT capture_id, count(DISTINCT call) FROM capture(?) WHERE kind = 'call_start' "
                      "GROUP BY ALL ORDER BY ALL", [f"{tmp_path}/out/*/*/*.parquet"]).fetchall()  # fmt: skip
    assert got == [("one_response", 1), ("stream_cancel", 1)]
    assert sorted(p.name for p in (tmp_path / "out" / "call_start").iterdir()) == [
        "capture=one_response", "capture=stream_cancel"]  # fmt: skip


# -- the PySpark recipe, in Spark ------------------------------------------------------------------

#: Golden captures whose export the Spark recipe reads: streams, unary calls, every cancel cause Spark groups.
SPARK_GOLDENS = ("stream_cancel", "interleaved", "unary", "deadline", "client_disconnect", "upstream_disconnect",
                 "restart_after_cancel", "many_responses")  # fmt: skip


#: The Spark half, run in a fresh interpreter: PySpark starts its JVM with ``Popen(preexec_fn=...)``, a real
#: fork, and in this process earlier tests leave grpc's pollers running, with which that fork once lost the
#: JVM before it reported its port (JAVA_GATEWAY_EXITED on CI). One local Spark on one core, on loopback,
#: without its web UI; the doc's own builder gets this session back from ``getOrCreate()``. It prints the doc
#: block's output flag and the two queries' rows as JSON.
_SPARK_CHILD = """
import contextlib, io, json, sys
from pyspark.sql import SparkSession
code, first_sql, cancels_sql, captures_sql = json.loads(sys.stdin.read())
session = (SparkSession.builder.master("local[1]").appName("triton-tap-tests")
           .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
           .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
           .getOrCreate())
try:
    ns = {}
    with contextlib.redirect_stdout(io.StringIO()) as shown:
        exec(compile(code, "docs/sql.md (PySpark)", "exec"), ns)
    rows = lambda sql: [list(r) for r in session.sql(ns.get(sql, sql)).collect()]
    print(json.dumps({"same_session": ns["spark"] is session, "shown": shown.getvalue(),
                      "first": rows(first_sql), "cancels": rows(cancels_sql), "captures": rows(captures_sql)}))
finally:
    session.stop()
"""


def _same_rows(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> bool:
    """Row by row, texts and counts equal, floats to 1e-9 (Spark and DuckDB sum in their own order)."""
    return len(got) == len(want) and all(
        len(g) == len(w) and all(x == pytest.approx(y, rel=1e-9) if isinstance(y, float) else x == y
                                 for x, y in zip(g, w, strict=True))
        for g, w in zip(got, want, strict=True))  # fmt: skip


def test_the_spark_recipe_runs_in_spark_and_gives_duckdbs_answers(tmp_path: Path) -> None:
    """docs/sql.md's PySpark block, run as written in a local Spark over `export --parquet` of golden captures
    (its `out` pointed at the export): its views and SQL give the rows DuckDB's recipes give over the JSONL."""
    import json
    import sys

    src = tmp_path / "src"
    src.mkdir()
    for name in SPARK_GOLDENS:
        shutil.copy(DATA / f"{name}.jsonl", src / f"{name}.jsonl")
    # A capture name beyond ASCII and with characters the partition escapes: Spark and DuckDB read it alike
    # (its UTF-8 bytes as %XX read as 'cafÃ©' in Spark).
    shutil.copy(DATA / "one_response.jsonl", src / "café #1.jsonl")
    export_parquet([src], tmp_path / "out")
    code, n = re.subn(r'^out = "[^"]*"', f"out = {str(tmp_path / 'out')!r}", SPARK, flags=re.M)
    assert n == 1, "the Spark block names its export as `out = \"...\"`"
    (cancels_sql,) = re.findall(r'spark\.sql\("(SELECT cause.*?)"\)', SPARK)
    captures_sql = "SELECT DISTINCT capture FROM message ORDER BY capture"
    proc = subprocess.run([sys.executable, "-c", _SPARK_CHILD],
                          input=json.dumps([code, "FIRST_RESPONSE", cancels_sql, captures_sql]),
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["same_session"] and "tokens" in got["shown"]
    by_model, cancels, _, _ = _run(f"{src}/*.jsonl")
    got_by_model = [tuple(r) for r in got["first"]]
    assert _same_rows(got_by_model, by_model), (got_by_model, by_model)
    assert [tuple(r) for r in got["cancels"]] == cancels
    in_duckdb = duckdb.sql(f"SELECT DISTINCT capture FROM read_parquet('{tmp_path}/out/message/*/*.parquet', "
                           "hive_partitioning = true) ORDER BY capture").fetchall()  # fmt: skip
    assert [tuple(r) for r in got["captures"]] == in_duckdb and ("café #1",) in in_duckdb, (got["captures"], in_duckdb)
    assert {m for m, *_ in by_model} >= {"echo", "tokens"} and {c for c, _ in cancels} >= {
        "client_cancel", "deadline", "client_disconnect", "upstream_disconnect"}  # fmt: skip


def test_capture_id_in_sql_is_the_export_partition_name(tmp_path: Path) -> None:
    """The JSONL macro's capture_id and naming.capture_name (the partition) are one rule."""
    names = ["capture-20260528T000000-1.jsonl", "capture-20260528T000000-1-0001.jsonl.zst",
             "capture-20260528T000009-7.w1-0002.jsonl.gz", "capture-20260528T000009-7.w0.jsonl",
             "mine.jsonl", "other.capture.jsonl.zst", "x-capture-20260528T000000-1.jsonl"]  # fmt: skip
    line = (DATA / "one_response.jsonl").read_bytes().splitlines(keepends=True)[0]
    for name in names:
        data = zstandard.ZstdCompressor().compress(line) if name.endswith(".zst") else line
        (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    con = duckdb.connect()
    con.execute(BLOCKS[0])
    got = dict(con.execute("SELECT filename, capture_id FROM capture(?)", [f"{tmp_path}/*.jsonl*"]).fetchall())
    assert {Path(f).name: c for f, c in got.items()} == {n: naming.capture_name(n) for n in names}


def test_requests_without_a_final_are_stream_requests_only(tmp_path: Path) -> None:
    """A healthy unary call (ModelInfer answered OK: no final flag, none due) is not a request without a
    final response, nor a unary call refused by its status; the stream requests that got none still are,
    in JSONL and over the Parquet export alike."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(DATA / "unary.jsonl", src / "unary.jsonl")
    shutil.copy(DATA / "stream_cancel.jsonl", src / "stream_cancel.jsonl")
    _, _, unfinished, _ = _run(f"{src}/*.jsonl")
    assert unfinished == [("stream_cancel", "c1.1", "a"), ("stream_cancel", "c1.1", "b")]
    export_parquet([src], tmp_path / "out")
    assert _parquet(tmp_path / "out")[2] == unfinished


def test_readiness_calls_are_not_counted_as_a_models_requests(tmp_path: Path) -> None:
    """A ModelReady request names its model (so serve and diff can tell models apart) but is no inference
    request: the first recipe counts the stream's 3 requests of `tokens`, not a 4th with 0 responses."""
    from tritonclient.grpc import service_pb2 as pb

    from tests.data.make_golden import Builder

    b = Builder().start()
    b.call("c1.1", method="/inference.GRPCInferenceService/ModelReady")
    b.ask("c1.1", pb.ModelReadyRequest(name="tokens"), pb.ModelReadyResponse(ready=True))
    b.end("c1.1")
    base = (DATA / "stream_cancel.jsonl").read_bytes()
    (tmp_path / "capture-20260528T000000-1.jsonl").write_bytes(base)
    (tmp_path / "capture-20260528T000000-2.jsonl").write_bytes(b.finish().render())
    assert [r.model for r in b.records if getattr(r, "dir", None) == "c2s"] == ["tokens"]
    by_model, _, _, _ = _run(f"{tmp_path}/*.jsonl*")
    ((model, requests, per_request, _, _),) = by_model
    assert (model, requests, per_request) == ("tokens", 3, 4 / 3)


def test_a_response_the_calls_end_cut_is_no_response_of_its_request(tmp_path: Path) -> None:
    """What arrived of a response when the client's cancel cut it carries no request id (null: no client had it
    whole, so nothing was read from it): the id joins leave it out, so the request still has one response and
    no gap, in JSONL and over the Parquet export alike."""
    from tests.data.make_golden import Builder, cancelled_mid_response

    b = Builder(payload="full")
    b.records = cancelled_mid_response()
    src = tmp_path / "src"
    src.mkdir()
    (src / "capture-20260528T000000-1.jsonl").write_bytes(b.render())
    assert [ev.message_cut(r.decode_error) for r in b.records if isinstance(r, ev.MessageSeen)] == [False, False, True]
    by_model, cancels, unfinished, gaps = _run(f"{src}/*.jsonl")
    ((model, requests, per_request, _, _),) = by_model
    assert (model, requests, per_request) == ("tokens", 1, 1.0) and cancels == [("client_cancel", 1)]
    assert [(call, rid) for _, call, rid in unfinished] == [("c1.1", "r1")] and gaps[0][2] == 0
    export_parquet([src], tmp_path / "out")
    assert _parquet(tmp_path / "out") == [by_model, cancels, unfinished, gaps]


def test_a_cut_last_line_fails_the_macro_and_is_a_warning_row_of_the_export(tmp_path: Path) -> None:
    """What docs/sql.md says of a capture whose last line was cut: DuckDB's read_json fails the query, the
    Parquet export reads the rest and keeps the cut as a `warning` row of its hole table."""
    cut = tmp_path / "cut.jsonl"
    data = (DATA / "stream_cancel.jsonl").read_bytes()
    cut.write_bytes(data[: len(data) - 20])
    con = duckdb.connect()
    con.execute(BLOCKS[0])
    with pytest.raises(duckdb.Error, match="Malformed JSON"):
        con.execute("SELECT count(*) FROM capture(?)", [str(cut)]).fetchall()
    (done,) = export_parquet([cut], tmp_path / "out")
    assert done.warnings and "last line cut short" in done.warnings[0]
    holes = duckdb.sql(f"SELECT hole, detail FROM read_parquet('{tmp_path}/out/hole/*/*.parquet')").fetchall()
    assert [d for h, d in holes if h == "warning"] == [done.warnings[0].split(": ", 1)[1]], holes

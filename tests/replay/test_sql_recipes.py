"""docs/sql.md's recipes run with DuckDB on plain, zstd and rotated captures and give the known answers."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest
import zstandard

from bench.gencapture import records
from proxy.capture.writer import CaptureWriter, WriterOptions
from replay.capture import events as ev
from tests.support.paths import ROOT

DATA = ROOT / "tests" / "data"
BLOCKS = re.findall(r"```sql\n(.*?)```", (ROOT / "docs" / "sql.md").read_text(), re.S)


def _run(files: str) -> list[list[tuple[Any, ...]]]:
    macro, *recipes = BLOCKS
    con = duckdb.connect()
    con.execute(macro)
    return [con.execute(sql.replace("captures/*.jsonl*", files)).fetchall() for sql in recipes]


def _zst(src: Path, dst: Path) -> None:
    lines = src.read_bytes().splitlines(keepends=True)
    cctx = zstandard.ZstdCompressor(level=3)
    dst.write_bytes(b"".join(cctx.compress(b"".join(lines[i : i + 2])) for i in range(0, len(lines), 2)))


def test_the_docs_hold_the_macro_and_four_recipes() -> None:
    """One macro, four recipes: nothing in docs/sql.md goes untested."""
    assert len(BLOCKS) == 5 and "CREATE MACRO capture" in BLOCKS[0]


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
    assert (model, requests) == ("tokens", 2) and per_request == 2.0 and 0 < p50 <= p99  # `b` got no response
    assert cancels == [("client_cancel", 1)]
    assert [(call, rid) for _, call, rid in unfinished] == [("c1.1", "a"), ("c1.1", "b")]
    assert gaps[0][2] == 2 and gaps[0][0] > 0


def test_recipes_on_a_directory_of_rotated_zstd_files(tmp_path: Path) -> None:
    """The writer's own rotated .jsonl.zst files: every request of the synthetic stream has its 21 responses."""
    recs = list(records(3000))
    start, body = recs[0], recs[1:-1]
    assert isinstance(start, ev.CaptureStarted)

    async def go() -> CaptureWriter:
        w = CaptureWriter(WriterOptions(directory=tmp_path, compress="zstd", rotate_bytes=2_000), start)
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
    by_model, cancels, unfinished, gaps = _run(f"{tmp_path}/*.jsonl.zst")
    # the synthetic stream reuses request id "" per call: one (call, "") group per stream
    ((model, requests, per_request, _, _),) = by_model
    assert model == "tokens" and requests == 4 and per_request == sum(
        1 for r in body if isinstance(r, ev.MessageSeen) and r.dir == "s2c") / 4  # fmt: skip
    assert cancels == [] and unfinished == []
    assert gaps[0][2] > 0

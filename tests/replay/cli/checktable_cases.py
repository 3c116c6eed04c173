"""Inputs of tests/replay/cli/test_check_table_stream.py and its stored expected outputs.

``python -m tests.replay.cli.checktable_cases`` writes tests/data/check_table.json: for every
case (a golden capture or a synthetic one below, with a ``--rows``), what ``replay check`` printed
(stdout, stderr, exit code), first when the table was built from every request held in memory (main
at 2e82fd7, before the table streamed); rewritten since only where the output changed on purpose
(an id group's rows show the group's responses; lines outside the tables are never wrapped). The
test compares today's streaming table with it.
"""

from __future__ import annotations

import io
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import orjson

from replay.cli.check import check
from tests.data.make_golden import INFER, Builder
from tests.support.paths import DATA

EXPECTED = DATA / "check_table.json"
GOLDEN = sorted(p for p in DATA.glob("*.jsonl") if p.name not in ("garbled_middle.jsonl", "too_new.jsonl"))
#: The HTTP goldens (tests/data/http), named ``http/<name>`` in the cases: real Triton HTTP shapes and a mixed capture.
HTTP_GOLDEN = sorted((DATA / "http").glob("*.jsonl"))
GOLDEN_ROWS = (100, 2, 1, 0)


def calm(requests: int = 150) -> bytes:
    """``requests`` completed stream requests with id ``""`` on three interleaved streams: none needs attention."""
    b = Builder().start()
    calls = ("c1.1", "c2.1", "c3.1")
    for call in calls:
        b.call(call)
    for k in range(requests):
        call = calls[k % 3]
        b.request(call, "")
        b.response(call, "", "t", final=False)
        b.response(call, "", None, final=True)
    for call in calls:
        b.end(call)
    return b.finish().render()


def mixed(rounds: int = 60) -> bytes:
    """Three streams and unary calls between them, ending out of call order; every few requests one
    needs attention (error, response after its final, cancelled, deadline, an id group left open)."""
    b = Builder().start()
    streams = ("c1.1", "c2.1", "c3.1")
    for call in streams:
        b.call(call)
    unary = 0
    for k in range(rounds):
        for i, call in enumerate(streams):
            kind = (k * 3 + i) % 11
            rid = "" if k % 2 else f"r{k}"
            b.request(call, rid)
            b.response(call, rid, "t", final=False)
            if kind == 3:
                b.response(call, rid, None, final=True, error="boom")
            elif kind == 7 and k < rounds - 1:
                pass  # left without a final: the next request with its id is in flight beside it
            else:
                b.response(call, rid, None, final=True)
                if kind == 5:
                    b.response(call, rid, "late", final=False)
        if k % 4 == 1:
            unary += 1
            call = f"c9.{2 * unary - 1}"
            b.call(call, method=INFER, timeout_ms=50.0)
            b.request(call, f"u{unary}")
            if unary % 3 == 0:
                b.cancel(call, "deadline")
                b.end(call, status="DEADLINE_EXCEEDED", cause="deadline")
            else:
                b.response(call, f"u{unary}", "t", final=None)
                b.end(call)
    b.request(streams[2], "open")
    b.end(streams[1])
    b.cancel(streams[0], "client_cancel", rst_code=8)
    b.end(streams[0], status="CANCELLED", cause="client_cancel")
    return b.finish().render()  # streams[2] stays open: its requests are known at the capture's end


#: name -> (capture, the --rows to check it with): more requests than rows, needing attention or not,
#: more of those than rows or fewer; exactly rows requests; every request (0).
SYNTHETIC: dict[str, tuple[Callable[[], bytes], tuple[int, ...]]] = {
    "calm-150": (calm, (100, 5, 0)),
    "calm-100": (lambda: calm(100), (100, 99)),
    "mixed-60": (mixed, (150, 100, 10, 0)),
    "mixed-8": (lambda: mixed(8), (100, 10, 5, 0)),
}


def run(paths: list[Path], rows: int) -> dict[str, object]:
    """What ``replay check --rows ROWS PATHS`` prints and returns."""
    out, err = io.StringIO(), io.StringIO()
    code = check([str(p) for p in paths], rows=rows, out=out, err=err)
    return printed(paths, out.getvalue(), err.getvalue(), code)


def printed(paths: list[Path], out: str, err: str, code: int) -> dict[str, object]:
    """The case's result, files named by their names alone (holes and warnings name them) wherever they are."""
    for p in paths:
        out, err = out.replace(f"{p.parent}/", ""), err.replace(f"{p.parent}/", "")
    return {"out": out, "err": err, "code": code}


def cases(tmp: Path) -> dict[str, tuple[list[Path], int]]:
    """Every case by name: the capture files (synthetic ones written to ``tmp``) and the ``--rows``."""
    found: dict[str, tuple[list[Path], int]] = {}
    for p in GOLDEN:
        for rows in GOLDEN_ROWS:
            found[f"{p.stem} --rows {rows}"] = ([p], rows)
    for p in HTTP_GOLDEN:
        for rows in (100, 0):
            found[f"http/{p.stem} --rows {rows}"] = ([p], rows)
    several = [DATA / "interleaved.jsonl", DATA / "stream_cancel.jsonl", DATA / "unattributable.jsonl"]
    for rows in GOLDEN_ROWS:
        found[f"three captures --rows {rows}"] = (several, rows)
    for name, (make, rows_list) in SYNTHETIC.items():
        path = tmp / f"capture-{name}.jsonl"
        path.write_bytes(make())
        for rows in rows_list:
            found[f"{name} --rows {rows}"] = ([path], rows)
    return found


def main() -> int:
    """Write :data:`EXPECTED` from what ``check`` prints now."""
    with tempfile.TemporaryDirectory() as d:
        expected = {name: run(paths, rows) for name, (paths, rows) in cases(Path(d)).items()}
    EXPECTED.write_bytes(orjson.dumps(expected, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    print(f"{EXPECTED}: {len(expected)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())

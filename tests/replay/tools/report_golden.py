"""The report models of every golden capture and of a seeded synthetic one, as stored JSON.

``python -m tests.replay.tools.report_golden`` rewrites ``data/report_models.json.gz``: run it only
when the report is *meant* to show something different, and say so in the commit. The stored file
was written by the builder before its speed-up (issue 19), so a faster builder that loses a tick,
moves a lane or computes a percentile differently fails ``test_report_golden``. The synthetic
capture comes from :mod:`bench.captures` (its runs shape) and the golden ones through the capture reader: a
change of either that changes the records also shows here (regenerate, after checking why).
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any

import orjson

from bench.captures import runs_records as records
from replay.capture.reader import read_capture
from replay.tools.report.model import ReportBuilder
from tests.support.paths import DATA

STORED = Path(__file__).parent / "data" / "report_models.json.gz"
#: Golden captures the reader refuses (too new, garbled) are left out: they make no model.
SKIP = {"too_new.jsonl", "garbled_middle.jsonl"}


#: The checkout's own directory in file paths (gaps, warnings): where the tests run is not the model.
_CHECKOUT = re.compile(rb'(?<=")[^"]*/tests/data/|(?<=\s)/[^"\s]*/tests/data/')


def _relative(text: bytes) -> Any:
    return orjson.loads(_CHECKOUT.sub(b"", text))


def _normal(model: dict[str, Any]) -> Any:
    """The model as the page gets it (JSON), without the absolute file paths of this checkout."""
    out: Any = _relative(orjson.dumps(model))
    out["files"] = [Path(f).name for f in out["files"]]
    return out


def golden_model(name: str) -> Any:
    """The model of one golden capture."""
    reader = read_capture([DATA / name])
    b = ReportBuilder()
    reader.on_loss = b.tracker.lost  # as `report` reads it
    for seq, rec in reader:
        b.feed(seq, rec)
    return _normal(b.finish(files=[str(p) for p in reader.files], gaps=reader.gaps, warnings=reader.warnings))


def synthetic_model() -> Any:
    """A perf_analyzer-like capture (2 runs, one stream each, 264 requests per stream: ~18k records).

    264 requests reach request 250, so a deadline-cut call is in. Above the record limit given
    (the golden captures, below it, cover the hover records).
    """
    b = ReportBuilder(record_limit=1000)
    for seq, rec in enumerate(records(18_000, seed=7, runs=2, concurrency=1)):
        b.feed(seq, rec)
    return _normal(b.finish(files=["synthetic.jsonl"]))


def golden_names() -> list[str]:
    """The golden captures that make a model."""
    grpc = sorted(p.name for p in DATA.glob("*.jsonl") if p.name not in SKIP)
    return grpc + sorted(f"http/{p.name}" for p in (DATA / "http").glob("*.jsonl"))


def all_models() -> dict[str, Any]:
    """Every stored model, by name."""
    out = {name: golden_model(name) for name in golden_names()}
    out["synthetic"] = synthetic_model()
    return out


def stored() -> dict[str, Any]:
    """The stored models."""
    data: dict[str, Any] = _relative(gzip.decompress(STORED.read_bytes()))
    return data


if __name__ == "__main__":
    STORED.write_bytes(gzip.compress(orjson.dumps(all_models(), option=orjson.OPT_SORT_KEYS), mtime=0))
    print(f"wrote {STORED} ({STORED.stat().st_size} bytes)")

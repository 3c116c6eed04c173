"""``export --parquet`` of HTTP and mixed captures: schema 4's HTTP fields are columns, their values as recorded."""

from __future__ import annotations

from pathlib import Path

from replay.tools.export.parquet import export_parquet
from tests.replay.tools.export.test_parquet import _rows
from tests.support.paths import DATA

HTTP = DATA / "http"


def test_http_fields_are_columns_with_the_recorded_values(tmp_path: Path) -> None:
    export_parquet([HTTP / "mixed.jsonl", HTTP / "openai_stream.jsonl", HTTP / "generate_stream_cancelled.jsonl"],
                   tmp_path / "out")  # fmt: skip
    out = tmp_path / "out"
    starts = _rows(out, "call_start", "mixed")
    assert [(r["call"], r["protocol"], r["http_version"]) for r in starts] == [
        ("c1.1", "grpc", None), ("c2.1", "http", "1.1"), ("c2.2", "http", "1.1")]  # fmt: skip
    ends = _rows(out, "call_end", "mixed")
    assert sorted((r["call"], r["status"], r["http_status"]) for r in ends) == [
        ("c1.1", "OK", None), ("c2.1", "200", 200), ("c2.2", "200", 200)]  # fmt: skip
    (cs,) = _rows(out, "capture_start", "mixed")
    assert (cs["http_listen"], cs["http_upstream"]) == ("127.0.0.1:8010", "127.0.0.1:8000")
    events = [r for r in _rows(out, "message", "openai_stream") if r["dir"] == "s2c"]
    assert [(r["request_id"], r["final"], r["finish_reason"]) for r in events] == [
        ("cmpl-7", False, None), ("cmpl-7", False, "length"), ("", True, None)]  # fmt: skip
    (cancel,) = _rows(out, "cancel", "generate_stream_cancelled")
    assert (cancel["cause"], cancel["in_flight"], cancel["forwarded_upstream"]) == ("client_disconnect", ["04a-mid"], True)

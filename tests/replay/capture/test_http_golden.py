"""Schema 4: the golden HTTP captures (tests/data/http) read, gRPC lines are unchanged but for `v`, v3 upgrades."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from replay.capture import events as ev
from replay.capture import methods
from replay.capture.reader import read_capture
from replay.capture.schema import _UPGRADES, SCHEMA_VERSION, decode
from replay.cli.upgrade import upgrade
from replay.errors import CaptureTooNew
from tests.data import make_golden

DATA = Path(make_golden.__file__).parent
HTTP = DATA / "http"
#: The fields schema 4 added: a gRPC record never writes them (their defaults are the gRPC values).
NEW_FIELDS = {"http_listen", "http_upstream", "protocol", "http_version", "finish_reason", "http_status"}


def _read(path: Path) -> list[ev.Record]:
    reader = read_capture(path)
    out = [r for _, r in reader]
    assert not reader.warnings and not reader.gaps
    return out


def test_regenerating_the_http_goldens_gives_no_diff() -> None:
    """tests/data/http is exactly what tests/data/make_golden.py produces."""
    expected = make_golden.render_http()
    assert {p.name for p in HTTP.iterdir()} == set(expected), "run: python -m tests.data.make_golden"
    for name, data in expected.items():
        assert (HTTP / name).read_bytes() == data, f"http/{name} is stale: run python -m tests.data.make_golden"


@pytest.mark.parametrize("name", list(make_golden.HTTP_SCENARIOS))
def test_every_http_golden_reads(name: str) -> None:
    """Read by the capture reader (compiled and Python decoders alike), every record valid, seq gap-free; every
    HTTP call says so and has a request line the one rule reads."""
    records = _read(HTTP / name)
    assert isinstance(records[0], ev.CaptureStarted) and isinstance(records[-1], ev.CaptureEnded)
    assert records[0].http_listen == "127.0.0.1:8010"
    for r in records:
        if isinstance(r, ev.CallStarted):
            assert r.protocol == methods.protocol(r.method)
            assert (r.http_version == "1.1") is (r.protocol == "http")
        if isinstance(r, ev.CallEnded) and r.status.isdigit():
            assert r.http_status == int(r.status)


def _by_call(name: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for r in _read(HTTP / name):
        call = getattr(r, "call", None)
        if call is not None:
            out.setdefault(call, []).append(r)
    return out


def _s2c(records: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.request_id, r.final, r.error) for r in records if isinstance(r, ev.MessageSeen) and r.dir == "s2c"]


def _end(records: list[Any]) -> tuple[Any, ...]:
    end = records[-1]
    assert isinstance(end, ev.CallEnded)
    return end.status, end.cause, end.details, end.messages_c2s, end.messages_s2c


def test_the_http_goldens_say_what_triton_did() -> None:
    """Per shape: events, finals, errors, the cancel and the call's end, as the real server's bytes make them."""
    err = "fail_midstream: backend failure after 2 responses"
    (calls,) = _by_call("generate_stream_completed.jsonl").values()
    assert _s2c(calls) == [("gs-1", False, None), ("gs-1", False, None), ("gs-1", True, None)]
    assert _end(calls) == ("200", "ok", None, 1, 3)
    (calls,) = _by_call("generate_stream_cancelled.jsonl").values()
    assert _s2c(calls) == [("04a-mid", False, None), ("04a-mid", False, None)]
    cancel = calls[-2]
    assert isinstance(cancel, ev.CallCancelled)
    assert (cancel.cause, cancel.in_flight, cancel.responded, cancel.rst_code, cancel.forwarded_upstream) == (
        "client_disconnect", ["04a-mid"], ["04a-mid"], None, True)  # fmt: skip
    assert _end(calls) == ("200", "client_disconnect", None, 1, 2)
    (calls,) = _by_call("error_under_200.jsonl").values()
    assert _s2c(calls) == [("gs-err2", False, None), ("gs-err2", False, None), ("", True, err)]
    assert _end(calls) == ("200", "ok", None, 1, 3)
    (calls,) = _by_call("error_first.jsonl").values()
    assert _s2c(calls) == [("", True, err)]
    assert _end(calls) == ("400", "error", err, 1, 1)
    (calls,) = _by_call("silent.jsonl").values()
    assert _s2c(calls) == [] and _end(calls) == ("200", "ok", None, 1, 0)
    (calls,) = _by_call("openai_stream.jsonl").values()
    assert _s2c(calls) == [("cmpl-7", False, None), ("cmpl-7", False, None), ("", True, None)]
    assert [r.finish_reason for r in calls if isinstance(r, ev.MessageSeen)] == [None, None, "length", None]
    for name, rid in (("unary_json.jsonl", "req-binary-False"), ("unary_binary.jsonl", "req-binary-True")):
        (calls,) = _by_call(name).values()
        assert _s2c(calls) == [(rid, None, None)] and _end(calls) == ("200", "ok", None, 1, 1)


def test_the_mixed_capture_has_both_ports_in_one_seq() -> None:
    """gRPC and HTTP calls interleaved in one file: distinct connections, one gap-free seq."""
    calls = _by_call("mixed.jsonl")
    starts = {c: rs[0] for c, rs in calls.items()}
    assert {c: s.protocol for c, s in starts.items()} == {"c1.1": "grpc", "c2.1": "http", "c2.2": "http"}
    assert {methods.short_method(s.method) for s in starts.values()} == {
        "ModelStreamInfer", "HTTP infer", "HTTP generate_stream"}  # fmt: skip
    seqs = [seq for seq, _ in read_capture(HTTP / "mixed.jsonl")]
    assert seqs == list(range(len(seqs)))


def _grpc_goldens() -> list[Path]:
    return sorted(p for p in DATA.glob("*.jsonl") if p.name not in ("garbled_middle.jsonl", "too_new.jsonl"))


def test_grpc_records_never_write_the_new_fields() -> None:
    """Sparse encoding leaves out every schema-4 field on gRPC records: their lines are v3's but for `v`."""
    for path in _grpc_goldens():
        for line in path.read_bytes().splitlines():
            try:
                raw = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # truncated_last_line's cut line
            if raw["v"] == SCHEMA_VERSION:
                assert not NEW_FIELDS & raw.keys(), (path.name, raw)


@pytest.mark.parametrize("name", ["many_responses", "stream_cancel", "unary", "client_disconnect"])
def test_grpc_lines_are_v3_lines_but_for_v(name: str) -> None:
    """The gRPC goldens as schema 3 wrote them (tests/replay/capture/data, copied before the bump), against what
    the generator writes now: byte for byte the same lines, `v` aside."""
    v3 = (Path(__file__).parent / "data" / f"{name}_v3.jsonl").read_bytes()
    now = make_golden.SCENARIOS[f"{name}.jsonl"].build()
    assert now.replace(b'{"v":4,', b'{"v":3,') == v3


def test_v3_is_upgraded_and_refused_as_v4_by_a_v3_reader(tmp_path: Path) -> None:
    """A v3 capture (today's gRPC lines with `v` 3) upgrades to v4 record for record; and the envelope refuses a
    version newer than it knows, which is what keeps a v3 reader off v4 captures."""
    assert SCHEMA_VERSION == 4 and _UPGRADES[3]({"a": 1}) == {"a": 1}
    v3 = tmp_path / "in" / "capture-v3.jsonl"
    v3.parent.mkdir()
    v3.write_bytes((DATA / "stream_cancel.jsonl").read_bytes().replace(b'{"v":4,', b'{"v":3,'))
    assert b'"v":4' not in v3.read_bytes()
    (out,) = upgrade([str(v3)], tmp_path / "up", "none")
    assert list(read_capture(out)) == list(read_capture(v3)) == list(read_capture(DATA / "stream_cancel.jsonl"))
    assert {orjson.loads(line)["v"] for line in out.read_bytes().splitlines()} == {4}
    (http_out,) = upgrade([str(HTTP / "mixed.jsonl")], tmp_path / "up-http", "none")
    assert list(read_capture(http_out)) == list(read_capture(HTTP / "mixed.jsonl"))
    with pytest.raises(CaptureTooNew):
        decode({"v": SCHEMA_VERSION + 1, "seq": 0, "kind": "gap"})

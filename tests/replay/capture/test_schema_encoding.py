"""Capture lines: envelope, round trip, version policy, generated documentation."""

from __future__ import annotations

import orjson
import pytest

from replay.capture import events as ev
from replay.capture import formatdoc, schema
from replay.errors import CaptureError, CaptureTooNew
from tests.support.paths import ROOT


def _message() -> ev.MessageSeen:
    return ev.MessageSeen(
        t_ns=1, call="c1.1", dir="c2s", index=0, size=10, compressed=False, model="m", request_id="r",
        inputs=[
            ev.TensorSpec(name="PROMPT", datatype="BYTES", shape=[1], size=9, hmac_sha256="ab" * 32),
            ev.TensorSpec(name="N", datatype="INT32", shape=[1]),
        ],
    )  # fmt: skip


def test_line_has_envelope_first() -> None:
    """Every line starts with v, seq and kind, and ends with a newline."""
    line = schema.encode(_message(), 7)
    assert line.endswith(b"\n")
    obj = orjson.loads(line)
    assert list(obj)[:3] == ["v", "seq", "kind"]
    assert obj["v"] == schema.SCHEMA_VERSION and obj["seq"] == 7 and obj["kind"] == "message"


def test_round_trip_every_kind() -> None:
    """decode(encode(record)) gives the record back for every record kind; so does the record's dense JSON
    object (``to_dict``, what the test captures are built from) under an envelope."""
    records = [
        ev.CaptureStarted(t_ns=1, proxy_version="x", listen="a:1", upstream="b:2", options={"payload": "meta"}),
        ev.CallStarted(t_ns=2, call="c1.1", conn="c1", method="/m", peer="p", metadata=[["a", "b"]], timeout_ms=None,
                       client_subject="CN=c"),
        _message(),
        ev.HalfClosed(t_ns=3, call="c1.1"),
        ev.CallCancelled(
            t_ns=4, call="c1.1", cause="client_cancel", in_flight=["r"], responded=[], rst_code=8,
            elapsed_ms=1.5, forwarded_upstream=True, upstream_rst_us=80.5,
        ),
        ev.LateFrameSeen(t_ns=5, call="c1.1", frame="message", size=10, since_cancel_ms=0.4, request_id="r", final=False),
        ev.EvidenceRecorded(
            t_ns=6, call="c1.1", cancel_t_ns=4, source="log", window_ms=500.0, in_flight=["r"],
            lines=["I1130 ... Cancellation notification received"], skipped_responses=2, overlapping=[],
        ),
        ev.CallEnded(
            t_ns=5, call="c1.1", status="CANCELLED", details=None, cause="client_cancel", trailers=None,
            initial_metadata=None, duration_ms=2.0, messages_c2s=1, messages_s2c=0,
        ),
        ev.ProtocolViolated(t_ns=6, conn="c2", side="client", error="bad frame", error_code=1, open_calls=["c2.1"]),
        ev.GapRecorded(t_ns=6, dropped=3, reason="queue_full", first_t_ns=1, last_t_ns=2),
        ev.MarkRecorded(t_ns=6, note="starting load test 3", labels={"run": "3"}),
        ev.FilesRemoved(t_ns=6, reason="retention", files=["capture-20250101T000000-1.jsonl"], size=10, detail="d"),
        ev.CaptureEnded(t_ns=7, reason="shutdown", counts={"dropped": 0}),
    ]  # fmt: skip
    assert {type(r) for r in records} == set(ev.RECORD_TYPES)
    for i, rec in enumerate(records):
        seq, back = schema.decode(orjson.loads(schema.encode(rec, i)))
        assert (seq, back) == (i, rec)
        dense = schema.to_dict(rec)  # every field spelled out, as a v3 line may also say it
        assert schema.decode({"v": schema.SCHEMA_VERSION, "seq": i, **dense}) == (i, rec)


def test_newer_version_is_refused_clearly() -> None:
    """A record from a newer schema version is refused with a message that says to upgrade."""
    with pytest.raises(CaptureTooNew, match="newer than this triton-tap understands"):
        schema.decode({"v": schema.SCHEMA_VERSION + 1, "seq": 0, "kind": "gap"}, path="f.jsonl", line=3)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ([], "JSON object"),
        ({"seq": 0, "kind": "gap"}, "schema version"),
        ({"v": 1, "kind": "gap"}, "seq"),
        ({"v": 1, "seq": 0, "kind": "nope"}, "unknown record kind"),
        ({"v": 1, "seq": 0, "kind": "half_close"}, "lacks field"),
    ],
)
def test_bad_records_name_the_problem(raw: object, why: str) -> None:
    """Malformed records raise CaptureError with file:line and the reason."""
    with pytest.raises(CaptureError, match=why) as info:
        schema.decode(raw, path="f.jsonl", line=9)
    assert str(info.value).startswith("f.jsonl:9: ")


def test_unknown_fields_are_ignored() -> None:
    """Fields added later (same version) do not break older readers."""
    _, rec = schema.decode({"v": 1, "seq": 0, "kind": "half_close", "t_ns": 1, "call": "c", "new": 1})
    assert rec == ev.HalfClosed(t_ns=1, call="c")


def test_docs_document_the_schema() -> None:
    """docs/capture-format.md's records section is what replay.capture.schema generates (one source of truth)."""
    page = (ROOT / "docs" / "capture-format.md").read_text()
    assert formatdoc.markdown() in page, "regenerate its records section: python -m replay.capture.formatdoc --markdown"


def _unary_line(index: int) -> dict[str, object]:
    """Line ``index`` of the golden unary capture, parsed (2: a call_end, 4: a request message)."""
    parsed: dict[str, object] = orjson.loads((ROOT / "tests" / "data" / "unary.jsonl").read_bytes().splitlines()[index])
    return parsed


_START = {"v": 3, "seq": 9, "kind": "call_start", "t_ns": 1, "call": "c", "conn": "c", "method": "m", "peer": "p"}


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ((4, {"t_ns": "x" * 60}), "message record: field 't_ns' must be integer, got string '" + "x" * 36 + "..."),
        ((4, {"t_ns": "x" * 38}), "message record: field 't_ns' must be integer, got string '" + "x" * 38 + "'"),
        ((4, {"t_ns": "x" * 39}), "message record: field 't_ns' must be integer, got string '" + "x" * 36 + "..."),
        ((4, {"inputs": ["PROMPT"]}), "message record: field 'inputs': item 0 must be a tensor object, got string"),
        ((4, {"inputs": [{"name": "X"}]}), "message record: field 'inputs': item 0 lacks datatype, shape"),
        ((4, {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1]}, {"name": 5, "datatype": "INT32", "shape": [1]}]}),
         "message record: field 'inputs': item 1: field 'name' must be string, got integer 5"),
        ((4, {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "size": "big"}]}),
         "message record: field 'inputs': item 0: field 'size' must be integer or null, got string 'big'"),
        ((4, {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1, "2"]}]}),
         "message record: field 'inputs': item 0: field 'shape': item 1 must be integer, got string"),
        ((4, {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "hmac_sha256": 5}]}),  # no size before it
         "message record: field 'inputs': item 0: field 'hmac_sha256' must be null or string, got integer 5"),
        ((2, {"duration_ms": "1"}), "call_end record: field 'duration_ms' must be integer or number, got string '1'"),
        ((2, {"details": 5}), "call_end record: field 'details' must be null or string, got integer 5"),
        ((None, {"metadata": [["a", 1]]}), "call_start record: field 'metadata': item 0: item 1 must be string, got integer"),
        ((None, {"metadata": [["a", "b"], "x"]}), "call_start record: field 'metadata': item 1 must be array, got string"),
    ],
)  # fmt: skip
def test_a_bad_field_is_named_with_what_it_must_be_and_what_it_holds(
    line: tuple[int | None, dict[str, object]], says: str
) -> None:
    """The one line `check` prints for a corrupt record: the record kind, the field (and the item inside
    it), the JSON types it may hold, and what it holds (a long value cut to 40 characters)."""
    index, changed = line
    raw = {**(_unary_line(index) if index is not None else _START), **changed}
    with pytest.raises(CaptureError) as info:
        schema.decode(raw, path="f.jsonl", line=3)
    assert str(info.value) == "f.jsonl:3: " + says


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"v": 3, "seq": 9, "kind": "mark", "t_ns": 1, "note": "n", "labels": {"run": 3}},
         "mark record: field 'labels': value of 'run' must be string, got integer"),
        ({"v": 3, "seq": 9, "kind": "capture_end", "t_ns": 1, "reason": "shutdown", "counts": {"dropped": "0"}},
         "capture_end record: field 'counts': value of 'dropped' must be integer, got string"),
    ],
)  # fmt: skip
def test_a_bad_value_in_a_map_field_is_named_by_its_key(raw: dict[str, object], says: str) -> None:
    """A mark's labels or a capture_end's counts holding a wrong value: the key is named."""
    with pytest.raises(CaptureError) as info:
        schema.decode(raw, path="f.jsonl", line=3)
    assert str(info.value) == "f.jsonl:3: " + says


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ([], "a capture line must be a JSON object"),
        ({"seq": 0, "kind": "gap"}, "missing or invalid schema version 'v': None"),
        ({"v": 0, "seq": 0, "kind": "gap"}, "missing or invalid schema version 'v': 0"),
        ({"v": True, "seq": 0, "kind": "gap"}, "missing or invalid schema version 'v': True"),
        ({"v": 1, "kind": "gap"}, "missing or invalid 'seq': None"),
        ({"v": 1, "seq": -1, "kind": "gap"}, "missing or invalid 'seq': -1"),
        ({"v": 1, "seq": 0, "kind": ""}, "missing or invalid record kind ''"),
        ({"v": 1, "seq": 0}, "missing or invalid record kind None"),
        ({"v": 1, "seq": 0, "kind": 5}, "missing or invalid record kind 5"),  # damage, not a newer writer's kind
        ({"v": 1, "seq": 0, "kind": "half_close"}, "half_close record lacks field(s) call, t_ns"),
        ({"v": schema.SCHEMA_VERSION + 1, "seq": 0, "kind": "gap"},
         f"capture schema version {schema.SCHEMA_VERSION + 1} is newer than this triton-tap understands "
         f"({schema.SCHEMA_VERSION}); upgrade triton-tap to read it"),
    ],
)  # fmt: skip
def test_what_a_bad_envelope_says(raw: object, says: str) -> None:
    """The whole line `check` prints for a line whose envelope (v, seq, kind, required fields) is wrong."""
    with pytest.raises(CaptureError) as info:
        schema.decode(raw, path="f.jsonl", line=9)
    assert (str(info.value), info.value.path, info.value.line) == ("f.jsonl:9: " + says, "f.jsonl", 9)

"""Capture lines: envelope, round trip, version policy, generated documentation."""

from __future__ import annotations

import orjson
import pytest

from replay.capture import events as ev
from replay.capture import schema
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
    """decode(encode(record)) gives the record back for every record kind."""
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
    assert schema.markdown() in page, "regenerate its records section: python -m replay.capture.schema --markdown"

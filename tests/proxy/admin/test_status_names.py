"""`status` names what it shows as the capture names it: one name for one thing.

The open-calls table, its `--json` and the admin proto's OpenCall call the request-id lists what the
capture's `cancel` record calls them (`in_flight`, `responded`): the proxy sees responses, not
execution, so a list it calls `executing` would claim what it never observed.
"""

from __future__ import annotations

import dataclasses
import io
import json
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.admin import client
from proxy.admin.pb import admin_pb2 as pb
from replay.capture import events as ev


def _status() -> pb.StatusResponse:
    oc = pb.OpenCall(call="c1.1", method="/inference.GRPCInferenceService/ModelStreamInfer", model="tokens",
                     age_ms=12.0, in_flight=["r1", "r2"], responded=["r1"], executing=["r1"])  # fmt: skip
    return pb.StatusResponse(version="t", listen="127.0.0.1:8011", upstream="127.0.0.1:8001", open_calls=[oc])


def _headings(text: str) -> list[str]:
    (header,) = [line for line in text.splitlines() if "call" in line and "method" in line]
    return [h.strip() for h in header.strip().strip("┃").split("┃")]


def _id_lists() -> list[str]:
    """OpenCall's request-id lists, as the proto declares them (deprecated names aside)."""
    return [f.name for f in pb.OpenCall.DESCRIPTOR.fields
            if f.type == f.TYPE_STRING and f.is_repeated and not f.GetOptions().deprecated
            and f.name != "in_flight_models"]  # fmt: skip


def test_the_open_calls_tables_id_columns_are_the_capture_fields() -> None:
    """The table's request-id columns, the proto's (non-deprecated) OpenCall lists and the cancel record's
    fields carry one name each; the responded column shows the responded ids."""
    out = io.StringIO()
    client.render_status(_status(), out)
    headings = _headings(out.getvalue())
    id_columns = [h.replace(" ", "_") for h in headings[headings.index("age ms") + 1 :]]
    cancel_fields = {f.name for f in dataclasses.fields(ev.CallCancelled)}
    assert id_columns == _id_lists() == ["in_flight", "responded"]
    assert set(id_columns) <= cancel_fields
    (row,) = [line for line in out.getvalue().splitlines() if "c1.1" in line]
    assert [c.strip() for c in row.strip().strip("│").split("│")][-2:] == ["r1, r2", "r1"]


def test_status_json_says_responded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`status --json`: each open call has `responded`, not also its deprecated first name."""
    monkeypatch.setattr(client, "_call", lambda args, method, request: _status())
    out = io.StringIO()
    assert client.run_status(SimpleNamespace(json=True), out) == 0
    (oc,) = json.loads(out.getvalue())["open_calls"]
    assert oc["in_flight"] == ["r1", "r2"] and oc["responded"] == ["r1"]
    assert "executing" not in oc


def test_the_service_fills_responded_and_its_deprecated_first_name() -> None:
    """v1 clients that read `executing` still get the list (the proto only gains fields within v1)."""
    field: Any = pb.OpenCall.DESCRIPTOR.fields_by_name["executing"]
    assert field.GetOptions().deprecated and field.number == 6
    assert pb.OpenCall.DESCRIPTOR.fields_by_name["responded"].number == 7


@pytest.mark.parametrize(
    ("in_flight", "models", "shown"),
    [
        (["a", "b", "c"], ["tokens", "echo", "tokens"], "tokens, echo"),
        (["a", ""], ["tokens", ""], "tokens, ?"),  # an id-less request whose message left memory
        ([], [], "echo (idle)"),
        (["a"], [], "echo"),  # a proxy from before in_flight_models: its latest request's model, as it said
    ],
)
def test_the_model_column_names_the_requests_in_flight(in_flight: list[str], models: list[str], shown: str) -> None:
    """A stream's requests may name different models: the column names those in flight, not the latest."""
    oc = pb.OpenCall(call="c1.1", method="/inference.GRPCInferenceService/ModelStreamInfer", model="echo",
                     in_flight=in_flight, in_flight_models=models)  # fmt: skip
    assert client._models(oc) == shown


def test_recent_models_per_request_in_flight() -> None:
    """The hub's recent records: each call's latest model, and the model of each in-flight id's latest request
    (an id sent twice: its later request's; id-less: ``""``)."""
    from proxy.admin.hub import TapHub

    def msg(call: str, rid: str | None, model: str, d: str = "c2s") -> ev.MessageSeen:
        return ev.MessageSeen(t_ns=0, call=call, dir=d, index=0, size=1, model=model, request_id=rid)

    hub = TapHub()
    recs = [msg("c1.1", "a", "tokens"), msg("c1.1", None, "silent"), msg("c1.1", "a", "steps_serial"),
            msg("c1.1", "b", "echo"), msg("c1.1", "b", "x", d="s2c"), msg("c2.1", "z", "echo")]  # fmt: skip
    hub.publish(0, recs, [b"{}\n"] * len(recs))
    got = hub.recent_models({"c1.1": {"a", ""}, "c9.1": {"q"}})
    assert got == {"c1.1": ("echo", {"a": "steps_serial", "": "silent"})}


def test_the_counters_say_they_count_records_written() -> None:
    """The counts come from the writer: during a low-disk pause calls are relayed and their records dropped, so
    "calls 3" read as calls through the proxy when 5 went through. The line says what it counts, and the
    open calls (relayed, not records) apart."""
    st = _status()
    st.counters.records.update({"call_start": 3, "message": 10, "gap": 1})
    st.counters.calls_by_cause.update({"ok": 2})
    st.counters.dropped = 7
    out = io.StringIO()
    client.render_status(st, out)
    lines = out.getvalue().splitlines()
    assert lines[1] == "recorded: calls 3, messages 10, gaps 1; records dropped 7, writer queue 0; open calls 1"
    assert lines[2] == "recorded ends: ok 2"

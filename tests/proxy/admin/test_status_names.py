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
            if f.type == f.TYPE_STRING and f.is_repeated and not f.GetOptions().deprecated]  # fmt: skip


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

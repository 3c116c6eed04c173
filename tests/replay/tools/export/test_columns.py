"""Arrow columns come from the event dataclasses' type hints: every field a column, typed, nulls kept."""

from __future__ import annotations

import dataclasses
from typing import get_type_hints

import pyarrow as pa
import pytest

from replay.capture import events as ev
from replay.tools.export.columns import column, columns


@pytest.mark.parametrize("cls", ev.RECORD_TYPES, ids=lambda c: c.kind)
def test_every_field_of_every_kind_is_a_column_in_field_order(cls: type) -> None:
    """No hand-written column list: a new event field is a new column."""
    assert [c.name for c in columns(cls)] == [f.name for f in dataclasses.fields(cls)]


def test_types_follow_the_hints() -> None:
    """Scalars, nullability from `| None`, lists, structs of TensorSpec, maps, JSON text for the rest."""
    msg = {c.name: c for c in columns(ev.MessageSeen)}
    assert (msg["t_ns"].type, msg["t_ns"].nullable) == (pa.int64(), False)
    assert (msg["final"].type, msg["final"].nullable) == (pa.bool_(), True)
    assert (msg["dir"].type, msg["dir"].nullable) == (pa.string(), False)  # a Literal is a string
    assert msg["outputs"].type == pa.list_(pa.string())
    tensor = msg["output_tensors"].type.value_type
    assert [(f.name, f.type, f.nullable) for f in tensor] == [
        ("name", pa.string(), False), ("datatype", pa.string(), False), ("shape", pa.list_(pa.int64()), False),
        ("size", pa.int64(), True), ("hmac_sha256", pa.string(), True)]  # fmt: skip
    assert msg["sequence_id"].type == pa.string()  # bool | int | float | str as sent: JSON text
    start = {c.name: c for c in columns(ev.CallStarted)}
    assert start["metadata"].type == pa.list_(pa.list_(pa.string())) and start["timeout_ms"].type == pa.float64()
    assert {c.name: c.type for c in columns(ev.CaptureEnded)}["counts"] == pa.map_(pa.string(), pa.int64())
    assert {c.name: c.type for c in columns(ev.CaptureStarted)}["options"] == pa.string()


def test_conversions_keep_nulls_and_the_senders_types() -> None:
    """None stays None (never a default); 1, true and "1" stay apart; a TensorSpec is its fields."""
    param = column("sequence_id", get_type_hints(ev.MessageSeen, include_extras=True)["sequence_id"])
    assert param.convert is not None
    assert [param.convert(v) for v in (None, 1, True, "1", 1.5)] == [None, "1", "true", '"1"', "1.5"]
    spec = ev.TensorSpec(name="TEXT", datatype="BYTES", shape=[1, 2])
    tensors = {c.name: c for c in columns(ev.MessageSeen)}["output_tensors"]
    assert tensors.convert is not None and tensors.convert(None) is None
    got = pa.array([tensors.convert([spec]), None, tensors.convert([])], tensors.type).to_pylist()
    assert got == [[{"name": "TEXT", "datatype": "BYTES", "shape": [1, 2], "size": None, "hmac_sha256": None}], None, []]

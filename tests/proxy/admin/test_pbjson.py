"""The admin commands' ``--json`` of a protobuf message: every field, 64-bit integers as JSON numbers."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.admin import pbjson
from proxy.admin.pb import admin_pb2 as pb


def test_maps_repeated_and_nested_messages_carry_ints_and_defaults() -> None:
    oc = pb.OpenCall(call="c1.1", in_flight=["r1"])
    st = pb.StatusResponse(open_calls=[oc], counters=pb.Counters(records={"message": 7, "gap": 0},
                                                                 message_bytes={"c2s": 1 << 40}),
                           tail=pb.TailStats(records_sent=3), next_seq=9)  # fmt: skip
    d = pbjson.message_dict(st)
    assert d["counters"] == {"records": {"message": 7, "gap": 0}, "calls_by_cause": {}, "dropped": 0,
                             "messages": {}, "message_bytes": {"c2s": 1 << 40}}  # fmt: skip
    assert d["tail"] == {"subscribers": 0, "records_sent": 3, "records_dropped": 0}
    assert (d["next_seq"], d["recent_first_seq"], d["writer_queue"], d["tls_listen"]) == (9, 0, 0, False)
    assert d["open_calls"][0]["age_ms"] == 0 and d["open_calls"][0]["responded"] == []


def test_a_field_with_presence_is_there_when_set_and_a_oneof_holds_its_member() -> None:
    assert pbjson.message_dict(pb.TailRequest())["max_queue"] == 0
    assert "from_seq" not in pbjson.message_dict(pb.TailRequest())
    assert pbjson.message_dict(pb.TailRequest(from_seq=0))["from_seq"] == 0
    d = pbjson.message_dict(pb.TailResponse(dropped=pb.TailDropped(count=2, last_seq=1 << 62)))
    assert d == {"dropped": {"count": 2, "first_seq": 0, "last_seq": 1 << 62}}


def test_protobuf_before_5_26_gets_the_option_by_its_old_name(monkeypatch: pytest.MonkeyPatch) -> None:
    real = pbjson.MessageToDict

    def old(message: Any, *, preserving_proto_field_name: bool = False,
            including_default_value_fields: bool = False) -> dict[str, Any]:  # fmt: skip
        return real(message, preserving_proto_field_name=preserving_proto_field_name,
                    always_print_fields_with_no_presence=including_default_value_fields)  # fmt: skip

    monkeypatch.setattr(pbjson, "MessageToDict", old)
    assert pbjson.message_dict(pb.TailStats())["records_dropped"] == 0

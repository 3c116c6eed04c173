"""pieces.only_field_from: does only tensor data follow a long message's head (checked without joining it)?"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from proxy.triton import labels, pieces


def _cut(data: bytes, sizes: list[int]) -> list[bytes]:
    out, i = [], 0
    for n in sizes:
        out.append(data[i : i + n])
        i += n
    out.append(data[i:])
    return [p for p in out if p] or [b""]


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=4), st.lists(st.integers(1, 97), max_size=40))
def test_a_request_written_in_field_order_has_only_tensor_data_after_its_head(tensors: list[bytes], sizes: list[int]) -> None:
    r = pb.ModelInferRequest(model_name="m", id="i", raw_input_contents=tensors)
    r.inputs.add(name="x", datatype="BYTES", shape=[1])
    data = r.SerializeToString()
    prefix, lost = labels.complete_prefix(data, 7, cut=False)
    assert not lost and pieces.only_field_from(_cut(data, sizes), len(prefix), 7)


@given(st.lists(st.integers(1, 97), max_size=40))
def test_a_field_after_the_tensor_data_or_a_cut_tail_is_seen(sizes: list[int]) -> None:
    head = pb.ModelInferRequest(model_name="m", raw_input_contents=[b"t" * 500]).SerializeToString()
    later = head + pb.ModelInferRequest(id="late").SerializeToString()
    start = len(labels.complete_prefix(head, 7, cut=False)[0])
    assert not pieces.only_field_from(_cut(later, sizes), start, 7)
    assert not pieces.only_field_from(_cut(head[:-1], sizes), start, 7)
    assert not pieces.only_field_from(_cut(head, sizes), start, 6)

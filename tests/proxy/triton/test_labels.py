"""Triton labels read off raw messages, including messages cut at the label buffer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from proxy.triton import labels
from replay.capture.events import TensorSpec


def _request(rid: str = "r1", data: bytes = b"x" * 1000) -> pb.ModelInferRequest:
    r = pb.ModelInferRequest(model_name="tokens", model_version="1", id=rid)
    r.parameters["triton_enable_empty_final_response"].bool_param = True
    r.parameters["sequence_id"].int64_param = 42
    t = r.inputs.add(name="PROMPT", datatype="BYTES", shape=[1])
    _ = t
    r.raw_input_contents.append(data)
    return r


def _stream_response(final: bool | None, error: str = "", outputs: int = 1) -> bytes:
    r = pb.ModelInferResponse(model_name="tokens", model_version="1", id="r1")
    if final is not None:
        r.parameters["triton_final_response"].bool_param = final
    for i in range(outputs):
        r.outputs.add(name=f"OUT{i}", datatype="BYTES", shape=[1])
        r.raw_output_contents.append(b"y" * 5000)
    return pb.ModelStreamInferResponse(error_message=error, infer_response=r).SerializeToString()


def test_request_labels() -> None:
    """Model, id, raw enable-empty-final flag, sequence id and input specs come from the request."""
    got = labels.request_labels(_request().SerializeToString(), truncated=False)
    assert got["model"] == "tokens" and got["request_id"] == "r1"
    assert got["enable_empty_final"] is True and got["sequence_id"] == 42
    assert got["inputs"] == [TensorSpec(name="PROMPT", datatype="BYTES", shape=[1])]


def test_final_flag_is_raw() -> None:
    """final is the raw parameter: true, false, or None when absent."""
    for final in (True, False, None):
        assert labels.stream_response_labels(_stream_response(final), False)["final"] is final


def test_empty_response_has_no_outputs() -> None:
    """An empty final response has outputs == [] (not None)."""
    got = labels.stream_response_labels(_stream_response(True, outputs=0), False)
    assert got["outputs"] == [] and got["final"] is True and got["error"] is None


def test_error_and_final_together() -> None:
    """Triton's in-band error arrives with final=true on the same response; both are kept."""
    got = labels.stream_response_labels(_stream_response(True, error="boom", outputs=0), False)
    assert got["error"] == "boom" and got["final"] is True


@given(st.integers(min_value=60, max_value=1200))
def test_truncated_request_keeps_labels(cut: int) -> None:
    """A request cut inside its tensor bytes still yields every label (tensor bytes come last)."""
    body = _request(data=b"z" * 5000).SerializeToString()
    full = labels.request_labels(body, False)
    got = labels.request_labels(body[:cut], truncated=True)
    if "decode_error" not in got:
        assert got == full


@given(st.integers(min_value=80, max_value=9000))
def test_truncated_stream_response_keeps_labels(cut: int) -> None:
    """A stream response cut anywhere after its labels keeps id and final; earlier cuts say so."""
    body = _stream_response(False, outputs=2)
    got = labels.stream_response_labels(body[:cut], truncated=True)
    if "decode_error" not in got:
        assert got["request_id"] == "r1" and got["final"] is False


def test_complete_prefix_stops_at_field() -> None:
    """complete_prefix keeps whole fields before the stop field only."""
    body = _request().SerializeToString()
    prefix, lost = labels.complete_prefix(body, 7, cut=False)
    assert not lost
    assert pb.ModelInferRequest.FromString(prefix).id == "r1"
    assert len(prefix) < len(body)


def test_method_kind_tells_the_inference_methods_apart() -> None:
    """Only ModelInfer and ModelStreamInfer carry Triton labels; every other method is OTHER."""
    base = "/inference.GRPCInferenceService/"
    got = [labels.method_kind(base + m) for m in ("ModelStreamInfer", "ModelInfer", "ModelMetadata", "")]
    assert got == [labels.STREAM, labels.UNARY_INFER, labels.OTHER, labels.OTHER]
    assert len({labels.STREAM, labels.UNARY_INFER, labels.OTHER}) == 3


def test_request_parameters_are_read_raw_and_absent_ones_are_left_out() -> None:
    """Sequence flags and the empty-final flag as sent; a request without parameters claims none."""
    r = pb.ModelInferRequest(model_name="m", model_version="3", id="q")
    r.parameters["triton_enable_empty_final_response"].bool_param = False
    r.parameters["sequence_start"].bool_param = True
    r.parameters["sequence_end"].bool_param = False
    r.parameters["sequence_id"].string_param = "seq-a"
    got = labels.request_labels(r.SerializeToString(), truncated=False)
    assert (got["model_version"], got["enable_empty_final"]) == ("3", False)
    assert (got["sequence_id"], got["sequence_start"], got["sequence_end"]) == ("seq-a", True, False)
    bare = labels.request_labels(pb.ModelInferRequest(model_name="m", id="q").SerializeToString(), truncated=False)
    assert {"enable_empty_final", "sequence_id", "sequence_start", "sequence_end", "decode_error"}.isdisjoint(bare)
    only_seq = pb.ModelInferRequest(model_name="m")
    only_seq.parameters["sequence_id"].int64_param = 7
    got = labels.request_labels(only_seq.SerializeToString(), truncated=False)
    assert got["enable_empty_final"] is None and got["sequence_id"] == 7 and "sequence_end" not in got


def test_a_final_flag_of_another_type_is_not_a_flag() -> None:
    """triton_final_response must be a bool to count: any other type reads as absent (None)."""
    r = pb.ModelInferResponse(model_name="m", id="r")
    r.parameters["triton_final_response"].string_param = "true"
    body = pb.ModelStreamInferResponse(infer_response=r).SerializeToString()
    assert labels.stream_response_labels(body, False)["final"] is None


def _labels_end(body: bytes, stop_field: int) -> int:
    """Where the label fields of ``body`` end (the tensor bytes, field ``stop_field``, start)."""
    prefix, lost = labels.complete_prefix(body, stop_field, cut=False)
    assert not lost
    return len(prefix)


LONG_ID = "r" * 200  # a length that needs a two-byte varint


def test_a_cut_request_is_labelled_whole_or_says_what_it_lost() -> None:
    """Cut at every byte: past the end of the label fields, the labels are the uncut ones; before
    it the record says some fields are unknown (a capture never claims more than the wire showed)."""
    body = _request(rid=LONG_ID, data=b"z" * 300).SerializeToString()
    full = labels.request_labels(body, truncated=False)
    end = _labels_end(body, 7)
    for cut in range(len(body)):
        got = labels.request_labels(body[:cut], truncated=True)
        if cut > end:  # at exactly `end` nothing shows that no label field was still to come
            assert got == full, cut
        else:
            assert got["decode_error"] == "message larger than the label buffer: some request fields are unknown", cut


def _unary_response(rid: str, final: bool | None) -> pb.ModelInferResponse:
    r = pb.ModelInferResponse(model_name="echo", model_version="1", id=rid)
    if final is not None:
        r.parameters["triton_final_response"].bool_param = final
    r.outputs.add(name="OUTPUT", datatype="UINT8", shape=[300])
    r.raw_output_contents.append(b"o" * 300)
    return r


def test_a_cut_unary_response_is_labelled_whole_or_says_what_it_lost() -> None:
    """A unary response, cut at every byte: whole labels after its label fields, decode_error before."""
    body = _unary_response(LONG_ID, None).SerializeToString()
    full = labels.response_labels(body, truncated=False)
    assert (full["request_id"], full["final"], full["outputs"]) == (LONG_ID, None, ["OUTPUT"])
    assert full["output_tensors"] == [TensorSpec(name="OUTPUT", datatype="UINT8", shape=[300])]
    end = _labels_end(body, 6)
    for cut in range(len(body)):
        got = labels.response_labels(body[:cut], truncated=True)
        if cut > end:  # at exactly `end` nothing shows that no label field was still to come
            assert got == full, cut
        else:
            assert got["decode_error"] == "message larger than the label buffer: some response fields are unknown", cut


def test_a_cut_stream_response_is_labelled_whole_or_says_what_it_lost() -> None:
    """A stream response (error text, then the response), cut at every byte: whole labels once the
    inner response's label fields are in, else decode_error; the error text as far as it came."""
    inner = _unary_response(LONG_ID, False)
    body = pb.ModelStreamInferResponse(error_message="e" * 150, infer_response=inner).SerializeToString()
    full = labels.stream_response_labels(body, truncated=False)
    assert (full["error"], full["final"], full["request_id"]) == ("e" * 150, False, LONG_ID)
    inner_body = inner.SerializeToString()
    end = body.index(inner_body) + _labels_end(inner_body, 6)
    error_end = body.index(b"e" * 150) + 150
    for cut in range(len(body)):
        got = labels.stream_response_labels(body[:cut], truncated=True)
        if cut > end:  # at exactly `end` nothing shows that no label field was still to come
            assert got == full, cut
            continue
        assert got["decode_error"] == "message larger than the label buffer: some response fields are unknown", cut
        if cut >= error_end:
            assert got["error"] == "e" * 150, cut
        elif cut > error_end - 150:
            assert got["error"] == "e" * (cut - (error_end - 150)), cut


def test_output_specs_are_shared_between_responses_and_still_right() -> None:
    """Repeated output specs are one shared record (the hot path); different specs stay different."""
    a = labels.stream_response_labels(_stream_response(False, outputs=2), False)["output_tensors"]
    b = labels.stream_response_labels(_stream_response(True, outputs=2), False)["output_tensors"]
    assert a == b == [TensorSpec(name=f"OUT{i}", datatype="BYTES", shape=[1]) for i in range(2)]
    assert a[0] is b[0] and a[1] is not a[0]


def test_response_labels_name_the_model_and_its_version() -> None:
    """Which model (and version) answered is read off every response, unary and streamed."""
    unary = labels.response_labels(_unary_response("u", None).SerializeToString(), truncated=False)
    streamed = labels.stream_response_labels(_stream_response(True), False)
    assert (unary["model"], unary["model_version"]) == ("echo", "1")
    assert (streamed["model"], streamed["model_version"], streamed["request_id"]) == ("tokens", "1", "r1")


def test_an_output_spec_seen_for_the_first_time_is_recorded_as_sent() -> None:
    """A spec not yet shared (a name no earlier response used) still says name, datatype and shape."""
    import uuid

    name = f"OUT_{uuid.uuid4().hex}"  # never seen before in this process, whatever ran earlier
    r = pb.ModelInferResponse(model_name="m", id="r")
    r.outputs.add(name=name, datatype="FP32", shape=[2, 3])
    got = labels.response_labels(r.SerializeToString(), truncated=False)
    assert got["output_tensors"] == [TensorSpec(name=name, datatype="FP32", shape=[2, 3])]
    assert got["outputs"] == [name]


def _field(number: int, wire: int, payload: bytes) -> bytes:
    return bytes([number << 3 | wire]) + payload


def test_complete_prefix_walks_every_wire_type_and_knows_a_whole_buffer() -> None:
    """Fields of any wire type (a newer Triton may add numeric ones) are skipped whole; a buffer that
    holds only whole fields is whole; a cut inside any of them, or a wire type it cannot skip, is lost."""
    varint = _field(1, 0, b"\x96\x01")
    fixed64 = _field(2, 1, b"\x00" * 8)
    fixed32 = _field(3, 5, b"\x00" * 4)
    text = _field(4, 2, b"\x03abc")
    labelled = varint + fixed64 + fixed32 + text
    body = labelled + _field(7, 2, b"\x02zz")
    assert labels.complete_prefix(body, 7) == (labelled, False)
    assert labels.complete_prefix(labelled, 7, cut=False) == (labelled, False)
    assert labels.complete_prefix(labelled, 7) == (labelled, True)  # known cut: field 7 never began
    for cut, whole in ((1, b""), (len(varint) + 5, varint), (len(varint + fixed64) + 2, varint + fixed64)):
        assert labels.complete_prefix(body[:cut], 7) == (whole, True), cut
    assert labels.complete_prefix(varint + _field(5, 3, b"") + body, 7) == (varint, True)  # a group: cannot skip


def test_a_cut_stream_response_without_error_has_no_error() -> None:
    """No error_message field on the wire: the cut response's error is None, not an empty error."""
    body = _stream_response(False, outputs=1)
    assert labels.stream_response_labels(body[: len(body) - 100], truncated=True)["error"] is None


def test_an_error_text_cut_inside_a_character_is_kept_readable() -> None:
    """A cut inside a multi-byte character of the error text never raises; the text reads as far as it came."""
    body = pb.ModelStreamInferResponse(error_message="é" * 100, infer_response=_unary_response("r", True))
    raw = body.SerializeToString()
    start = raw.index("é".encode())
    got = labels.stream_response_labels(raw[: start + 5], truncated=True)  # two and a half characters
    assert got["error"].startswith("éé") and "decode_error" in got


def test_a_long_error_text_does_not_hide_the_response_after_it() -> None:
    """An error text longer than 16 KiB (a three-byte length) is skipped whole: the labels after it are read."""
    body = pb.ModelStreamInferResponse(error_message="x" * 20_000, infer_response=_unary_response("r9", True))
    raw = body.SerializeToString()
    got = labels.stream_response_labels(raw[:-10], truncated=True)
    assert (got["error"], got["request_id"], got["final"], "decode_error" in got) == ("x" * 20_000, "r9", True, False)


def test_a_parameter_sent_without_a_value_is_recorded_as_null() -> None:
    """A client may send a parameter entry with no value set (an empty InferParameter): it is there, and
    it says nothing, so its label is null (not a crash, not a default value)."""
    r = pb.ModelInferRequest(model_name="m", id="q")
    r.parameters["sequence_id"].SetInParent()
    r.parameters["triton_enable_empty_final_response"].SetInParent()
    got = labels.request_labels(r.SerializeToString(), truncated=False)
    assert (got["sequence_id"], got["enable_empty_final"]) == (None, None)

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

"""The pure half of `serve`: timing rule, answers rebuilt from captured records, the other-RPC choice."""

from __future__ import annotations

import base64
import math
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from replay.capture import events as ev
from replay.tools.serve import parse_timing
from replay.tools.serve.index import AnswerStore, CallEnd, CapturedCall
from replay.tools.serve.pick import missing_answer, pick_other
from replay.tools.serve.responses import Undecodable, lenient, other_response, stream_response, unary_response, zeros


def _msg(dir: ev.Direction = "s2c", **kw: object) -> ev.MessageSeen:
    return ev.MessageSeen(t_ns=1, call="c1", dir=dir, index=0, size=kw.pop("size", 0), compressed=False, **kw)


def _full(message: object, dir: ev.Direction = "s2c") -> ev.MessageSeen:
    data = message.SerializeToString()
    return _msg(dir, size=len(data), payload=base64.b64encode(data).decode())


@pytest.fixture
def store() -> Iterator[AnswerStore]:
    """Where the test calls' answers go; dropped at teardown."""
    s = AnswerStore()
    yield s
    s.close()


def _call(
    store: AnswerStore, cid: str, request: ev.MessageSeen | None, response: ev.MessageSeen | None,
    status: str = "OK",
) -> CapturedCall:  # fmt: skip
    call = CapturedCall(id=cid, method="/inference.GRPCInferenceService/ServerMetadata", t_start=0, timeout_ms=None,
                        store=store)  # fmt: skip
    if request is not None:
        call.add_request(1, request)
    if response is not None:
        call.add_response(2, response, 1)
    call.end = CallEnd(t_ns=2, seq=9, status=status, details=None, cause="ok", trailers=None, initial_metadata=None)
    return call


@pytest.mark.parametrize(("text", "want"), [("as-captured", 1.0), ("fast", None), ("x2", 2.0), ("x0.5", 0.5)])
def test_timing_names_parse(text: str, want: float | None) -> None:
    """The three --timing forms give the speed factor (None: no delays)."""
    assert parse_timing(text) == want


@pytest.mark.parametrize("text", ["", "x", "x0", "x-1", "xnan", "xinf", "2", "slow"])
def test_bad_timing_is_refused_naming_the_forms(text: str) -> None:
    """Anything else (including a zero, negative or infinite speed) is a ValueError naming the forms."""
    with pytest.raises(ValueError, match="as-captured, fast or xN"):
        parse_timing(text)


@given(st.sampled_from(["BOOL", "INT8", "FP16", "INT32", "FP64", "BYTES"]), st.lists(st.integers(0, 4), max_size=3))
def test_zero_fill_has_the_tensor_size(datatype: str, shape: list[int]) -> None:
    """A rebuilt tensor holds shape-product elements of the datatype's width (BYTES: 4-byte zero lengths)."""
    width = {"BOOL": 1, "INT8": 1, "FP16": 2, "INT32": 4, "FP64": 8, "BYTES": 4}[datatype]
    data = zeros(ev.TensorSpec(name="t", datatype=datatype, shape=shape))
    assert data == bytes(math.prod(shape) * width)


def test_meta_stream_response_is_rebuilt_from_the_labels() -> None:
    """Without bytes: names, shapes, the final flag, the id and the in-band error, zero-filled and marked not real."""
    spec = ev.TensorSpec(name="OUT", datatype="INT32", shape=[2])
    rec = _msg(model="m", model_version="1", request_id="r", final=True, outputs=["OUT", "OLD"],
               output_tensors=[spec], error="boom")  # fmt: skip
    msg, real = stream_response(rec)
    assert not real
    assert msg.error_message == "boom"
    r = msg.infer_response
    assert (r.model_name, r.model_version, r.id) == ("m", "1", "r")
    assert r.parameters["triton_final_response"].bool_param is True
    assert [(o.name, o.datatype, list(o.shape)) for o in r.outputs] == [("OUT", "INT32", [2]), ("OLD", "", [])]
    assert list(r.raw_output_contents) == [bytes(8)]


def test_full_responses_are_the_captured_bytes() -> None:
    """With bytes the captured message is sent as it was, and marked real."""
    want = pb.ModelInferResponse(id="x", model_name="m")
    msg, real = unary_response(_full(want))
    assert real and msg == want
    stream = pb.ModelStreamInferResponse(error_message="e", infer_response=want)
    msg, real = stream_response(_full(stream))
    assert real and msg == stream


def test_truncated_payload_counts_as_meta() -> None:
    """A payload cut at the byte cap is not the answer: the response is rebuilt instead."""
    rec = _msg(payload=base64.b64encode(b"\x0a\x01x").decode(), payload_truncated=True, request_id="q")
    msg, real = unary_response(rec)
    assert not real and msg.id == "q"


def test_readiness_without_bytes_is_told_by_size() -> None:
    """proto3 writes false as nothing: a non-empty readiness answer was true."""
    assert other_response("ServerLive", pb.ServerLiveResponse, _msg(size=2)).live is True
    assert other_response("ModelReady", pb.ModelReadyResponse, _msg(size=0)).ready is False


def test_pick_other_prefers_the_same_request_then_walks_unused_calls(store: AnswerStore) -> None:
    """A call asked the same thing wins; repeated asks take the next unused one, then the last."""
    ask = pb.ModelMetadataRequest(name="a")
    other = _call(store, "c0", _full(pb.ModelMetadataRequest(name="b"), "c2s"), None)
    same1 = _call(store, "c1", _full(ask, "c2s"), None)
    same2 = _call(store, "c2", _full(ask, "c2s"), None)
    calls = [other, same1, same2]
    assert pick_other("ModelMetadata", calls, ask, set()) is same1
    assert pick_other("ModelMetadata", calls, ask, {"c1"}) is same2
    assert pick_other("ModelMetadata", calls, ask, {"c1", "c2"}) is same2


def test_pick_other_explains_when_nothing_answers(store: AnswerStore) -> None:
    """No call of the method, or only calls asked something else: the NOT_FOUND message says which."""
    ask = pb.ModelMetadataRequest(name="a")
    assert "has no ModelMetadata call" in str(pick_other("ModelMetadata", [], ask, set()))
    other = _call(store, "c0", _full(pb.ModelMetadataRequest(name="b"), "c2s"), None)
    why = pick_other("ModelMetadata", [other], ask, set())
    assert isinstance(why, str) and "1 captured ModelMetadata call(s) asked something else" in why


def test_pick_other_falls_back_to_calls_whose_request_was_not_captured(store: AnswerStore) -> None:
    """A meta capture holds no request bytes: any call of the method may answer."""
    meta = _call(store, "c0", _msg("c2s", size=3), None)
    assert pick_other("ModelMetadata", [meta], pb.ModelMetadataRequest(name="a"), set()) is meta


def test_missing_answer_only_for_ok_non_readiness_answers_without_bytes(store: AnswerStore) -> None:
    """A meta capture cannot rebuild a metadata answer; readiness, errors and full captures are fine."""
    assert missing_answer("ServerMetadata", _call(store, "c", None, _msg(size=5))) is not None
    assert missing_answer("ServerReady", _call(store, "c", None, _msg(size=5))) is None
    assert missing_answer("ServerMetadata", _call(store, "c", None, _msg(size=5), status="UNAVAILABLE")) is None
    assert missing_answer("ServerMetadata", _call(store, "c", None, _full(pb.ServerMetadataResponse(name="t")))) is None


def test_lenient_deserializer_hands_on_what_does_not_parse() -> None:
    """Bytes that do not parse become an Undecodable with their size, not an exception."""
    parse = lenient(pb.ModelInferRequest.FromString)
    assert parse(pb.ModelInferRequest(id="a").SerializeToString()).id == "a"
    bad = parse(b"\xff\xff\xff")
    assert isinstance(bad, Undecodable) and bad.size == 3 and bad.error


def _compressed(message: object, how: str, dir: ev.Direction = "s2c") -> ev.MessageSeen:
    """A `--payload full` record of a message the wire carried compressed (the grpc-encoding's bytes, as stored)."""
    import gzip
    import zlib

    data = message.SerializeToString()
    packed = {"gzip": gzip.compress, "deflate": zlib.compress, "garbage": lambda d: b"\x00not a compressed message"}[how]
    wire = packed(data)
    return ev.MessageSeen(t_ns=1, call="c1", dir=dir, index=0, size=len(wire), compressed=True,
                          payload=base64.b64encode(wire).decode(), model="m", output_tensors=[
                              ev.TensorSpec(name="OUT", datatype="INT32", shape=[2])], outputs=["OUT"])  # fmt: skip


@pytest.mark.parametrize("how", ["gzip", "deflate"])
def test_a_compressed_full_capture_answers_with_its_real_data(how: str) -> None:
    """Triton compresses its responses (--grpc-infer-response-compression-level): the capture keeps the bytes as
    sent. serve answers with them inflated, the real data (it sent zeros, saying the capture was `meta`)."""
    real = pb.ModelInferResponse(model_name="m", id="r1", outputs=[pb.ModelInferResponse.InferOutputTensor(
        name="OUT", datatype="INT32", shape=[2])], raw_output_contents=[b"\x07\x00\x00\x00\x09\x00\x00\x00"])  # fmt: skip
    assert unary_response(_compressed(real, how)) == (real, True)
    streamed = pb.ModelStreamInferResponse(infer_response=real)
    assert stream_response(_compressed(streamed, how)) == (streamed, True)


def test_compressed_bytes_that_do_not_inflate_are_rebuilt_and_said_so() -> None:
    """Bytes that are no gzip or deflate stream (another grpc-encoding): rebuilt from the labels, marked not real."""
    answer, real = unary_response(_compressed(pb.ModelInferResponse(model_name="m"), "garbage"))
    assert not real and answer.raw_output_contents == [bytes(8)]


@pytest.mark.parametrize("how", ["gzip", "deflate"])
def test_a_compressed_request_matches_by_payload_as_its_server_read_it(how: str) -> None:
    """`--match payload`: a request its client compressed has the key of the same request sent plain (it had none,
    and serve's NOT_FOUND named some other request as the closest)."""
    from replay.tools.captured import request_key

    request = pb.ModelInferRequest(model_name="m", id="a", inputs=[pb.ModelInferRequest.InferInputTensor(
        name="IN", datatype="INT32", shape=[1])], raw_input_contents=[b"\x01\x00\x00\x00"])  # fmt: skip
    plain, _ = request_key(_full(request, "c2s"), "unary", "/inference.GRPCInferenceService/ModelInfer")
    packed, _ = request_key(_compressed(request, how, "c2s"), "unary", "/inference.GRPCInferenceService/ModelInfer")
    assert plain.input_hash is not None and packed.input_hash == plain.input_hash

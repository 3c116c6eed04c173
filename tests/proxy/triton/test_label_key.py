"""The labels' field scanner (``label_key``) and cache give exactly what protobuf's decode gives.

Pure: random Triton messages (tritonclient's ``service_pb2``), serialised, then messages differing
from them only in tensor bytes (the cache's hits), random byte edits, cuts and concatenations
(protobuf merges concatenated messages): for every one, the cached labels equal a fresh protobuf
decode, and a message protobuf refuses raises the same error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from proxy.triton import labels

_text = st.text(max_size=6)
_param = st.one_of(
    st.none(),
    st.tuples(st.just("bool_param"), st.booleans()),
    st.tuples(st.just("int64_param"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("uint64_param"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("string_param"), _text),
    st.tuples(st.just("double_param"), st.floats(allow_nan=False)),
)
_params = st.dictionaries(
    st.sampled_from(["triton_final_response", "triton_enable_empty_final_response", "sequence_id",
                     "sequence_start", "sequence_end", "n", ""]),
    _param, max_size=3,
)  # fmt: skip
_tensor = st.tuples(_text, st.sampled_from(["BYTES", "INT32", "FP32", ""]),
                    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3), _params)  # fmt: skip
_raw = st.lists(st.binary(max_size=12), max_size=3)


def _set_params(target: Any, params: dict[str, Any]) -> None:
    for key, value in params.items():
        p = target[key]
        if value is not None:
            setattr(p, value[0], value[1])


def _fill(msg: Any, model: str, version: str, rid: str, params: dict[str, Any],
          tensors: list[Any], raw: list[bytes], request: bool) -> Any:  # fmt: skip
    msg.model_name, msg.model_version, msg.id = model, version, rid
    _set_params(msg.parameters, params)
    for name, datatype, shape, tparams in tensors:
        t = (msg.inputs if request else msg.outputs).add(name=name, datatype=datatype, shape=shape)
        _set_params(t.parameters, tparams)
    (msg.raw_input_contents if request else msg.raw_output_contents).extend(raw)
    return msg


@st.composite
def _pair(draw: st.DrawFn, kind: str) -> tuple[bytes, bytes]:
    """A message's bytes, and the bytes of the same message with other tensor bytes."""
    fields = (draw(_text), draw(_text), draw(_text), draw(_params), draw(st.lists(_tensor, max_size=3)))
    raws = (draw(_raw), draw(_raw))
    error = draw(_text)
    has_response = draw(st.booleans())
    out = []
    for raw in raws:
        if kind == "request":
            out.append(_fill(pb.ModelInferRequest(), *fields, raw, True).SerializeToString())
            continue
        r = _fill(pb.ModelInferResponse(), *fields, raw, False)
        if kind == "response":
            out.append(r.SerializeToString())
        else:
            s = pb.ModelStreamInferResponse(error_message=error)
            if has_response:
                s.infer_response.CopyFrom(r)
            out.append(s.SerializeToString())
    return out[0], out[1]


_FUNCS: dict[str, tuple[Callable[[bytes, bool], dict[str, Any]], Callable[[bytes, bool], dict[str, Any]]]] = {
    "request": (labels.request_labels, labels.decode_request_labels),
    "response": (labels.response_labels, labels.decode_response_labels),
    "stream": (labels.stream_response_labels, labels.decode_stream_response_labels),
}


def _outcome(fn: Callable[[bytes, bool], dict[str, Any]], body: bytes) -> tuple[str, Any]:
    try:
        return "ok", fn(body, False)
    except Exception as e:  # the relay records str(e) of any decode failure
        return "error", f"{type(e).__name__}: {e}"


def _same(kind: str, body: bytes) -> None:
    """The cached labels equal protobuf's."""
    cached, decode = _FUNCS[kind]
    # Compared by repr: an edited double parameter may decode to NaN, and NaN != NaN (repr keeps
    # every float exactly, so nothing else is loosened).
    want = _outcome(decode, body)
    got = _outcome(cached, body)
    assert repr(got) == repr(want), (got, want)


def _clear() -> None:
    for cache in (labels._requests, labels._responses, labels._stream_responses):
        cache.clear()


_kinds = st.sampled_from(sorted(_FUNCS))


@settings(max_examples=150, deadline=None)
@given(st.data(), _kinds)
def test_cached_labels_equal_protobuf(data: st.DataObject, kind: str) -> None:
    """A miss, then a hit (other tensor bytes), then edited, cut and concatenated bytes after both."""
    _clear()
    first, second = data.draw(_pair(kind))
    _same(kind, first)
    _same(kind, second)
    mask = data.draw(st.integers(1, 255))
    for at in range(len(first)):
        # Every byte edited in turn, with the first message's labels cached: a key that missed
        # any byte outside the tensor bytes would answer an edit with the cached labels.
        _same(kind, first[:at] + bytes([first[at] ^ mask]) + first[at + 1 :])
        _same(kind, first[:at])
    _same(kind, first + second)
    other, _ = data.draw(_pair(kind))
    _same(kind, first + other)
    _same(kind, other + first)


@settings(max_examples=300)
@given(_kinds, st.binary(max_size=40), st.binary(max_size=40))
def test_random_bytes_equal_protobuf(kind: str, a: bytes, b: bytes) -> None:
    """Arbitrary bytes: the same labels or the same error as protobuf, before and after caching."""
    _clear()
    _same(kind, a)
    _same(kind, b)
    _same(kind, a)


def test_key_ignores_only_tensor_bytes() -> None:
    """Responses differing only in tensor bytes share a key; a different id does not (without ``ids``)."""
    def body(rid: str, data: bytes) -> bytes:
        r = pb.ModelInferResponse(model_name="m", id=rid)
        r.outputs.add(name="OUT", datatype="BYTES", shape=[1])
        r.raw_output_contents.append(data)
        return pb.ModelStreamInferResponse(infer_response=r).SerializeToString()

    def key(b: bytes) -> bytes | None:
        return labels.label_key(b, labels.RAW_OUTPUT_TAG, labels.INFER_RESPONSE_TAG)

    assert key(body("a", b"x")) == key(body("a", b"yyyy" * 100)) is not None
    assert key(body("a", b"x")) != key(body("b", b"x"))
    assert labels.label_key(b"\x32", labels.RAW_OUTPUT_TAG) is None  # a cut field: no key


def test_a_nested_message_ends_where_its_length_says() -> None:
    """The nested ``infer_response`` is scanned in place, not copied out: a field running over its end
    into the outer message's next bytes (which would complete it) gives no key, as a cut field does;
    the same bytes with the nested length covering them do give one."""
    def outer(inner: bytes, after: bytes) -> bytes:
        return bytes([labels.INFER_RESPONSE_TAG, len(inner)]) + inner + after

    def key(b: bytes) -> bytes | None:
        return labels.label_key(b, labels.RAW_OUTPUT_TAG, labels.INFER_RESPONSE_TAG)

    model = b"\x0a\x01m"  # model_name "m"; field 15 is not ModelInferResponse's: protobuf keeps it unknown
    for cut, rest in (
        (b"\x78\x80", b"\x01"),  # a varint field whose last byte says "more"
        (b"\x7a\x05ab", b"cde"),  # a length-delimited field whose length runs past the end
        (b"\x79\x00\x00\x00", b"\x00" * 5),  # a fixed64 field with 3 of its 8 bytes
        (b"\x7d\x00", b"\x00" * 3),  # a fixed32 field with 1 of its 4 bytes
        (b"\x32", b"\x00"),  # raw_output_contents: its tag alone
        (b"\xf8", b"\x00\x00"),  # a tag whose varint says "more" (field 15 as 2 bytes, then its value)
    ):
        assert key(outer(model + cut, rest)) is None, cut
        pb.ModelInferResponse.FromString(model + cut + rest)  # what follows would complete it: well-formed
        assert key(outer(model + cut + rest, b"")) is not None, cut


def test_a_new_request_id_is_a_hit_with_its_own_id() -> None:
    """perf_analyzer gives every request its own id: the labels of request and responses of a new
    id come from the cache (no protobuf decode), with that id; a non-UTF-8 id is protobuf's to refuse."""
    def request(rid: bytes) -> bytes:
        r = pb.ModelInferRequest(model_name="m", id="x" * len(rid))
        r.inputs.add(name="IN", datatype="BYTES", shape=[1])
        body = r.SerializeToString()
        return body.replace(b"x" * len(rid), rid)

    def stream(rid: str, final: bool) -> bytes:
        r = pb.ModelInferResponse(model_name="m", id=rid)
        r.parameters["triton_final_response"].bool_param = final
        r.outputs.add(name="OUT", datatype="BYTES", shape=[1])
        r.raw_output_contents.append(rid.encode())
        return pb.ModelStreamInferResponse(infer_response=r).SerializeToString()

    _clear()
    assert labels.request_labels(request(b"req-1"), False)["request_id"] == "req-1"
    assert labels.stream_response_labels(stream("req-1", False), False)["request_id"] == "req-1"
    decoded: list[bytes] = []
    real = (labels.decode_request_labels, labels.decode_stream_response_labels)
    try:
        labels.decode_request_labels = lambda b, t: decoded.append(b) or real[0](b, t)  # type: ignore[assignment,func-returns-value]
        labels.decode_stream_response_labels = lambda b, t: decoded.append(b) or real[1](b, t)  # type: ignore[assignment,func-returns-value]
        got = labels.request_labels(request(b"req-2"), False)
        assert got["request_id"] == "req-2" and got["model"] == "m"
        resp = labels.stream_response_labels(stream("req-2", False), False)
        assert (resp["request_id"], resp["final"]) == ("req-2", False)
        assert decoded == []  # both were hits
    finally:
        labels.decode_request_labels, labels.decode_stream_response_labels = real
    assert _outcome(labels.request_labels, request(b"\xff\xfe-3")) == _outcome(labels.decode_request_labels, request(b"\xff\xfe-3"))
    assert _outcome(labels.request_labels, request(b"\xff\xfe-3"))[0] == "error"


def test_a_unary_response_of_a_new_id_and_other_tensor_bytes_is_a_hit() -> None:
    """ModelInfer's responses too: one differing from an earlier one only in its id and tensor bytes gets
    its labels from the cache (no protobuf decode), with its own id."""
    def response(rid: str) -> bytes:
        r = pb.ModelInferResponse(model_name="m", model_version="1", id=rid)
        r.outputs.add(name="OUT", datatype="BYTES", shape=[1])
        r.raw_output_contents.append(rid.encode() * 3)
        body: bytes = r.SerializeToString()
        return body

    _clear()
    first = labels.response_labels(response("req-1"), False)
    decoded: list[bytes] = []
    real = labels.decode_response_labels
    try:
        labels.decode_response_labels = lambda b, t: decoded.append(b) or real(b, t)  # type: ignore[assignment,func-returns-value]
        got = labels.response_labels(response("req-22"), False)
    finally:
        labels.decode_response_labels = real
    assert decoded == []
    assert got == {**first, "request_id": "req-22"}


def test_a_request_with_other_tensor_bytes_is_a_hit() -> None:
    """The same request with other input bytes (a new prompt, same shape): its labels come from the cache."""
    def request(data: bytes) -> bytes:
        r = pb.ModelInferRequest(model_name="m", model_version="1", id="q")
        r.inputs.add(name="IN", datatype="BYTES", shape=[1])
        r.raw_input_contents.append(data)
        body: bytes = r.SerializeToString()
        return body

    _clear()
    first = labels.request_labels(request(b"a prompt"), False)
    decoded: list[bytes] = []
    real = labels.decode_request_labels
    try:
        labels.decode_request_labels = lambda b, t: decoded.append(b) or real(b, t)  # type: ignore[assignment,func-returns-value]
        got = labels.request_labels(request(b"another, longer prompt"), False)
    finally:
        labels.decode_request_labels = real
    assert (decoded, got) == ([], first)

"""What a gRPC message *says* in Triton terms: model, request id, final flag, outputs, error.

Pure and synchronous: fed the bytes of one message, returns the fields of a ``message`` record.
This is the single place where ``triton_final_response`` is read off the wire.

Messages larger than the proxy's label buffer arrive here cut: protobuf serialisers write fields
in field-number order and Triton puts the tensor bytes last (``raw_input_contents`` = 7,
``raw_output_contents`` = 6), so the complete fields of the prefix still carry every label.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from tritonclient.grpc import service_pb2 as pb

from replay.capture.events import TensorSpec
from replay.capture.methods import INFER, MODEL_NAMED, PREFIX, SERVICE, STREAM_INFER

# Method "kinds" the hot path switches on (ints, not strings, to keep the per-message branch cheap).
OTHER: Final = 0
UNARY_INFER: Final = 1
STREAM: Final = 2


def method_kind(path: str) -> int:
    """Whether ``path`` carries Triton inference messages, and in which shape."""
    if path == STREAM_INFER:
        return STREAM
    if path == INFER:
        return UNARY_INFER
    return OTHER


def varint(buf: bytes, i: int) -> tuple[int, int]:
    """The protobuf varint at ``buf[i]`` and the index after it (IndexError when ``buf`` ends inside it)."""
    shift = value = 0
    while True:
        if i >= len(buf):
            raise IndexError
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def complete_prefix(buf: bytes, stop_field: int, cut: bool = True) -> tuple[bytes, bool]:
    """The longest run of complete top-level fields of ``buf`` before field ``stop_field``.

    Returns ``(prefix, lost)``: ``lost`` says that fields before ``stop_field`` may be missing —
    a field was cut, or ``buf`` (``cut``: known to be cut short) ended before ``stop_field`` began.
    """
    i = 0
    n = len(buf)
    try:
        while i < n:
            start = i
            tag, i = varint(buf, i)
            field, wire = tag >> 3, tag & 7
            if field >= stop_field:
                return buf[:start], False
            if wire == 0:
                _, i = varint(buf, i)
            elif wire == 2:
                length, i = varint(buf, i)
                i += length
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            else:
                return buf[:start], True
            if i > n:
                return buf[:start], True
    except IndexError:
        return buf[:start], True
    return buf, cut


def _params(params: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, p in params.items():
        which = p.WhichOneof("parameter_choice")
        out[key] = getattr(p, which) if which else None
    return out


def decode_request_labels(body: bytes, truncated: bool) -> dict[str, Any]:
    """Fields of a ``message`` record for a ModelInferRequest (unary or stream), decoded by protobuf."""
    lost = False
    if truncated:
        body, lost = complete_prefix(body, 7)
    r = pb.ModelInferRequest.FromString(body)
    params = r.parameters
    out: dict[str, Any] = {
        "model": r.model_name,
        "model_version": r.model_version,
        "request_id": r.id,
        "inputs": [TensorSpec(name=t.name, datatype=t.datatype, shape=list(t.shape)) for t in r.inputs],
    }
    if params:
        p = _params(params)
        out["enable_empty_final"] = p.get("triton_enable_empty_final_response")
        if "sequence_id" in p:
            out["sequence_id"] = p["sequence_id"]
        if "sequence_start" in p:
            out["sequence_start"] = p["sequence_start"]
        if "sequence_end" in p:
            out["sequence_end"] = p["sequence_end"]
    if lost:
        out["decode_error"] = "message larger than the label buffer: some request fields are unknown"
    return out


def model_request_labels(method: str, body: bytes) -> dict[str, Any]:
    """The model (and version) a readiness, metadata, config or repository request names
    (:data:`replay.capture.methods.MODEL_NAMED`), as the fields of its ``message`` record."""
    name_field, version_field = MODEL_NAMED[method]
    rpc = pb.DESCRIPTOR.services_by_name[SERVICE.rsplit(".", 1)[-1]].methods_by_name[method[len(PREFIX) :]]
    r = getattr(pb, rpc.input_type.name).FromString(body)
    out: dict[str, Any] = {"model": getattr(r, name_field) or None}  # (ModelStatistics of "": every model)
    if version_field is not None:
        out["model_version"] = getattr(r, version_field)
    return out


# (name, datatype, shape) -> TensorSpec: a stream's responses repeat the same few output specs, and
# building the frozen record costs more than reading the fields (~1.6 us per tensor per response).
_SPECS: dict[tuple[str, str, tuple[int, ...]], TensorSpec] = {}


def _spec(name: str, datatype: str, shape: tuple[int, ...]) -> TensorSpec:
    key = (name, datatype, shape)
    spec = _SPECS.get(key)
    if spec is None:
        if len(_SPECS) >= 4096:
            _SPECS.clear()
        # Shared between records: never mutated (records are facts, written once).
        spec = _SPECS[key] = TensorSpec(name=name, datatype=datatype, shape=list(shape))
    return spec


def _response_labels(r: Any) -> dict[str, Any]:
    params = r.parameters
    final = None
    if "triton_final_response" in params:
        p = params["triton_final_response"]
        final = p.bool_param if p.WhichOneof("parameter_choice") == "bool_param" else None
    specs = [_spec(o.name, o.datatype, tuple(o.shape)) for o in r.outputs]
    return {
        "model": r.model_name,
        "model_version": r.model_version,
        "request_id": r.id,
        "final": final,
        "outputs": [t.name for t in specs],
        "output_tensors": specs,
    }


def decode_response_labels(body: bytes, truncated: bool) -> dict[str, Any]:
    """Fields of a ``message`` record for a ModelInferResponse (unary), decoded by protobuf."""
    lost = False
    if truncated:
        body, lost = complete_prefix(body, 6)
    out = _response_labels(pb.ModelInferResponse.FromString(body))
    if lost:
        out["decode_error"] = "message larger than the label buffer: some response fields are unknown"
    return out


def decode_stream_response_labels(body: bytes, truncated: bool) -> dict[str, Any]:
    """Fields of a ``message`` record for a ModelStreamInferResponse, decoded by protobuf."""
    if not truncated:
        r = pb.ModelStreamInferResponse.FromString(body)
        out = _response_labels(r.infer_response)
        out["error"] = r.error_message or None
        return out
    # Cut message: error_message (1) is complete or the cut is in it; infer_response (2) is a
    # nested message whose own prefix we label.
    error: str | None = None
    inner = b""
    lost = seen_inner = False
    i = 0
    try:
        while i < len(body):
            tag, i = varint(body, i)
            length, i = varint(body, i)
            chunk = body[i : i + length]
            if tag >> 3 == 1:
                error = chunk.decode("utf-8", "replace") or None
                lost = lost or len(chunk) < length
            elif tag >> 3 == 2:
                seen_inner = True
                inner, cut = complete_prefix(chunk, 6, cut=len(chunk) < length)
                lost = lost or cut
            i += length
    except IndexError:
        lost = True
    # Cut before the response began: its labels (id, final...) are unknown, not empty.
    lost = lost or not seen_inner
    out = _response_labels(pb.ModelInferResponse.FromString(inner))
    out["error"] = error
    if lost:
        out["decode_error"] = "message larger than the label buffer: some response fields are unknown"
    return out


# -- the same labels without decoding every message ------------------------------------------
#
# A stream's responses differ from each other only in their tensor bytes (``raw_output_contents``)
# until the next request: same model, id, parameters and output specs. Labels never read tensor
# bytes, so a message whose every byte outside its tensor bytes equals an earlier message's has
# that message's labels. :func:`label_key` is a minimal protobuf field scanner that walks the
# top-level fields and returns those bytes; a hit skips the protobuf decode and the dict building
# (~7 us -> ~2 us per streamed response). Anything it does not fully understand (a group, a cut or
# malformed field) gets no key and is decoded as before, so every label comes from protobuf once.
#
# The request id is left out of the key too (its bytes are read by the scanner and put into the
# labels of a hit): clients such as perf_analyzer give every request its own id, which made the
# first response of every request, and every request, a miss. protobuf's rules are kept: the last
# occurrence of the id wins, and an id that is not UTF-8 is decoded by protobuf (which refuses it).

#: Tags (field number << 3 | wire type 2) of the tensor-bytes fields whose contents labels never read.
RAW_INPUT_TAG: Final = 7 << 3 | 2  # ModelInferRequest.raw_input_contents (repeated bytes)
RAW_OUTPUT_TAG: Final = 6 << 3 | 2  # ModelInferResponse.raw_output_contents (repeated bytes)
INFER_RESPONSE_TAG: Final = 2 << 3 | 2  # ModelStreamInferResponse.infer_response (ModelInferResponse)
ID_TAG: Final = 3 << 3 | 2  # ModelInferRequest.id and ModelInferResponse.id (string)
_CACHE_MAX: Final = 1024


def label_key(buf: bytes, strip: int, nested: int = 0, ident: int = 0, nested_ident: int = 0,
                 ids: list[bytes] | None = None) -> bytes | None:  # fmt: skip
    """``buf``'s bytes without the contents of its ``strip``-tagged fields, or None when ``buf`` is
    not a well-formed run of fields this scanner reads.

    A ``nested``-tagged field's contents are themselves keyed with ``strip`` (and ``nested_ident``
    as their ``ident``). The contents of ``ident``-tagged fields (a string: the request id) are left
    out too and appended to ``ids`` in wire order. Two messages with the same key differ only in the
    contents of ``strip`` fields (bytes fields: any bytes are valid) and ``ident`` fields (given
    back in ``ids``), so they decode to the same values everywhere else. The key is unambiguous:
    every field is kept as it was on the wire except a ``strip`` or ``ident`` field (its tag alone)
    and a ``nested`` field (its tag, 4 bytes of length, its key).
    """
    return _key(buf, 0, len(buf), strip, nested, ident, nested_ident, ids)


def _key(buf: bytes, i: int, n: int, strip: int, nested: int, ident: int, nested_ident: int,
         ids: list[bytes] | None) -> bytes | None:  # fmt: skip
    """:func:`label_key` of ``buf[i:n]``, read in place: a nested message is scanned where it lies, not
    copied out first (a streamed response's tensor bytes are inside its ``infer_response``: 1 MB of
    them was a 1 MB copy per response). A read past ``n`` (a varint or length running over the end
    of a nested message) lands on ``i > n`` or ``end > n``, which give None, as the end of a copy did."""
    # A measured hot loop (``python -m bench.icount``): one pass over the top-level tags, varints
    # of one byte read inline. Longer than the house limit on purpose.
    parts: list[bytes] = []
    begin = i
    last = i
    try:
        while i < n:
            start = i
            tag = buf[i]
            i += 1
            if tag & 0x80:
                tag, i = varint(buf, start)
                if tag == strip or tag == nested or tag == ident:
                    return None  # an over-long tag would be normalised away: let protobuf judge it
            wire = tag & 7
            if wire == 2:
                length = buf[i]
                i += 1
                if length & 0x80:
                    at = i - 1
                    length, i = varint(buf, at)
                    if i - at > 5 or not buf[i - 1]:
                        return None  # over-long length varints: let protobuf judge them
                end = i + length
                if end > n:
                    return None
                # A tag equal to one of the three is one byte (a longer one returned None above):
                # buf[start] is its byte, kept with what came before it.
                if tag == strip:
                    parts.append(buf[last : start + 1])
                    last = end
                elif tag == ident and ids is not None:
                    ids.append(buf[i:end])
                    parts.append(buf[last : start + 1])
                    last = end
                elif tag == nested:
                    inner = _key(buf, i, end, strip, 0, nested_ident, 0, ids)
                    if inner is None:
                        return None
                    parts.append(buf[last : start + 1])
                    parts.append(len(inner).to_bytes(4, "big"))
                    parts.append(inner)
                    last = end
                i = end
            elif wire == 0:
                while buf[i] & 0x80:
                    i += 1
                i += 1
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            else:
                return None  # groups (deprecated) and invalid wire types: protobuf judges them
            if i > n:
                return None
    except IndexError:
        return None
    if not parts:
        return buf if begin == 0 and n == len(buf) else buf[begin:n]
    parts.append(buf[last:n])
    return b"".join(parts)


_requests: dict[bytes, dict[str, Any]] = {}
_responses: dict[bytes, dict[str, Any]] = {}
_stream_responses: dict[bytes, dict[str, Any]] = {}


def _miss(cache: dict[bytes, dict[str, Any]], key: bytes | None, decode: Any, body: bytes) -> dict[str, Any]:
    """A message's labels decoded by protobuf; cached under ``key`` unless it is None."""
    if key is None:
        out: dict[str, Any] = decode(body, False)
        return out
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    # A raising decode caches nothing: the caller records the error for this message.
    hit = cache[key] = decode(body, False)
    return dict(hit)


def _cached(
    cache: dict[bytes, dict[str, Any]], key: bytes | None, ids: list[bytes], decode: Any, body: bytes
) -> dict[str, Any]:
    hit = cache.get(key) if key is not None else None
    if hit is None:
        return _miss(cache, key, decode, body)
    # A copy: the caller may add or drop fields (payload modes). The lists in it are shared
    # between records, like the tensor specs: records are facts, never mutated.
    out = dict(hit)
    if ids:
        try:
            # protobuf checks every occurrence; the last one is the field's value.
            rid = ""
            for raw in ids:
                rid = raw.decode("utf-8")
        except UnicodeDecodeError:
            return dict(decode(body, False))  # protobuf refuses it: its error, as without the cache
        out["request_id"] = rid
    return out


def _labeler(
    name: str, doc: str, cache: dict[bytes, dict[str, Any]], decode: Any, strip: int, nested: int, ident: int,
    nested_ident: int,
) -> Callable[[bytes, bool], dict[str, Any]]:
    """The labels function of one message type: a cut message decoded by protobuf, a whole one through
    the cache (the scanner and :func:`_cached`; the tags as :func:`label_key` takes them). One frame a
    message: the relay calls it for every message it records."""

    def labels_of(body: bytes, truncated: bool) -> dict[str, Any]:
        if truncated:
            out: dict[str, Any] = decode(body, truncated)
            return out
        ids: list[bytes] = []
        return _cached(cache, label_key(body, strip, nested, ident, nested_ident, ids), ids, decode, body)

    labels_of.__name__ = labels_of.__qualname__ = name
    labels_of.__doc__ = doc
    return labels_of


request_labels = _labeler("request_labels", "Fields of a ``message`` record for a ModelInferRequest (unary or stream).",
                          _requests, decode_request_labels, RAW_INPUT_TAG, 0, ID_TAG, 0)  # fmt: skip
response_labels = _labeler("response_labels", "Fields of a ``message`` record for a ModelInferResponse (unary).",
                           _responses, decode_response_labels, RAW_OUTPUT_TAG, 0, ID_TAG, 0)  # fmt: skip
stream_response_labels = _labeler(
    "stream_response_labels", "Fields of a ``message`` record for a ModelStreamInferResponse.",
    _stream_responses, decode_stream_response_labels, RAW_OUTPUT_TAG, INFER_RESPONSE_TAG, 0, ID_TAG,
)  # fmt: skip

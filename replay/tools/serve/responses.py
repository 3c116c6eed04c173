"""The pure half of ``triton-tap serve``: what to answer, built from captured records.

Messages (``ModelInferResponse``, ``ModelStreamInferResponse``, the other RPCs' answers) rebuilt from
captured :class:`~replay.capture.events.MessageSeen` records, the match key of an incoming request,
and the ``--timing`` rule (which captured call answers a readiness/metadata RPC is
:mod:`replay.tools.serve.pick`'s). Nothing here awaits or touches a socket; :mod:`replay.tools.serve.server`
schedules and sends.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from replay.capture import events as ev
from replay.capture.methods import READINESS, SERVICE
from replay.capture.payload import has_payload, message_bytes
from replay.capture.payload import payload_bytes as stored_bytes
from replay.tools.match import Key, input_hash

_ITEMSIZE = {"BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2, "BF16": 2, "UINT32": 4,
             "INT32": 4, "FP32": 4, "UINT64": 8, "INT64": 8, "FP64": 8}  # fmt: skip


def parse_timing(text: str) -> float | None:
    """``as-captured`` -> 1.0, ``fast`` -> None (no delays), ``xN`` -> N (N times faster than captured)."""
    if text == "as-captured":
        return 1.0
    if text == "fast":
        return None
    if text.startswith("x"):
        try:
            speed = float(text[1:])
        except ValueError:
            speed = math.nan
        if speed > 0 and math.isfinite(speed):
            return speed
    raise ValueError(f"timing must be as-captured, fast or xN with N > 0 (e.g. x2, x0.5): {text!r}")


def delay_s(from_ns: int, to_ns: int, speed: float) -> float:
    """The replayed delay between two captured instants at ``speed`` (negative when ``to_ns`` is earlier)."""
    return (to_ns - from_ns) / 1e9 / speed


def request_key(kind: str, request: Any) -> Key:
    """The match key of an incoming inference request (``kind``: ``stream`` or ``unary``)."""
    return Key(kind=kind, model=request.model_name, request_id=request.id, input_hash=input_hash(request),
               version=request.model_version)


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A request message that does not parse as the method's type (what the deserializer hands on)."""

    size: int
    error: str


def lenient(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """A request deserializer that hands on :class:`Undecodable` instead of raising."""

    # grpc's own handling of a deserializer that raises is a logged traceback and UNKNOWN for the
    # client; the handler answers INVALID_ARGUMENT with one log line instead.
    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as e:
            return Undecodable(len(data), str(e) or type(e).__name__)

    return deserialize


def zeros(spec: ev.TensorSpec) -> bytes:
    """Zero-filled raw contents of a tensor of ``spec`` (BYTES: that many empty strings)."""
    n = math.prod(spec.shape) if spec.shape else 1
    n = max(n, 0)
    if spec.datatype == "BYTES":
        return b"\0\0\0\0" * n  # n empty strings, each a 4-byte zero length
    return bytes(n * _ITEMSIZE.get(spec.datatype, 0))


def has_bytes(rec: ev.MessageSeen) -> bool:
    """The record holds the message's complete bytes as sent, uncompressed (``--payload full``): an HTTP
    body that needs no Content-Encoding. (A gRPC message: :func:`~replay.capture.payload.message_bytes`,
    which inflates a compressed one.)"""
    return has_payload(rec) and not rec.payload_truncated and not rec.compressed


def payload_bytes(rec: ev.MessageSeen) -> bytes:
    """The captured message bytes of a record that :func:`has_bytes` (inline or in its side file)."""
    data = stored_bytes(rec)
    assert data is not None
    return data


def infer_response(rec: ev.MessageSeen) -> tuple[Any, bool]:
    """The ``ModelInferResponse`` of a captured response (unary or inside a stream response), and
    whether its tensor data is real (False: rebuilt from the labels, zero-filled)."""
    r = pb.ModelInferResponse(model_name=rec.model or "", model_version=rec.model_version or "",
                              id=rec.request_id or "")  # fmt: skip
    if rec.final is not None:
        r.parameters["triton_final_response"].bool_param = rec.final
    specs = {t.name: t for t in rec.output_tensors or ()}
    for name in rec.outputs or ():
        spec = specs.get(name)
        if spec is None:  # captured before output tensors were recorded: the name is all we know
            r.outputs.add(name=name)
            continue
        r.outputs.add(name=name, datatype=spec.datatype, shape=spec.shape)
        r.raw_output_contents.append(zeros(spec))
    return r, False


def stream_response(rec: ev.MessageSeen) -> tuple[Any, bool]:
    """The ``ModelStreamInferResponse`` to send for a captured one, and whether its data is real."""
    if (data := message_bytes(rec)) is not None:
        return pb.ModelStreamInferResponse.FromString(data), True
    inner, _ = infer_response(rec)
    return pb.ModelStreamInferResponse(error_message=rec.error or "", infer_response=inner), False


def unary_response(rec: ev.MessageSeen) -> tuple[Any, bool]:
    """The ``ModelInferResponse`` to send for a captured unary response, and whether its data is real."""
    if (data := message_bytes(rec)) is not None:
        return pb.ModelInferResponse.FromString(data), True
    return infer_response(rec)


def other_response(name: str, response_type: Any, rec: ev.MessageSeen) -> Any:
    """The answer of a non-inference RPC ``name`` from its captured response."""
    if (data := message_bytes(rec)) is not None:
        return response_type.FromString(data)
    # Only readiness gets here without bytes: proto3 writes a false bool as nothing, so a
    # non-empty answer was `true`.
    return response_type(**{READINESS[name]: rec.size > 0})


@dataclass(frozen=True, slots=True)
class Kind:
    """Which RPC a captured call's answers are for: its name and response type (None: not served)."""

    name: str | None
    response_type: Any
    inference: bool = False  # ModelStreamInfer or ModelInfer

    @property
    def other(self) -> str | None:
        """The RPC's name when it is served and neither ModelStreamInfer nor ModelInfer."""
        return None if self.inference else self.name


@functools.cache
def answer_kind(method: str) -> Kind:
    """The :class:`Kind` of a captured call's method path (one shared object per method)."""
    service, _, name = method.lstrip("/").rpartition("/")
    rpc = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods_by_name.get(name)
    if service != SERVICE or rpc is None:
        return Kind(None, None)
    return Kind(name, getattr(pb, rpc.output_type.name), name in ("ModelStreamInfer", "ModelInfer"))


def http_answer(kind: str, rec: ev.MessageSeen) -> tuple[bytes | None, bool]:
    """The body (a reply) or the event's JSON (an SSE event) serve sends for a captured HTTP response, and
    whether it is the captured bytes. A meta capture's inference answer is rebuilt from the labels: the error,
    or the id, model and outputs with null (generate) or zero-filled (infer) data; a non-empty non-inference
    answer cannot be rebuilt (None)."""
    if has_payload(rec) and not rec.payload_truncated:
        # Compressed too: an HTTP body is served with its captured headers, Content-Encoding included.
        return payload_bytes(rec), True
    if kind == "other":
        # Health answers are empty bodies: the captured bytes, all none of them (no data rebuilt, nothing to warn
        # of); a metadata or repository answer's bytes are gone (None: refused).
        return (b"", True) if rec.size == 0 else (None, False)
    if rec.error is not None:
        return json.dumps({"error": rec.error}).encode(), False
    if kind.startswith("openai"):
        if rec.final and not rec.outputs:  # how the capture records ``data: [DONE]``
            return b"[DONE]", False
        chunk = {"id": rec.request_id or "", "model": rec.model or "",
                 "choices": [{"index": 0, "finish_reason": rec.finish_reason}]}  # fmt: skip
        return json.dumps(chunk).encode(), False
    body: dict[str, Any] = {}
    if rec.request_id:
        body["id"] = rec.request_id
    body["model_name"] = rec.model or ""
    body["model_version"] = rec.model_version or ""
    if kind == "infer":
        body["outputs"] = [{"name": t.name, "datatype": t.datatype, "shape": t.shape,
                            "data": [0] * math.prod(t.shape) if t.datatype != "BYTES" else [""] * math.prod(t.shape)}
                           for t in rec.output_tensors or ()]  # fmt: skip
    else:
        body.update({name: None for name in rec.outputs or ()})
    return json.dumps(body).encode(), False


def answer_bytes(kind: Kind, rec: ev.MessageSeen) -> tuple[bytes | None, bool]:
    """The serialized answer serve sends for a captured response of a call of ``kind``, and whether it
    is the captured bytes; None when serve does not answer it (not served, or a meta capture's
    metadata/config answer: see :func:`replay.tools.serve.pick.missing_answer`)."""
    if kind.name is None:
        return None, False
    if (data := message_bytes(rec)) is not None:
        return data, True
    if kind.name == "ModelStreamInfer":
        return stream_response(rec)[0].SerializeToString(), False
    if kind.name == "ModelInfer":
        return unary_response(rec)[0].SerializeToString(), False
    if kind.name in READINESS:
        return other_response(kind.name, kind.response_type, rec).SerializeToString(), False
    return None, False

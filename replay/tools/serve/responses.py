"""The pure half of ``triton-tap serve``: what to answer, built from captured records.

Messages (``ModelInferResponse``, ``ModelStreamInferResponse``, the other RPCs' answers) rebuilt from
captured :class:`~replay.capture.events.MessageSeen` records, the match key of an incoming request,
the ``--timing`` rule, and which captured call answers a readiness/metadata RPC. Nothing here awaits
or touches a socket; :mod:`replay.tools.serve.server` schedules and sends.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from replay.capture import events as ev
from replay.tools.captured import CapturedCall
from replay.tools.feed import _DEFAULT_DETAILS
from replay.tools.match import Key, input_hash

# The RPCs whose answer is one bool field, and its name: the only answers a meta capture can rebuild.
READINESS = {"ServerLive": "live", "ServerReady": "ready", "ModelReady": "ready"}
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


def status_details(status: str, details: str | None) -> str:
    """What the client's gRPC would have reported for a status that came without a message."""
    return details if details is not None else _DEFAULT_DETAILS.get(status, "")


def request_key(kind: str, request: Any) -> Key:
    """The match key of an incoming inference request (``kind``: ``stream`` or ``unary``)."""
    return Key(kind=kind, model=request.model_name, request_id=request.id, input_hash=input_hash(request))


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
    """The record holds the message's complete, uncompressed bytes (``--payload full``)."""
    return rec.payload is not None and not rec.payload_truncated and not rec.compressed


def _payload(rec: ev.MessageSeen) -> bytes:
    assert rec.payload is not None
    return base64.b64decode(rec.payload)


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
    if has_bytes(rec):
        return pb.ModelStreamInferResponse.FromString(_payload(rec)), True
    inner, _ = infer_response(rec)
    return pb.ModelStreamInferResponse(error_message=rec.error or "", infer_response=inner), False


def unary_response(rec: ev.MessageSeen) -> tuple[Any, bool]:
    """The ``ModelInferResponse`` to send for a captured unary response, and whether its data is real."""
    if has_bytes(rec):
        return pb.ModelInferResponse.FromString(_payload(rec)), True
    return infer_response(rec)


def other_response(name: str, response_type: Any, rec: ev.MessageSeen) -> Any:
    """The answer of a non-inference RPC ``name`` from its captured response."""
    if has_bytes(rec):
        return response_type.FromString(_payload(rec))
    # Only readiness gets here without bytes: proto3 writes a false bool as nothing, so a
    # non-empty answer was `true`.
    return response_type(**{READINESS[name]: rec.size > 0})


def _same_request(call: CapturedCall, request: Any, wanted: bytes) -> bool | None:
    """Whether ``call`` was asked ``request`` (serialised as ``wanted``); None: its bytes were not captured."""
    if not call.requests or not has_bytes(call.requests[0][1]):
        return None
    parsed = type(request).FromString(_payload(call.requests[0][1]))
    return bool(parsed.SerializeToString(deterministic=True) == wanted)


def pick_other(name: str, calls: Sequence[CapturedCall], request: Any, used: Collection[str]) -> CapturedCall | str:
    """The captured call of RPC ``name`` that answers ``request``, or the NOT_FOUND message why none does.

    A call asked the same request is preferred, then one whose request was not captured; among those,
    the first not ``used`` yet (else the last), so repeated asks walk through the captured answers.
    """
    if not calls:
        return f"triton-tap serve: the capture has no {name} call to answer with"
    wanted = request.SerializeToString(deterministic=True)
    verdicts = [(c, _same_request(c, request, wanted)) for c in calls]
    pool = [c for c, v in verdicts if v is True] or [c for c, v in verdicts if v is None]
    if not pool:
        asked = " ".join(str(request).split()) or "empty request"
        return (f"triton-tap serve: no captured {name} call had this request ({asked}); "
                f"{len(calls)} captured {name} call(s) asked something else")  # fmt: skip
    return next((c for c in pool if c.id not in used), pool[-1])


def missing_answer(name: str, call: CapturedCall) -> str | None:
    """The FAILED_PRECONDITION message when ``call``'s OK answer to ``name`` cannot be rebuilt, else None."""
    ok = call.end is None or call.end.status == "OK"
    if ok and call.responses and name not in READINESS and not has_bytes(call.responses[0].record):
        return (f"triton-tap serve: the capture holds no bytes of the {name} answer (recorded with "
                "--payload meta); record with --payload full to serve it")  # fmt: skip
    return None

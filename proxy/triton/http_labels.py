"""What an HTTP body or server-sent event *says* in Triton terms: model, request id, outputs, error.

Pure and synchronous, the HTTP twin of :mod:`proxy.triton.labels`: fed a request or reply head and
(the kept head of) its body, or one event of a ``text/event-stream`` body, returns the label fields
of a ``message`` record, as :mod:`proxy.triton.labels` does for gRPC (the caller adds ``t_ns``, ``call``,
``dir``, ``index``, ``size`` and ``compressed``, which :func:`compressed` reads off the head: the
relay's ``make_message`` takes those six first and the labels as a dict).

What the real Triton 2.51 HTTP port sends decides the rules here (see docs/capture-format.md, *HTTP
calls*):

- The call's kind, model and version come from its request line through
  :func:`replay.capture.methods.http_call`, never from strings read here.
- Only the JSON part of a body is parsed: with the binary-data extension,
  ``Inference-Header-Content-Length`` gives its length and raw tensor bytes follow it. A gzip or
  deflate body is decompressed for its labels only, and at most :data:`LABEL_CAP` bytes of it; the
  header counts the *uncompressed* JSON (Triton compresses ``/infer`` replies on
  ``Accept-Encoding: gzip``).
- Content-Type is no JSON signal (Triton's route-level errors are JSON sent as ``text/plain``).
- Events are cut from the de-chunked body's bytes (:class:`proxy.triton.sse.SseSplitter`, named here
  too), never from read or chunk boundaries; an event carries no final flag: :func:`event_final` is
  the one rule for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import orjson

from proxy.triton.sse import SseEvent as SseEvent
from proxy.triton.sse import SseSplitter as SseSplitter
from replay.capture.events import EVENT_UNTERMINATED, TensorSpec
from replay.capture.methods import OPENAI, HttpCall, http_call
from replay.capture.payload import decompress_body, http_encoding

#: Headers as an HTTP parser gives them: (name, value) pairs, bytes (h11) or text; names in any case.
Headers = Iterable[tuple[bytes | str, bytes | str]]

#: The most bytes of a body's JSON part (after decompression) that labels read; a bigger JSON part
#: gets a ``decode_error`` instead of labels, so a hostile body costs bounded memory and time.
LABEL_CAP = 1 << 20

_CUT = "message larger than the label buffer: some fields are unknown"
#: Keys of a Triton generate reply or event that are not output tensors.
_GENERATE_ENVELOPE = frozenset({"id", "model_name", "model_version", "error", "parameters"})
_SEQUENCE = ("sequence_id", "sequence_start", "sequence_end")
_PARAM_TYPES = (bool, int, float, str)


def header(headers: Headers, name: str) -> str | None:
    """The value of the last ``name`` header (any case), as text; None when absent."""
    want = name.lower()
    found: str | None = None
    for k, v in headers:
        key = k.decode("latin-1") if isinstance(k, bytes) else k
        if key.lower() == want:
            found = v.decode("latin-1") if isinstance(v, bytes) else v
    return found


def is_event_stream(headers: Headers) -> bool:
    """The reply is server-sent events (``Content-Type: text/event-stream``, any parameters)."""
    ctype = header(headers, "content-type")
    return ctype is not None and ctype.split(";", 1)[0].strip().lower() == "text/event-stream"


def compressed(headers: Headers) -> bool:
    """The body has a Content-Encoding other than identity: the ``message`` record's ``compressed``."""
    return content_encoding(headers) is not None


def content_encoding(headers: Headers) -> str | None:
    """The body's Content-Encoding, lowercased, or None for none/identity (the one rule, which ``serve`` reads a
    request body by too: :func:`replay.capture.payload.http_encoding`)."""
    return http_encoding(headers)


def _json_part(headers: Headers, body: bytes, truncated: bool) -> tuple[Any, bool, str | None]:
    """``(document, compressed, error)``: the JSON part of a body, parsed; the document is None on an error.

    ``truncated``: ``body`` is the kept head of a longer body.
    """
    enc = content_encoding(headers)
    compressed = enc is not None
    plain, cut = body, truncated
    if enc is not None:
        plain, more, why = decompress_body(body, enc, LABEL_CAP)
        if why is not None:
            return None, compressed, why
        cut = cut or more
    icl = header(headers, "inference-header-content-length")
    if icl is not None:
        try:
            n = int(icl.strip())
        except ValueError:
            return None, compressed, f"Inference-Header-Content-Length is not a number: {icl!r}"
        if n < 0 or n > LABEL_CAP:
            return None, compressed, f"Inference-Header-Content-Length {n} is beyond the label buffer"
        if len(plain) < n:
            return None, compressed, _CUT if cut else f"body shorter than Inference-Header-Content-Length {n}"
        plain = plain[:n]  # raw tensor bytes follow: never parsed
    elif cut or len(plain) > LABEL_CAP:
        return None, compressed, _CUT
    if not plain:
        return None, compressed, None
    try:
        doc = orjson.loads(plain)
    except orjson.JSONDecodeError as e:
        return None, compressed, f"body is not JSON: {e}"
    if plain.count(b'"id"') > 1:
        # A key given twice (`{"id": "d1", "id": "d2"}`): Triton's parser takes the first, orjson the last, and
        # the record must name the id Triton used (its replies carry "d1").
        doc = json.loads(plain, object_pairs_hook=_first_wins)
    return doc, compressed, None


def _first_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose repeated keys keep their first value (as rapidjson's FindMember, Triton's)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        out.setdefault(k, v)
    return out


def _param(v: Any) -> Any:
    """A request parameter as recorded: a JSON bool, number or string, else None."""
    return v if type(v) in _PARAM_TYPES else None


def tensor_spec(t: Any) -> TensorSpec | None:
    """The spec of one JSON input or output object (name, datatype, shape); None without a name."""
    if type(t) is not dict or type(t.get("name")) is not str:
        return None
    shape = t.get("shape")
    shape = [d for d in shape if type(d) is int] if type(shape) is list else []
    datatype = t.get("datatype")
    return TensorSpec(name=t["name"], datatype=datatype if type(datatype) is str else "", shape=shape)


def _tensors(items: Any) -> list[TensorSpec]:
    if type(items) is not list:
        return []
    return [spec for spec in map(tensor_spec, items) if spec is not None]


def _text(v: Any) -> str | None:
    return v if type(v) is str else None


def _error_text(doc: Any) -> str | None:
    """The error a JSON reply or event carries: Triton's ``{"error": "..."}``, OpenAI's ``{"error": {"message"}}``
    or ``{"object": "error", "message"}``; None without one."""
    if type(doc) is not dict:
        return None
    err = doc.get("error")
    if type(err) is str:
        return err
    if type(err) is dict:
        msg = err.get("message")
        return msg if type(msg) is str else orjson.dumps(err).decode()
    if err is not None:
        return orjson.dumps(err).decode()
    if doc.get("object") == "error" and type(doc.get("message")) is str:
        return str(doc["message"])
    return None


def _empty_request(call: HttpCall) -> dict[str, Any]:
    return {"model": call.model, "model_version": call.version}


def request_labels(method: str, headers: Headers, body: bytes, *, truncated: bool = False) -> dict[str, Any]:
    """Label fields of the ``c2s`` message of an HTTP request body.

    ``method``: the call's request line (``call_start.method``, e.g. ``POST /v2/models/m/infer``);
    ``headers``: the request's; ``body``: the de-chunked body as sent (maybe compressed), or its
    kept head when ``truncated``. Inference calls get the model and version from the path (OpenAI:
    the body's ``model``), ``request_id`` the JSON ``id`` (``""`` when absent or the body empty; none
    when the body could not be read, which ``decode_error`` says), infer's ``inputs``
    and the raw ``sequence_*`` / ``triton_enable_empty_final_response`` parameters; other endpoints
    the model from the path when there is one and no other label.
    """
    call = http_call(method)
    out: dict[str, Any] = {}
    if call is None:
        return out
    out.update(_empty_request(call))
    if call.kind == "other":
        return out
    if call.kind in OPENAI:
        out["model_version"] = None
    doc, _, why = _json_part(headers, body, truncated)
    if why is not None:
        # An unread body's id is unknown: null, never the "" of a body that has none.
        out["decode_error"] = why
        return out
    if type(doc) is not dict:
        if doc is not None:
            out["decode_error"] = "body is not a JSON object"
        else:
            out["request_id"] = ""
        return out
    out["request_id"] = _id_of(doc)
    if call.kind in OPENAI:
        out["model"] = _text(doc.get("model"))
        return out
    if call.kind == "infer":
        out["inputs"] = _tensors(doc.get("inputs"))
    params = doc.get("parameters")
    if type(params) is dict:
        if "triton_enable_empty_final_response" in params:
            out["enable_empty_final"] = _param(params["triton_enable_empty_final_response"])
        for name in _SEQUENCE:
            if name in params:
                out[name] = _param(params[name])
    return out


def _id_of(doc: dict[str, Any]) -> str | None:
    """A JSON body's ``id``: ``""`` when it has none (as Triton's default), None when it is not a string
    (``{"id": 5}``: Triton refuses it, and the record must not say the request had no id)."""
    if "id" not in doc:
        return ""
    rid = doc["id"]
    return rid if type(rid) is str else None


def _triton_reply(doc: dict[str, Any], kind: str) -> dict[str, Any]:
    """Labels of a Triton infer or generate reply, or of one generate_stream event, from its JSON."""
    out: dict[str, Any] = {
        "model": _text(doc.get("model_name")),
        "model_version": _text(doc.get("model_version")),
        "request_id": _id_of(doc),
        "error": _error_text(doc),
    }
    if kind == "infer":
        specs = _tensors(doc.get("outputs"))
        out["outputs"] = [t.name for t in specs]
        out["output_tensors"] = specs
    else:
        # generate's JSON carries each output's values by name, without datatype or shape.
        out["outputs"] = [k for k in doc if k not in _GENERATE_ENVELOPE]
    return out


def _openai_reply(doc: dict[str, Any]) -> dict[str, Any]:
    """Labels of an OpenAI completion, chat completion or one of their stream chunks."""
    choices = doc.get("choices")
    finish = None
    if type(choices) is list:
        for choice in choices:
            if type(choice) is dict and type(choice.get("finish_reason")) is str:
                finish = choice["finish_reason"]
                break
    return {
        "model": _text(doc.get("model")),
        "request_id": _id_of(doc),
        "outputs": ["choices"] if type(choices) is list and choices else [],
        "error": _error_text(doc),
        "finish_reason": finish,
    }


def _reply_doc(call: HttpCall, doc: Any) -> dict[str, Any]:
    if type(doc) is not dict:
        return {"decode_error": "body is not a JSON object"} if doc is not None else {}
    if call.kind in OPENAI:
        return _openai_reply(doc)
    return _triton_reply(doc, call.kind)


def reply_labels(method: str, status: int, headers: Headers, body: bytes, *, truncated: bool = False) -> dict[str, Any]:
    """Label fields of the ``s2c`` message of an HTTP reply body that is not an event stream.

    ``method``: the call's request line; ``status``: the reply's status code; ``headers``: the
    reply's; ``body``: the de-chunked body as sent, or its kept head when ``truncated``. Inference
    calls: ``model`` / ``model_version`` / ``request_id`` from the JSON (``model_name``,
    ``model_version``, the echoed ``id``; ``""`` when absent), ``outputs`` (and, for infer,
    ``output_tensors``), ``error``; ``final`` stays null (a unary reply). Other endpoints: only the
    JSON ``error`` of a reply with status 400 or more.
    """
    call = http_call(method)
    out: dict[str, Any] = {}
    if call is None or (call.kind == "other" and status < 400):
        return out
    doc, _, why = _json_part(headers, body, truncated)
    if why is not None:
        out["decode_error"] = why
        return out
    if call.kind == "other":
        out["error"] = _error_text(doc)
        return out
    out.update(_reply_doc(call, doc))
    return out


#: Characters of an ``event: error``'s data kept as its error text when the data names no error itself.
ERROR_EVENT_CAP = 1000


def event_labels(method: str, event: SseEvent) -> dict[str, Any]:
    """Label fields of the ``s2c`` message of one event (``final`` left to :func:`event_final`).

    Triton ``generate_stream``: the event's JSON as a generate reply (``outputs`` its tensor keys,
    ``id``, ``model_name``, ``model_version``; an error event carries ``{"error"}`` alone, so its
    model is null and its ``request_id`` ``""``). OpenAI chunks: ``id``, ``model``,
    ``choices[].finish_reason``, ``error``. ``[DONE]`` (OpenAI only): ``outputs`` ``[]`` and nothing else.
    An event of type ``error`` (``event: error``) is an error: its data's own error text, else its data.
    An ``unterminated`` one: labelled if its data parses, with
    :data:`~replay.capture.events.EVENT_UNTERMINATED` as its ``decode_error``.
    """
    out = _event_labels(method, event)
    if event.event == "error" and not out.get("error"):
        # An event of type `error` is one whatever its data holds (servers that speak SSE's types
        # say so; Triton's own error events are data: {"error": ...}): never read as a response.
        out["error"] = event.data[:ERROR_EVENT_CAP] or "an event of type error, without data"
    if event.unterminated:
        known = out.get("decode_error")
        out["decode_error"] = EVENT_UNTERMINATED if not known else f"{EVENT_UNTERMINATED}; {known}"
    return out


def _event_labels(method: str, event: SseEvent) -> dict[str, Any]:
    call = http_call(method)
    if event.done and call is not None and call.kind in OPENAI:
        return {"request_id": "", "outputs": []}
    if event.truncated:
        return {"decode_error": _CUT}
    try:
        doc = orjson.loads(event.data)
    except orjson.JSONDecodeError as e:
        return {"decode_error": f"event data is not JSON: {e}"}
    if call is None:
        return {}
    if call.kind not in OPENAI and type(doc) is dict:
        return _triton_reply(doc, "generate_stream")
    return _reply_doc(call, doc)


def event_final(method: str, event: SseEvent, *, last: bool, clean_end: bool) -> bool:
    """The one rule for an event's ``final``: an event carries no final flag, so it is true on an OpenAI
    ``[DONE]`` and on the last event of a body that ended cleanly (its chunked terminator, or its
    Content-Length reached), false on every other event, on the last event of a body cut short, and on
    an ``unterminated`` one (even ``[DONE]``: a client discards it, so it signalled nothing to the client;
    and the event before it is not the last, data came after it). ``[DONE]`` ends only an OpenAI
    stream (``method``): Triton's ``generate_stream`` has no such event, so there it is data like any.

    ``last``: no event followed it in the body; ``clean_end``: the body ended cleanly.
    """
    return not event.unterminated and ((event.done and _openai(method)) or (last and clean_end))


def _openai(method: str) -> bool:
    call = http_call(method)
    return call is not None and call.kind in OPENAI

"""The methods a capture names (gRPC paths and HTTP request lines), and the one rule for reading them.

A capture records the method whole (``call_start.method``); people read the short name. One rule for
every output (``check --json``, metrics, the report, ``serve``'s log):

- gRPC: a method of Triton's own service is shown by its name alone (``ModelInfer``), any other path
  stays whole (``/grpc.health.v1.Health/Check``), so two services' ``Check`` never look the same.
- HTTP: ``call_start.method`` is the request method and target as sent (``POST /v2/models/m/infer``).
  Inference endpoints are shown by their kind (``HTTP infer``, ``HTTP generate_stream``,
  ``OpenAI chat/completions``; the model is a label of its own), any other endpoint by its method
  and path without the query (``GET /v2/health/ready``).

Which kind an HTTP call is, whether it carries inference and whether its reply streams are decided
here and nowhere else: tools ask :func:`http_call`, :func:`is_inference` and :func:`streaming`, never
the strings themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from replay.capture.events import Protocol

#: Triton's gRPC service, as grpc names it (``grpc.method_handlers_generic_handler``).
SERVICE = "inference.GRPCInferenceService"
#: The prefix of every method path of :data:`SERVICE`.
PREFIX = f"/{SERVICE}/"
STREAM_INFER = PREFIX + "ModelStreamInfer"
INFER = PREFIX + "ModelInfer"
#: The two methods that carry inference requests (what the request machine tracks).
INFERENCE = frozenset({STREAM_INFER, INFER})
#: The RPCs whose request names one model: the request's fields of its name and of its version (None: it
#: names none). The proxy records the model (and version) of these requests as it does an inference
#: request's, so that ``serve`` and ``diff`` tell one model's readiness, metadata or config from another's
#: in a capture without the request bytes.
MODEL_NAMED: dict[str, tuple[str, str | None]] = {
    PREFIX + "ModelReady": ("name", "version"),
    PREFIX + "ModelMetadata": ("name", "version"),
    PREFIX + "ModelConfig": ("name", "version"),
    PREFIX + "ModelStatistics": ("name", "version"),
    PREFIX + "RepositoryModelLoad": ("model_name", None),
    PREFIX + "RepositoryModelUnload": ("model_name", None),
}
#: The RPCs (short names) whose answer is one bool field, and its name: proto3 writes a false bool as
#: nothing, so the answer's size says it (a compressed answer's does not).
READINESS: dict[str, str] = {"ServerLive": "live", "ServerReady": "ready", "ModelReady": "ready"}
#: What a call whose ``call_start`` was not read (its line damaged, or in a file retention removed or
#: not given) is shown as: its messages are read as a ModelStreamInfer stream's (the only call long
#: enough to outlive a rotation in practice), but its method is not claimed.
START_NOT_READ = "(call_start not read)"

#: What an HTTP call is, from its request line alone.
#: ``infer``: KServe v2 ``POST /v2/models/{m}[/versions/{v}]/infer`` (one JSON or binary reply);
#: ``generate``: ``POST .../generate`` (one JSON reply); ``generate_stream``: ``POST .../generate_stream``
#: (server-sent events, one per Triton response); ``openai_completions`` / ``openai_chat``: ``POST
#: /v1/completions`` / ``POST /v1/chat/completions`` (server-sent events when the request says
#: ``"stream": true``, else one JSON reply); ``other``: health, metadata, repository, shared memory,
#: anything else (a call, not an inference request).
HttpKind = Literal["infer", "generate", "generate_stream", "openai_completions", "openai_chat", "other"]

#: The HTTP kinds whose calls carry one inference request each.
HTTP_INFERENCE: frozenset[HttpKind] = frozenset(
    {"infer", "generate", "generate_stream", "openai_completions", "openai_chat"}
)
#: The OpenAI-compatible kinds (their request body names the model; their stream ends with ``data: [DONE]``).
OPENAI: frozenset[HttpKind] = frozenset({"openai_completions", "openai_chat"})

_ACTIONS: dict[str, HttpKind] = {"infer": "infer", "generate": "generate", "generate_stream": "generate_stream"}
_OPENAI_PATHS: dict[str, HttpKind] = {"/v1/completions": "openai_completions", "/v1/chat/completions": "openai_chat"}
_SHORT: dict[HttpKind, str] = {
    "infer": "HTTP infer",
    "generate": "HTTP generate",
    "generate_stream": "HTTP generate_stream",
    "openai_completions": "OpenAI completions",
    "openai_chat": "OpenAI chat/completions",
}


@dataclass(frozen=True, slots=True)
class HttpCall:
    """An HTTP call's request line, read: what it is and what its path names."""

    verb: str
    #: The target as sent (query included).
    target: str
    #: The target's path: no query, not percent-decoded.
    path: str
    kind: HttpKind
    #: ``/v2/models/{m}/...``: the model, percent-decoded; else None.
    model: str | None
    #: ``/v2/models/{m}/versions/{v}/...``: the version; ``""`` on a model path without one; else None.
    version: str | None


def protocol(method: str) -> Protocol:
    """``grpc`` for a gRPC method path (it starts with ``/``), ``http`` for an HTTP request line (``VERB target``).

    The same answer as ``call_start.protocol``, for tools that hold only the method.
    """
    return "grpc" if method.startswith("/") or method == START_NOT_READ else "http"


def http_call(method: str) -> HttpCall | None:
    """``POST /v2/models/m/versions/2/infer`` read as an :class:`HttpCall`; None for a gRPC path or no request line."""
    verb, sep, target = method.partition(" ")
    if not sep or not verb or not target or protocol(method) == "grpc":
        return None
    path = target.split("?", 1)[0].split("#", 1)[0]
    parts = path.split("/")
    model = version = None
    kind: HttpKind = "other"
    # parts[0] is "" (the path's leading slash): /v2/models/{m}[/versions/{v}][/action]. The model and
    # version as written: Triton does not percent-decode them (`/v2/models/pct%41/infer` is model "pct%41",
    # and `sp%20ace` is refused as unknown model 'sp%20ace'), so a decoded name would be a model it never served.
    if len(parts) >= 4 and parts[0] == "" and parts[1] == "v2" and parts[2] == "models" and parts[3]:
        model = parts[3]
        rest = parts[4:]
        version = ""
        if len(rest) >= 2 and rest[0] == "versions":
            version = rest[1]
            rest = rest[2:]
        if verb == "POST" and len(rest) == 1 and rest[0] in _ACTIONS:
            kind = _ACTIONS[rest[0]]
    elif verb == "POST" and path in _OPENAI_PATHS:
        kind = _OPENAI_PATHS[path]
    return HttpCall(verb=verb, target=target, path=path, kind=kind, model=model, version=version)


def http_kind(method: str) -> HttpKind | None:
    """The :data:`HttpKind` of an HTTP request line, None for a gRPC path."""
    call = http_call(method)
    return call.kind if call is not None else None


def is_inference(method: str) -> bool:
    """The call carries Triton inference requests (gRPC ModelInfer/ModelStreamInfer, HTTP infer, generate, OpenAI)."""
    if protocol(method) == "grpc":
        return method in INFERENCE or method == START_NOT_READ
    return http_kind(method) in HTTP_INFERENCE


def streaming(method: str) -> bool | None:
    """Whether the call's replies are a stream: True for ModelStreamInfer and ``generate_stream``, False for
    every other gRPC method and HTTP endpoint, None for the OpenAI endpoints (their request's ``"stream"``
    decides: the reply's ``text/event-stream`` content type says which it was)."""
    if protocol(method) == "grpc":
        return method == STREAM_INFER or method == START_NOT_READ
    kind = http_kind(method)
    if kind in OPENAI:
        return None
    return kind == "generate_stream"


def short_method(method: str) -> str:
    """The short name of a method for every output.

    ``/inference.GRPCInferenceService/ModelInfer`` -> ``ModelInfer``; other gRPC services stay whole;
    ``POST /v2/models/m/generate_stream`` -> ``HTTP generate_stream``; ``POST /v1/completions`` ->
    ``OpenAI completions``; other HTTP endpoints -> method and path (``GET /v2/health/ready``).
    """
    call = http_call(method)
    if call is None:
        return method.removeprefix(PREFIX)
    return _SHORT.get(call.kind, f"{call.verb} {call.path}")


def path_of(name: str) -> str:
    """``ModelInfer`` -> ``/inference.GRPCInferenceService/ModelInfer`` (the inverse of :func:`short_method` for gRPC)."""
    return PREFIX + name

"""Capture records as past-tense facts: the one source of truth of the capture format.

Every line of a capture file is one of these events, serialised as a JSON object with three
envelope fields added by the writer (``v``, ``seq``, ``kind``). The dataclass fields below are the
record's fields, in order; a field's default (or null, for a nullable field without one) is what a
reader fills in when a sparse line omits it (see :mod:`replay.capture.schema`); the ``Annotated`` text is the field's documentation, from which the
records section of docs/capture-format.md is generated (``python -m replay.capture.formatdoc --markdown``),
so code and docs cannot drift apart.

The proxy builds these on the hot path and the writer hands them to orjson as they are (orjson
serialises slotted dataclasses natively), so they stay plain: no methods, no validation here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

Direction = Literal["c2s", "s2c"]

#: Which port a call came in on: Triton's gRPC service (HTTP/2) or its HTTP/1.x endpoint.
Protocol = Literal["grpc", "http"]

#: A Triton request parameter as the client sent it (bool, int64/uint64, double or string parameter):
#: request parameters are recorded raw, so a client that sends `sequence_start` as an int is evidence too.
ParamValue = bool | int | float | str

#: Why a call ended. One place defines the vocabulary; ``proxy.triton.causes`` decides which applies.
Cause = Literal[
    "ok",
    "error",
    "client_cancel",
    "deadline",
    "client_disconnect",
    "upstream_disconnect",
    "proxy_shutdown",
    "proxy_error",
]

#: gRPC status code -> name, as the capture writes it.
STATUS_NAMES: dict[int, str] = {
    0: "OK",
    1: "CANCELLED",
    2: "UNKNOWN",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND",
    6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED",
    8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION",
    10: "ABORTED",
    11: "OUT_OF_RANGE",
    12: "UNIMPLEMENTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
    15: "DATA_LOSS",
    16: "UNAUTHENTICATED",
}

#: The status a client is left with when the call ended without an upstream status.
STATUS_FOR_CAUSE: dict[str, str] = {
    "client_cancel": "CANCELLED",
    "client_disconnect": "CANCELLED",
    "deadline": "DEADLINE_EXCEEDED",
    "upstream_disconnect": "UNAVAILABLE",
    "proxy_shutdown": "UNAVAILABLE",
    "proxy_error": "INTERNAL",
}

#: HTTP/2 RST_STREAM code -> gRPC status, as gRPC maps a reset: a client reads an upstream reset
#: without trailers so, and a gRPC client resets with the code of the status it ended with.
RST_TO_STATUS: dict[int, str] = {
    0x0: "INTERNAL",  # NO_ERROR before any status is a broken response
    0x7: "UNAVAILABLE",  # REFUSED_STREAM: never processed
    0x8: "CANCELLED",
    0xB: "RESOURCE_EXHAUSTED",  # ENHANCE_YOUR_CALM
    0xC: "PERMISSION_DENIED",  # INADEQUATE_SECURITY
}


def client_reset_status(cause: str, rst_code: int | None) -> str | None:
    """The status a ``client_cancel`` by RST_STREAM ``rst_code`` left its client with, when not ``CANCELLED``.

    A gRPC client resets with the code of the status it ended with: ENHANCE_YOUR_CALM is its own
    RESOURCE_EXHAUSTED (a response over its receive limit), which is no cancel of its caller's.
    CANCEL and NO_ERROR are a cancel; a code gRPC gives no status is INTERNAL, as gRPC reads it.
    None: the cause's own status (``STATUS_FOR_CAUSE``) is the one."""
    if cause != "client_cancel" or rst_code is None or rst_code == 0x8 or rst_code == 0x0:
        return None
    return RST_TO_STATUS.get(rst_code, "INTERNAL")


def cancel_status(cause: str, rst_code: int | None) -> str:
    """The status a call ended by a cancel-like event of ``cause`` (``CallCancelled``) left its client with:
    its RST's code's (``client_reset_status``), else the cause's own (``STATUS_FOR_CAUSE``; UNKNOWN for a
    cause this version does not know)."""
    return client_reset_status(cause, rst_code) or STATUS_FOR_CAUSE.get(cause, "UNKNOWN")


@dataclass(frozen=True, kw_only=True, slots=True)
class CaptureStarted:
    """The proxy opened a capture and is about to accept connections."""

    kind: ClassVar[str] = "capture_start"
    t_ns: Annotated[int, "unix epoch nanoseconds when the event was observed"]
    proxy_version: Annotated[str, "triton-tap version that wrote the capture"]
    listen: Annotated[str, "HOST:PORT the proxy listens on for gRPC (`\"\"` when it relays HTTP only)"]
    upstream: Annotated[str, "HOST:PORT of the Triton server's gRPC port (`\"\"` when it relays HTTP only)"]
    options: Annotated[dict[str, Any], "recording options in force (payload mode, byte cap, rotation, drain timeout), "
                       "the event loop (`event_loop`), and which compiled modules ran (`compiled`: module name -> "
                       "`compiled`, or why its Python ran: `TRITON_TAP_PURE=1`, `not built`, `stale build: ...`)"]
    file_index: Annotated[int, "0 for the first file of a capture, n for the n-th rotated file"] = 0
    capture_set: Annotated[
        str | None, "`record --workers`: the capture set's name (`capture-<stamp>-<pid>`), shared by its workers, else null"
    ] = None
    worker: Annotated[int | None, "`record --workers`: which worker (0-based) wrote this file's chain, else null"] = None
    workers: Annotated[int | None, "`record --workers`: how many workers the set has, else null"] = None
    http_listen: Annotated[str | None, "HOST:PORT the proxy listens on for HTTP, null when it relays no HTTP"] = None
    http_upstream: Annotated[str | None, "HOST:PORT of the Triton server's HTTP port, null when it relays no HTTP"] = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CallStarted:
    """A client opened a call through the proxy: an RPC (HTTP/2 stream), or one HTTP/1.x request/response exchange."""

    kind: ClassVar[str] = "call_start"
    t_ns: Annotated[int, "unix epoch nanoseconds when the event was observed"]
    call: Annotated[
        str,
        "unique id of the call within the capture: gRPC `<conn>.<stream id>`; HTTP `<conn>.<n>`, n = 1, 2, ... "
        "the exchange's ordinal on its client connection",
    ]
    conn: Annotated[str, "downstream (client) connection id, unique within the capture (both ports share the ids)"]
    method: Annotated[
        str,
        "gRPC: the full method path, e.g. `/inference.GRPCInferenceService/ModelStreamInfer`; HTTP: the request "
        "method and target as sent, e.g. `POST /v2/models/tokens/generate_stream` (query kept); "
        "`replay.capture.methods` reads both",
    ]
    peer: Annotated[str, "client address HOST:PORT"]
    metadata: Annotated[
        list[list[str]],
        "request headers as [name, value] pairs in wire order (gRPC: pseudo-headers included; HTTP: names "
        "lowercased, values as sent); values of authorization-like keys replaced by `<redacted>`; `-bin` "
        "values as sent (base64 text)",
    ]
    timeout_ms: Annotated[
        float | None,
        "deadline from `grpc-timeout` in milliseconds, or null (always null on HTTP: it has no deadline header; "
        "a body's `parameters.timeout` is a request parameter, not a deadline)",
    ]
    client_subject: Annotated[
        str | None,
        "`--tls-client-ca`: subject of the client certificate the proxy verified at the handshake "
        "(RFC 4514 form, e.g. `CN=batch-client,O=team`; never the certificate itself), else null",
    ] = None
    protocol: Annotated[Protocol, "`grpc` or `http`: which of Triton's ports the call is for"] = "grpc"
    http_version: Annotated[str | None, "HTTP calls: the request's HTTP version (`1.1`, `1.0`); gRPC: null"] = None


@dataclass(frozen=True, kw_only=True, slots=True)
class TensorSpec:
    """Name, datatype and shape of one tensor of a request or response (no data)."""

    kind: ClassVar[str] = "tensor"
    name: Annotated[str, "tensor name"]
    datatype: Annotated[str, "Triton datatype, e.g. `BYTES`, `INT32`"]
    shape: Annotated[list[int], "shape"]
    size: Annotated[
        int | None, "`--redact-input` only: bytes of the tensor's data the capture does not hold, else null"
    ] = None
    hmac_sha256: Annotated[
        str | None,
        "`--redact-input` only: hex HMAC-SHA256 of the tensor's data keyed with the redaction salt "
        "(equal data, equal salt: equal value; the data itself is cut from `payload`), else null",
    ] = None


#: ``--payload none`` keeps that a response carried an in-band error, not its text: its ``error`` is this.
NONE_ERROR_TEXT = "(error text not recorded: --payload none)"
#: HTTP: the ``decode_error`` of a body record whose bytes are not the whole body begins with this
#: (so a tool can tell such a record from a whole body: ``replay send`` must not re-send it as one).
PARTIAL_BODY = "partial body"
#: A body the connection's loss ended before its end (the request's client went away, or Triton
#: closed mid-reply): the record holds the bytes that arrived.
BODY_CUT = f"{PARTIAL_BODY}: cut short, the connection ended before the body did"
#: A request body that had not ended when Triton's reply to it was recorded (Triton answered early):
#: the record holds the bytes that had arrived; the rest, if any came, is the call's next ``c2s`` record.
BODY_BEFORE_REPLY = f"{PARTIAL_BODY}: the request body had not ended when Triton's reply was recorded"
#: The rest of a request body after Triton's early reply (the call's previous ``c2s`` record holds its start).
BODY_REST = f"{PARTIAL_BODY}: the rest of the request body after Triton's early reply"
#: gRPC: a message the call's end cut (a request still uploading when Triton ended the call, a response still
#: arriving when the upstream reset the stream, a cancel or a lost connection mid-message): the record holds the
#: bytes that arrived, and its ``size`` counts them. Its receiver never had it whole: no request, no response.
MESSAGE_CUT = f"{PARTIAL_BODY}: the call ended before the gRPC message did"
#: An event-stream body's bytes after its last blank line when the body ended: no event by the SSE
#: rules (a browser's EventSource discards it), recorded so its bytes are counted; ``final`` false.
EVENT_UNTERMINATED = "event not terminated by a blank line before the body ended (an SSE client discards it)"
#: ``call_end.details`` of an HTTP call Triton answered in full after the client's FIN: a client that closed
#: and one that only half-closed (still reading) send the same FIN.
HALF_CLOSE_ANSWERED = (
    "the client closed its writing side (TCP FIN, passed on to Triton) before the reply ended; the reply "
    "was passed on, whether the client still read it the wire does not show"
)
#: ``call_end.details`` of an HTTP call Triton cut after the client's FIN, which the proxy had passed on (a client
#: that closed and one that only half-closed send the same FIN): the end was Triton's close, not the client's.
HALF_CLOSE_DETAILS = (
    "the client closed its writing side (TCP FIN, passed on to Triton); Triton then closed the connection"
)


def partial_body(decode_error: str | None) -> bool:
    """The message record's bytes are not a whole HTTP body (see :data:`PARTIAL_BODY`)."""
    return decode_error is not None and decode_error.startswith(PARTIAL_BODY)


def message_cut(decode_error: str | None) -> bool:
    """gRPC: the message record is what arrived of a message the call's end cut (:data:`MESSAGE_CUT`), a request
    the upstream never had whole or a response no client had whole."""
    return decode_error is not None and decode_error.startswith(MESSAGE_CUT)


def never_received(decode_error: str | None) -> bool:
    """The message record's bytes are nothing a client received as a whole: a body the connection's end
    cut (:data:`PARTIAL_BODY`), or an event no blank line ended (:data:`EVENT_UNTERMINATED`: an SSE
    reader drops it)."""
    return decode_error is not None and decode_error.startswith((PARTIAL_BODY, EVENT_UNTERMINATED))


def ends_whole(decode_error: str | None) -> bool:
    """The record ends a message, body or event its receiver had whole: any record but those of
    :func:`never_received`, and of those the rest of a request body Triton answered early (:data:`BODY_REST`
    exactly: its start is the call's previous record, and the body ended)."""
    return decode_error is None or decode_error == BODY_REST or not never_received(decode_error)


def ends_cut(decode_error: str | None) -> bool:
    """The record ends a message, body or event its receiver never had whole (a call's or connection's end cut
    it, or no blank line ended the event); not the start of a body Triton answered early, whose rest follows."""
    return decode_error is not None and not ends_whole(decode_error) and not decode_error.startswith(BODY_BEFORE_REPLY)


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageSeen:
    """One complete message crossed the proxy in one direction: a gRPC message, or on HTTP a request body, a reply body or one server-sent event."""

    kind: ClassVar[str] = "message"
    #: Sparse encoding (schema 3): on an `s2c` message these fields are omitted when equal to the
    #: previous `s2c` message of the same call in the same file (readers carry them forward).
    sticky: ClassVar[tuple[str, ...]] = ("model", "model_version", "outputs", "output_tensors")
    t_ns: Annotated[int, "unix epoch nanoseconds when the last byte of the message was observed"]
    call: Annotated[str, "the RPC"]
    dir: Annotated[Direction, "`c2s` (client to server) or `s2c`"]
    index: Annotated[int, "0-based message index per call and direction"]
    size: Annotated[
        int,
        "bytes of the serialized message (without the 5-byte gRPC prefix); HTTP: the body after de-chunking, as "
        "sent (not decompressed), or the event's bytes (its `data:` lines and the blank line ending it)",
    ]
    compressed: Annotated[
        bool,
        "the gRPC compressed flag (`grpc-encoding` gzip and deflate messages are decompressed for their labels, "
        "their payload kept as sent; another encoding is not decoded); HTTP: a `Content-Encoding` other than "
        "identity (gzip and deflate bodies are decompressed for their labels)",
    ] = False
    model: Annotated[
        str | None,
        "Triton `model_name` (inference messages); the model a `ModelReady`, `ModelMetadata`, `ModelConfig`, "
        "`ModelStatistics`, `RepositoryModelLoad` or `RepositoryModelUnload` request names; else null; HTTP requests: from the path "
        "(`/v2/models/{m}/...`), OpenAI requests: the body's `model`; HTTP replies and events: their JSON's "
        "`model_name` (OpenAI: `model`), null when absent (error events)",
    ] = None
    model_version: Annotated[
        str | None,
        "Triton `model_version` as sent (empty final responses carry `\"\"`; a model-naming request above: its "
        "`version`); HTTP requests: from the path "
        "(`/versions/{v}`, `\"\"` without one); HTTP replies and events: their JSON's, null when absent",
    ] = None
    request_id: Annotated[
        str | None,
        "Triton request `id` (`\"\"` when unset; HTTP: the JSON `id`, `\"\"` when absent, null when it is not a "
        "string or the body was not read, OpenAI chunks: the server's `id`); null for non-inference messages",
    ] = None
    final: Annotated[
        bool | None,
        "responses: the raw `triton_final_response` parameter, null when absent; requests: null; HTTP "
        "server-sent events: true on the last event of a body that ended cleanly (chunked terminator) and on "
        "an OpenAI `data: [DONE]`, false on every other event; HTTP reply bodies: null",
    ] = None
    outputs: Annotated[
        list[str] | None,
        "responses: output names, `[]` for an empty response (HTTP: the JSON's output names; generate events: "
        "their tensor keys; OpenAI chunks: `[\"choices\"]`, `[]` for `[DONE]`)",
    ] = None
    output_tensors: Annotated[
        list[TensorSpec] | None,
        "responses: output tensors (name, datatype, shape) in `outputs` order, so `serve` can answer "
        "`meta` captures with data of the right shape; null where the wire does not say them (HTTP "
        "generate and OpenAI JSON carry values without datatype)",
    ] = None
    error: Annotated[
        str | None,
        "ModelStreamInfer responses: the in-band `error_message`; HTTP replies and events: the JSON `error` "
        "(OpenAI: its `message`); else null",
    ] = None
    enable_empty_final: Annotated[
        ParamValue | None, "requests: the raw `triton_enable_empty_final_response` parameter, null when absent"
    ] = None
    sequence_id: Annotated[ParamValue | None, "requests: `sequence_id` parameter when present"] = None
    sequence_start: Annotated[ParamValue | None, "requests: `sequence_start` parameter when present"] = None
    sequence_end: Annotated[ParamValue | None, "requests: `sequence_end` parameter when present"] = None
    inputs: Annotated[list[TensorSpec] | None, "requests: input tensors (name, datatype, shape)"] = None
    payload_sha256: Annotated[
        str | None, "`--payload full`: hex SHA-256 of the whole serialized message (for replay matching)"
    ] = None
    payload: Annotated[
        str | None,
        "`--payload full`: the serialized message, base64 (cut at the byte cap), when its line holds it "
        "(under 1 KiB stored, or any size with `--payload-store inline`), else null",
    ] = None
    payload_at: Annotated[
        list[int] | None,
        "`--payload full`: `[offset, length]` of the serialized message's bytes (cut at the byte cap) in "
        "the capture file's side file (`<name>.payload`: raw bytes, 1 KiB or more stored, default "
        "`--payload-store side`), else null",
    ] = None
    payload_truncated: Annotated[bool | None, "`--payload full`: true when the stored bytes (`payload` or `payload_at`) were cut at the byte cap"] = None
    decode_error: Annotated[
        str | None,
        "why the message could not be decoded as the method's type, else null; HTTP: begins with `partial body` "
        "when the record's bytes are not the whole body (cut short by a lost connection, or a request body "
        "split by Triton's early reply), and says so for an event-stream body's unterminated last event; gRPC: "
        "begins with `partial body` for a message the call's end cut (the bytes that arrived, never labelled)",
    ] = None
    finish_reason: Annotated[
        str | None, "OpenAI replies and chunks: the first non-null `choices[].finish_reason`, else null"
    ] = None


@dataclass(frozen=True, kw_only=True, slots=True)
class HalfClosed:
    """The client ended its side of the call: it will send no more. gRPC: its END_STREAM. HTTP: its TCP FIN while the call was open (a request body's end is part of its `c2s` message); a closing client sends the same FIN, so what follows tells them apart: Triton's full answer, or its close (a `client_disconnect`)."""

    kind: ClassVar[str] = "half_close"
    t_ns: Annotated[int, "unix epoch nanoseconds when the event was observed"]
    call: Annotated[str, "the RPC"]
    dir: Annotated[Direction, "always `c2s`: the server's END_STREAM is part of `call_end`"] = "c2s"


@dataclass(frozen=True, kw_only=True, slots=True)
class CallCancelled:
    """The call ended in a way other than `ok`/`error`; written the moment the proxy learned it."""

    kind: ClassVar[str] = "cancel"
    t_ns: Annotated[int, "unix epoch nanoseconds when the event was observed"]
    call: Annotated[str, "the RPC"]
    cause: Annotated[
        Cause,
        "`client_cancel`, `deadline`, `client_disconnect`, `upstream_disconnect`, `proxy_shutdown` or `proxy_error`",
    ]
    in_flight: Annotated[
        list[str],
        "Triton request ids sent on this call that had not received a final response (HTTP: the call's one "
        "request, unless its reply body or event stream had ended)",
    ]
    responded: Annotated[
        list[str],
        "the subset of `in_flight` that had already received at least one response (not final); "
        "whether the others were queued or executing the wire cannot show (check-cancel's server-side "
        "evidence can); called `executing` in schema version 1",
    ]
    rst_code: Annotated[
        int | None, "HTTP/2 error code of the client's RST_STREAM, when that was the trigger (always null on HTTP)"
    ]
    elapsed_ms: Annotated[float, "time from the call's request HEADERS to this event"]
    forwarded_upstream: Annotated[
        bool,
        "the proxy reset the upstream stream (HTTP: closed the upstream connection) so Triton cancels the work",
    ]
    upstream_rst_us: Annotated[
        float | None,
        "microseconds from the proxy learning of the ending (reading the client's RST_STREAM off its "
        "socket, the client connection closing, ...) to its own RST_STREAM handed to the upstream socket "
        "(HTTP: to closing the upstream socket); null when not forwarded",
    ] = None


@dataclass(frozen=True, kw_only=True, slots=True)
class LateFrameSeen:
    """The upstream still sent something on a call after the proxy forwarded its cancel, or after it ended the call itself (passed on verbatim)."""

    kind: ClassVar[str] = "late"
    t_ns: Annotated[int, "unix epoch nanoseconds when the frame was read"]
    call: Annotated[str, "the cancelled or ended RPC"]
    frame: Annotated[
        Literal["message", "headers", "trailers", "rst", "overflow"],
        "`message`: a gRPC message completed by late DATA; `headers`/`trailers`: a HEADERS frame without/with "
        "END_STREAM; `rst`: an RST_STREAM; `overflow`: the per-call limit of late records was reached and "
        "later frames of this call are not recorded",
    ]
    size: Annotated[int, "bytes: the message (without its 5-byte prefix) or the header block"]
    since_cancel_ms: Annotated[
        float, "time since the proxy sent its RST_STREAM upstream (`after: cancel`) or since the call ended (`after: end`)"
    ]
    request_id: Annotated[str | None, "`message`: the Triton request id of the late response, when it decodes"] = None
    final: Annotated[bool | None, "`message`: its raw `triton_final_response` flag"] = None
    error: Annotated[str | None, "`message`: its in-band `error_message`; `trailers`: `grpc-status grpc-message`"] = None
    rst_code: Annotated[int | None, "`rst`: the HTTP/2 error code"] = None
    after: Annotated[
        Literal["cancel", "end"],
        "`cancel`: after the proxy forwarded the call's cancel upstream; `end`: after the upstream's own END_STREAM "
        "or RST_STREAM ended the call, frames RFC 9113 5.1 forbids on a closed stream (the one RST_STREAM(NO_ERROR) "
        "RFC 9113 8.1 allows right after a complete response is not recorded)",
    ] = "cancel"


@dataclass(frozen=True, kw_only=True, slots=True)
class EvidenceRecorded:
    """Server-side evidence sampled for a window after a cancel (`record --evidence`), tied to that cancel."""

    kind: ClassVar[str] = "evidence"
    t_ns: Annotated[int, "unix epoch nanoseconds when the window closed"]
    call: Annotated[str, "the cancelled RPC"]
    cancel_t_ns: Annotated[int, "`t_ns` of the `cancel` record this evidence follows"]
    source: Annotated[Literal["metrics", "log"], "`metrics` (the Prometheus endpoint) or `log` (Triton's verbose log)"]
    window_ms: Annotated[float, "how long after the cancel the source was watched"]
    in_flight: Annotated[list[str], "request ids of the cancel record (what the evidence is about)"]
    counters: Annotated[
        dict[str, float] | None,
        "`metrics`: change of every `nv_inference_*` series over the window (`name{labels}` -> delta), only "
        "the series that moved; `{}` when none moved (not every backend moves them)",
    ] = None
    lines: Annotated[
        list[str] | None,
        "`log`: lines appended during the window that mention cancellation, a request id of `in_flight`, or "
        "skipped responses (at most 200)",
    ] = None
    skipped_responses: Annotated[
        int | None,
        "`log`: `skipping response generation` lines in the window: responses the backend still produced "
        "after the cancel (the lines carry no request id)",
    ] = None
    overlapping: Annotated[
        list[str] | None,
        "other calls whose windows overlap this one (cancelled before or during it): unattributed lines and counters may belong to them",
    ] = None
    error: Annotated[str | None, "why the source could not be read, else null"] = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CallEnded:
    """The call is over: the status the client got, and why."""

    kind: ClassVar[str] = "call_end"
    t_ns: Annotated[int, "unix epoch nanoseconds when the event was observed"]
    call: Annotated[str, "the RPC"]
    status: Annotated[
        str,
        "gRPC status code name: the upstream's when it sent one, else the status the client got "
        "(client_cancel/client_disconnect `CANCELLED`, but a client_cancel by a RST_STREAM code other than "
        "CANCEL or NO_ERROR the status gRPC gives that code, e.g. ENHANCE_YOUR_CALM `RESOURCE_EXHAUSTED` "
        "(a response over the client's receive limit); deadline `DEADLINE_EXCEEDED`, "
        "upstream_disconnect/proxy_shutdown `UNAVAILABLE`); HTTP: the response's status code as text "
        "(`\"200\"`) when a response head reached the client, else as for gRPC",
    ]
    details: Annotated[
        str | None,
        "`grpc-message` (percent-decoded) or the proxy's explanation; HTTP: the reply's JSON `error` when the "
        "status is 400 or more, else the proxy's explanation or null",
    ]
    cause: Annotated[Cause, "why the call ended, see *Causes*"]
    trailers: Annotated[
        list[list[str]] | None,
        "trailers as [name, value] pairs as sent by the upstream (HTTP: chunked trailers), or null",
    ]
    initial_metadata: Annotated[
        list[list[str]] | None,
        "the upstream's response HEADERS as [name, value] pairs (HTTP: the response headers, names "
        "lowercased), or null",
    ]
    duration_ms: Annotated[float, "time from the request HEADERS to the end"]
    messages_c2s: Annotated[int, "messages the client sent on this call"]
    messages_s2c: Annotated[int, "messages the server sent on this call"]
    upstream_rst_code: Annotated[int | None, "HTTP/2 error code of an upstream RST_STREAM, when one ended the call"] = None
    s2c_undelivered_bytes: Annotated[
        int | None,
        "bytes the proxy held for this call and never delivered to the client. The relay forwards each "
        "frame as it is read and holds nothing per call, so this is 0 when the connection's socket "
        "buffer towards the client was empty at the end, and null (unknown: the buffer is shared by "
        "every call of the connection) when it was not",
    ] = 0
    http_status: Annotated[
        int | None, "HTTP calls: the response's status code, null when no response head reached the client; gRPC: null"
    ] = None
    refused: Annotated[
        bool,
        "the proxy reset the call REFUSED_STREAM, as never processed: it crossed a GOAWAY (the proxy's own at "
        "shutdown, or the upstream's, which refused it too: `upstream_rst_code` 7). A gRPC client may retry such a "
        "call by itself on another connection, where the retry is a call of its own; `replay send` does not send it",
    ] = False


#: The ``call_end.details`` of a call the proxy refused unprocessed (REFUSED_STREAM, ``refused`` true): at its
#: shutdown, above the upstream's GOAWAY, while the upstream ends the connection after an error GOAWAY. The
#: proxy's own words, which proxies from before the ``refused`` field wrote too (with ``cause`` ``error``).
REFUSED_AT_SHUTDOWN = "triton-tap: connection is shutting down (GOAWAY): stream not processed"
REFUSED_ABOVE_UPSTREAM_GOAWAY = "triton-tap: upstream connection is shutting down (GOAWAY)"
REFUSED_UPSTREAM_ENDING = "triton-tap: upstream connection is ending (GOAWAY with an error): stream not processed"
_REFUSALS = frozenset({REFUSED_AT_SHUTDOWN, REFUSED_ABOVE_UPSTREAM_GOAWAY, REFUSED_UPSTREAM_ENDING})


def was_refused(end: CallEnded) -> bool:
    """The proxy refused the call unprocessed: ``refused``, or, in a capture from before that field, its words."""
    return end.refused or (end.status == "UNAVAILABLE" and end.details in _REFUSALS)


@dataclass(frozen=True, kw_only=True, slots=True)
class ProtocolViolated:
    """A peer broke HTTP/2 (or HTTP/1.x, on the HTTP port) on one connection, as the proxy judged it (or the upstream, in its error GOAWAY); that connection ends (others go on)."""

    kind: ClassVar[str] = "protocol_error"
    t_ns: Annotated[int, "unix epoch nanoseconds when the event was observed"]
    conn: Annotated[str, "the client connection (tunnel) the error happened on"]
    side: Annotated[Literal["client", "upstream"], "who broke the protocol: the client or the upstream"]
    error: Annotated[str, "what was wrong, as the HTTP/2 (or HTTP/1.x) layer reported it"]
    error_code: Annotated[int, "HTTP/2 error code sent in the GOAWAY to that peer; 0 on HTTP/1.x (no such code)"]
    open_calls: Annotated[
        list[str], "calls open on the connection at that moment (each still gets its own `call_end`, after a `cancel` when the connection's end cuts it: an upstream's error GOAWAY lets the upstream end them first)"
    ]


@dataclass(frozen=True, kw_only=True, slots=True)
class GapRecorded:
    """Records were dropped (never a silent loss): how many and why."""

    kind: ClassVar[str] = "gap"
    t_ns: Annotated[int, "unix epoch nanoseconds when the gap was written"]
    dropped: Annotated[int, "number of records that could not be written"]
    reason: Annotated[
        str,
        "why, starting with one of `queue_full` (the disk was slower than the traffic), `write_error: ...` "
        "(e.g. `[Errno 28] No space left on device`), `low_disk` (free space under `--min-free-mb`: "
        "writing paused, forwarding went on) or `file_unlinked` (the live file was deleted while being "
        "written: the records it held are lost): what started the gap; each other cause of the records it "
        "counts follows, `; then N record(s): <cause>`",
    ]
    first_t_ns: Annotated[int, "event time of the first dropped record"]
    last_t_ns: Annotated[int, "event time of the last dropped record"]


@dataclass(frozen=True, kw_only=True, slots=True)
class MarkRecorded:
    """An operator marked this point of the capture (`Mark` on the admin service, e.g. "starting load test 3")."""

    kind: ClassVar[str] = "mark"
    t_ns: Annotated[int, "unix epoch nanoseconds when the proxy received the mark"]
    note: Annotated[str, "the operator's text"]
    labels: Annotated[dict[str, str], "the operator's key/value labels (`{}` when none)"]


@dataclass(frozen=True, kw_only=True, slots=True)
class FilesRemoved:
    """Capture files left the capture directory while the proxy ran: history before this point is cut."""

    kind: ClassVar[str] = "files_removed"
    t_ns: Annotated[int, "unix epoch nanoseconds when the proxy removed (or noticed the removal of) the files"]
    reason: Annotated[
        Literal["retention", "moved"],
        "`retention`: the proxy deleted the oldest closed files to stay within `--max-total-mb`; `moved`: "
        "the live file was renamed or replaced by someone else (its records are under the new name, "
        "not lost; the capture went on in a new file)",
    ]
    files: Annotated[list[str], "names of the files, oldest first (files of earlier proxy runs included)"]
    size: Annotated[int, "their total size in bytes"]
    detail: Annotated[str, "one line for people, e.g. the budget and the directory's size after the removal"]


@dataclass(frozen=True, kw_only=True, slots=True)
class CaptureEnded:
    """The capture was closed in order (a missing `capture_end`: the proxy died, or is still writing it)."""

    kind: ClassVar[str] = "capture_end"
    t_ns: Annotated[int, "unix epoch nanoseconds when the event was observed"]
    reason: Annotated[
        str,
        "`shutdown` (SIGTERM/SIGINT), `rotate` (the capture goes on in the next file, `--rotate-mb`) or "
        "`reopen` (SIGHUP, or the live file was renamed: the capture goes on in the next file)",
    ]
    counts: Annotated[dict[str, int], "records written per kind, calls per cause, dropped records"]
    next_file: Annotated[str | None, "with `rotate`: name of the file the capture continues in"] = None


#: Every record kind, in the order docs/capture-format.md documents them.
RECORD_TYPES: tuple[type[Any], ...] = (
    CaptureStarted,
    CallStarted,
    MessageSeen,
    HalfClosed,
    CallCancelled,
    LateFrameSeen,
    EvidenceRecorded,
    CallEnded,
    ProtocolViolated,
    GapRecorded,
    MarkRecorded,
    FilesRemoved,
    CaptureEnded,
)

Record = (
    CaptureStarted
    | CallStarted
    | MessageSeen
    | HalfClosed
    | CallCancelled
    | LateFrameSeen
    | EvidenceRecorded
    | CallEnded
    | ProtocolViolated
    | GapRecorded
    | MarkRecorded
    | FilesRemoved
    | CaptureEnded
)

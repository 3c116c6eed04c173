"""Feed a captured ModelStreamInfer call into the user's own client code, as tritonclient would.

Two styles, mirroring ``tritonclient.grpc`` (2.73) exactly where the capture allows:

* :func:`feed_stream` calls a stream callback ``callback(result=..., error=...)`` the way
  ``InferenceServerClient.start_stream``'s reader thread does: per response, either
  ``result`` (an ``InferResult``) or, when the response carries ``error_message``, only ``error =
  InferenceServerException(msg=error_message)`` (status None; tritonclient drops the
  ``infer_response`` of such a response, final flag included). When the call ended with a non-OK
  status, one last ``callback(result=None, error=...)``: ``CANCELLED`` as tritonclient's
  ``get_cancelled_error`` (message ``"Locally cancelled by application!"`` for a client cancel),
  any other status as ``InferenceServerException(msg=details, status="StatusCode.<NAME>")``
  (a client-side deadline's message is gRPC's ``"Deadline Exceeded"``; live, gRPC itself
  sometimes says ``"Stream removed (Deadline Exceeded)"``, a race in its core, also seen without
  the proxy). An OK end calls nothing. A call whose end the capture does not hold raises
  :class:`EndNotCaptured` after its responses (both styles).
* :func:`feed_stream_aio` is an async iterator of ``(result, error)`` pairs like the one
  ``tritonclient.grpc.aio.InferenceServerClient.stream_infer`` returns. That iterator does not
  turn the final status into a pair: an OK end stops the iteration, a non-OK end raises
  ``grpc.aio.AioRpcError`` (code, details, metadata from the capture), and a call the client
  cancelled itself raises ``asyncio.CancelledError`` (what grpc.aio raises for a locally cancelled
  call). So does this one.

What a result contains depends on how the capture was recorded:

* ``--payload full``: the captured ``ModelStreamInferResponse`` bytes are decoded, so ``result``
  is exactly what the client got, tensor data included (``as_numpy`` works).
* ``--payload meta`` (the default), or a ``full`` payload cut at ``--payload-cap``: the response is
  rebuilt from the labels: model name and version, request id, the raw ``triton_final_response``
  parameter, and the outputs *by name only* (no datatype, shape or data: they were not recorded).
  ``as_numpy`` on such a result raises :class:`DataNotCaptured` rather than inventing data.
* ``--payload none``: nothing to rebuild; feeding raises :class:`~replay.errors.UserError`.

Pacing: ``speed=None`` delivers everything at once (no sleeps); ``speed=1.0`` at the captured
timing (relative to the call's start), ``2.0`` twice as fast. Events come in capture order, which
is the order the proxy forwarded them to the client.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from tritonclient.grpc import InferResult
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from replay.capture import events as ev
from replay.capture.events import cancel_status
from replay.capture.ids import CaptureIds
from replay.capture.methods import OPENAI, STREAM_INFER, http_kind
from replay.capture.payload import has_payload, payload_bytes
from replay.errors import UserError
from replay.machine.tracker import CaptureSource, open_source
from replay.tools.grpcstatus import grpc_metadata, status_code, status_details

_LOCAL_CANCEL = "Locally cancelled by application!"


class DataNotCaptured(UserError):
    """Tensor contents were asked for, but the capture did not record them."""


class EndNotCaptured(UserError):
    """The capture ends before the fed call did (the proxy was killed, or its end is in a file not given):
    raised after the responses it holds, where an OK end would end quietly."""


class DatalessInferResult(InferResult):  # type: ignore[misc]
    """An ``InferResult`` rebuilt from labels only: outputs present by name, without data."""

    def __init__(self, response: Any, why: str) -> None:
        super().__init__(response)
        self._why = why

    def as_numpy(self, name: str) -> Any:
        """Raises :class:`DataNotCaptured` for a present output (None, as tritonclient, for an absent one)."""
        if any(o.name == name for o in self.get_response().outputs):
            raise DataNotCaptured(f"output {name!r}: {self._why}")
        return None


@dataclass(frozen=True, slots=True)
class _Response:
    t_ns: int
    result: InferResult | None
    error: InferenceServerException | None


@dataclass(frozen=True, slots=True)
class _End:
    t_ns: int
    status: str
    cause: str
    details: str | None
    initial_metadata: list[list[str]] | None
    trailers: list[list[str]] | None


def _rebuild(rec: ev.MessageSeen, seq: int, call: str) -> _Response:
    """The callback arguments tritonclient would produce from this captured response."""
    if rec.compressed:
        raise UserError(f"seq {seq}: response {rec.index} of call {call} is gRPC-compressed; it cannot be fed")
    data = payload_bytes(rec) if not rec.payload_truncated else None
    if data is not None:
        msg = pb.ModelStreamInferResponse.FromString(data)
        if msg.error_message != "":
            return _Response(rec.t_ns, None, InferenceServerException(msg=msg.error_message))
        return _Response(rec.t_ns, InferResult(msg.infer_response), None)
    if rec.request_id is None:
        raise UserError(
            f"seq {seq}: response {rec.index} of call {call} carries no Triton labels "
            "(compressed, cut short or undecodable: see its decode_error); it cannot be fed"
        )
    if rec.error:
        return _Response(rec.t_ns, None, InferenceServerException(msg=rec.error))
    r = pb.ModelInferResponse(model_name=rec.model or "", model_version=rec.model_version or "", id=rec.request_id)
    if rec.final is not None:
        r.parameters["triton_final_response"].bool_param = rec.final
    for name in rec.outputs or ():
        r.outputs.add(name=name)
    why = (
        "the capture's payload was cut at --payload-cap"
        if has_payload(rec)
        else "tensor data is not recorded with --payload meta (record with --payload full)"
    )
    return _Response(rec.t_ns, DatalessInferResult(r, why), None)


@dataclass
class _Choice:
    """Which call :func:`_call_records` took, and what a "no such call" error names."""

    #: ids of the first calls of the kind asked for (at most 11: only for the error message)
    of_kind: list[str]
    #: the asked-for call exists but is of another kind
    other_kind: bool = False


def _call_records(capture: CaptureSource, call: str | None, accept: Callable[[str], bool],
                  choice: _Choice) -> Iterator[tuple[int, str, ev.Record]]:  # fmt: skip
    """``(seq, call id, record)`` of one call, in capture order from its ``call_start`` to its ``call_end``
    (read lazily): ``call``, or the first call whose method ``accept`` takes. Nothing when there is none
    (``choice`` says what there was)."""
    records, reader = open_source(capture)
    chosen: str | None = None
    ids = CaptureIds()
    ids.follow(reader)
    for seq, rec in records:
        if ids.starts(rec) or isinstance(rec, ev.CaptureStarted):
            continue
        if chosen is None:
            if isinstance(rec, ev.CallStarted):
                cid = ids.of(rec.call)
                if accept(rec.method):
                    if len(choice.of_kind) <= 10:
                        choice.of_kind.append(cid)
                    if call is None or cid == call:
                        chosen = cid
                        yield seq, cid, rec
                elif cid == call:
                    choice.other_kind = True
            continue
        if getattr(rec, "call", None) is None or ids.of(rec.call) != chosen:  # type: ignore[union-attr]
            continue
        yield seq, chosen, rec
        if isinstance(rec, ev.CallEnded):
            return


def _shown(ids: list[str]) -> str:
    return ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "") or "none"


def _stream(capture: CaptureSource, call: str | None) -> Iterator[int | _Response | _End]:
    """The chosen call's start time, then its responses and end, in capture order (read lazily)."""
    choice = _Choice([])
    started = False
    cancel: ev.CallCancelled | None = None
    fed = ""
    for seq, cid, rec in _call_records(capture, call, lambda method: method == STREAM_INFER, choice):
        if isinstance(rec, ev.CallStarted):
            started, fed = True, cid
            yield rec.t_ns
        elif isinstance(rec, ev.MessageSeen):
            if rec.dir == "s2c" and not ev.message_cut(rec.decode_error):  # (a response the end cut: none)
                yield _rebuild(rec, seq, cid)
        elif isinstance(rec, ev.CallCancelled):
            cancel = rec
        elif isinstance(rec, ev.CallEnded):
            yield _End(rec.t_ns, rec.status, rec.cause, rec.details, rec.initial_metadata, rec.trailers)
            return
    if not started:
        if call is None:
            raise UserError("the capture has no ModelStreamInfer call to feed")
        if choice.other_kind:
            raise UserError(f"call {call!r} is not a ModelStreamInfer call")
        raise UserError(f"call {call!r} is not in the capture (stream calls: {_shown(choice.of_kind)})")
    if cancel is not None:
        # The capture ends between the cancel and its call_end: the cancel says how it ended.
        yield _End(cancel.t_ns, cancel_status(cancel.cause, cancel.rst_code), cancel.cause, None, None, None)
        return
    # Still open when the capture ended: what the client saw next is unknown, and ending quietly would be
    # an OK end the wire never showed.
    raise EndNotCaptured(f"call {fed}: the capture ends before the call did (its end is not recorded), so how "
                         "it ended is unknown; its captured responses were delivered")  # fmt: skip


def _check_speed(speed: float | None) -> None:
    if speed is not None and not speed > 0:
        raise ValueError(f"speed must be > 0 (or None for no pacing), got {speed!r}")


def terminal_error(status: str, details: str | None) -> InferenceServerException | None:
    """The error tritonclient's stream callback gets for a stream that ended with ``status``."""
    if status == "OK":
        return None
    if status == "CANCELLED":
        return InferenceServerException(msg=details or _LOCAL_CANCEL, status="StatusCode.CANCELLED")
    return InferenceServerException(msg=status_details(status, details), status=f"StatusCode.{status}")


class _Pacer:
    def __init__(self, speed: float | None, t0_ns: int) -> None:
        self.speed = speed
        self.t0_ns = t0_ns
        self.wall0 = time.monotonic()

    def delay(self, t_ns: int) -> float:
        """Seconds to wait before delivering an event captured at ``t_ns``."""
        if self.speed is None:
            return 0.0
        due = self.wall0 + (t_ns - self.t0_ns) / 1e9 / self.speed
        return max(0.0, due - time.monotonic())


def _paced(
    capture: CaptureSource, call: str | None, speed: float | None
) -> Iterator[tuple[float, _Response | _End]]:
    """The stream's items with how long to wait before each (0 without pacing); sync and async
    feeders differ only in how they wait."""
    _check_speed(speed)
    pacer: _Pacer | None = None
    for item in _stream(capture, call):
        if isinstance(item, int):
            pacer = _Pacer(speed, item)
            continue
        assert pacer is not None
        yield pacer.delay(item.t_ns), item


def feed_stream(
    capture: CaptureSource,
    callback: Callable[..., Any],
    *,
    call: str | None = None,
    speed: float | None = None,
) -> None:
    """Call ``callback(result=..., error=...)`` for a captured stream as ``tritonclient.grpc`` would.

    ``capture``: path(s) of capture files/directories or an iterable of records. ``call``: the
    ``call`` id of a ModelStreamInfer call (default: the capture's first one). ``speed``: None for
    no pacing, 1.0 for the captured timing, 2.0 twice as fast. Raises
    :class:`~replay.errors.UserError` when there is no such stream call or it cannot be fed, and
    :class:`~replay.errors.CaptureError` for unreadable files. See the module docstring for exactly
    what the callback receives.
    """
    for wait, item in _paced(capture, call, speed):
        if wait:
            time.sleep(wait)
        if isinstance(item, _Response):
            callback(result=item.result, error=item.error)
        else:
            error = terminal_error(item.status, item.details)
            if error is not None:
                callback(result=None, error=error)


async def feed_stream_aio(
    capture: CaptureSource,
    *,
    call: str | None = None,
    speed: float | None = None,
) -> AsyncIterator[tuple[InferResult | None, InferenceServerException | None]]:
    """Async iterator of ``(result, error)`` for a captured stream, as ``tritonclient.grpc.aio`` yields.

    Same arguments as :func:`feed_stream`. After the last response: an OK end stops the
    iteration, a non-OK end raises ``grpc.aio.AioRpcError`` and a client cancel raises
    ``asyncio.CancelledError``, as the real iterator does. Reading the capture happens in this
    task (it is fast local I/O; pass records to avoid it).
    """
    for wait, item in _paced(capture, call, speed):
        if wait:
            await asyncio.sleep(wait)
        if isinstance(item, _Response):
            yield item.result, item.error
            continue
        if item.status == "OK":
            return
        if item.cause == "client_cancel":
            raise asyncio.CancelledError()
        raise grpc.aio.AioRpcError(
            status_code(item.status),
            grpc_metadata(item.initial_metadata),
            grpc_metadata(item.trailers),
            status_details(item.status, item.details),
            None,
        )


def stream_calls(capture: CaptureSource) -> list[str]:
    """The ids of the capture's ModelStreamInfer calls, in order (what ``call=`` accepts)."""
    records, reader = open_source(capture)
    out: list[str] = []
    ids = CaptureIds()
    ids.follow(reader)
    for _, rec in records:
        if ids.starts(rec):
            continue
        if isinstance(rec, ev.CallStarted) and rec.method == STREAM_INFER:
            out.append(ids.of(rec.call))
    return out


# -- HTTP: server-sent events -----------------------------------------------------------------------------

#: ``callback(event, error)``: a captured event's JSON and its ``"error"`` (None when it has none); then once
#: ``callback(None, error)``: None after a clean end of the body, else what the client met instead.
EventCallback = Callable[[dict[str, Any] | None, str | None], Any]


def _sse_data(block: bytes) -> str:
    """The ``data:`` lines of one captured event block joined with ``\\n`` (the SSE rule)."""
    lines = block.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))


def _terminated(block: bytes) -> bool:
    """The captured event block ends with a blank line (two line ends: CRLF, LF or CR), as a dispatched one does."""
    for eol in (b"\r\n", b"\n", b"\r"):
        if block.endswith(eol):
            rest = block[: -len(eol)]
            return not rest or rest.endswith((b"\n", b"\r"))
    return False


def _event(kind: str, rec: ev.MessageSeen, seq: int, call: str) -> tuple[dict[str, Any] | None, str | None]:
    """The event a client's SSE reader parses from a captured one (None for OpenAI's ``[DONE]`` and for what
    the client never got whole: its end says how it was cut), and its error; for a reply that was no event
    stream (the recorder's ``final`` is null only on a reply body: Triton's 400 ``{"error": ...}`` before any
    event), the body's JSON and its error."""
    from replay.tools.serve.responses import has_bytes, http_answer

    if ev.never_received(rec.decode_error):
        # bytes the client never got whole: a body the connection's end cut, an event no blank line
        # ended (an SSE reader drops it); a cut body is no JSON to parse
        return None, None
    if rec.compressed or (has_payload(rec) and not has_bytes(rec)) or (not has_payload(rec) and rec.request_id is None):
        raise UserError(f"seq {seq}: event {rec.index} of call {call} was not captured whole (compressed, cut at "
                        "--payload-cap or unlabelled); it cannot be fed")  # fmt: skip
    data, _ = http_answer(kind, rec)
    assert data is not None  # an inference kind always has an answer
    body = rec.final is None
    if has_payload(rec) and not body and not _terminated(data):
        return None, None
    text = _sse_data(data) if has_payload(rec) and not body else data.decode("utf-8", "replace")
    if text == "[DONE]" and not body and kind.startswith("openai"):
        return None, None  # OpenAI's end (on Triton's generate_stream it is data like any, and no JSON)
    try:
        value = json.loads(text)
    except ValueError:
        what = "its reply body (no event stream)" if body else f"event {rec.index}"
        raise UserError(f"seq {seq}: {what} of call {call} is not JSON: {text[:80]!r}") from None
    event = value if isinstance(value, dict) else {"data": value}
    error = event.get("error")
    return event, error if isinstance(error, str) else None


def _http_stream(
    capture: CaptureSource, call: str | None
) -> Iterator[int | tuple[int, dict[str, Any] | None, str | None, bool]]:
    """The chosen call's start time, then ``(t_ns, event, error, last)`` per event and one for the end."""
    choice = _Choice([])
    kind = ""
    cancel: ev.CallCancelled | None = None

    def accept(method: str) -> bool:
        k = http_kind(method)
        return k == "generate_stream" or k in OPENAI

    for seq, cid, rec in _call_records(capture, call, accept, choice):
        if isinstance(rec, ev.CallStarted):
            kind = http_kind(rec.method) or ""
            yield rec.t_ns
        elif isinstance(rec, ev.MessageSeen):
            if rec.dir == "s2c":
                event, error = _event(kind, rec, seq, cid)
                if event is not None:
                    yield rec.t_ns, event, error, False
        elif isinstance(rec, ev.CallCancelled):
            cancel = rec
        elif isinstance(rec, ev.CallEnded):
            yield rec.t_ns, None, _http_end_error(rec.cause, rec.http_status, rec.details), True
            return
    if not kind:
        if call is None:
            raise UserError("the capture has no HTTP generate_stream (or OpenAI) call to feed")
        raise UserError(f"call {call!r} is not an HTTP generate_stream or OpenAI call of the capture "
                        f"(those: {_shown(choice.of_kind)})")  # fmt: skip
    if cancel is not None:
        yield cancel.t_ns, None, _http_end_error(cancel.cause, None, None), True


def _http_end_error(cause: str, status: int | None, details: str | None) -> str | None:
    """What a client reading the body met at its end: None for a clean end (the chunked terminator)."""
    if cause in ("ok", "error"):
        return None
    if status is None:
        return f"no response: the connection was lost before the response head ({cause})"
    return f"the connection was lost before the end of the body ({cause})"


def _http_paced(capture: CaptureSource, call: str | None, speed: float | None
                ) -> Iterator[tuple[float, dict[str, Any] | None, str | None]]:  # fmt: skip
    _check_speed(speed)
    pacer: _Pacer | None = None
    for item in _http_stream(capture, call):
        if isinstance(item, int):
            pacer = _Pacer(speed, item)
            continue
        assert pacer is not None
        t_ns, event, error, _last = item
        yield pacer.delay(t_ns), event, error


def feed_events(capture: CaptureSource, callback: EventCallback, *, call: str | None = None,
                speed: float | None = None) -> None:  # fmt: skip
    """Call ``callback(event, error)`` per captured server-sent event of an HTTP ``generate_stream`` (or OpenAI
    stream) call, as a client's SSE reader would parse it, then ``callback(None, error)`` once at the end.

    ``event``: the event's JSON (``--payload full``: the captured bytes; ``meta``: rebuilt from the labels,
    outputs present with null values), its ``"error"`` as ``error`` when it has one (an error event under
    200); not for what the capture holds of an event a lost connection cut (an SSE reader drops it). A
    reply that is no event stream (Triton's 400 ``{"error": ...}`` for a bad request) is passed once
    the same way: its body's JSON, its ``"error"``. OpenAI's ``data: [DONE]`` is not passed on: it is the end. The final
    call's ``error`` is None after a clean end of the body (the chunked terminator), else says how the
    connection was lost (a captured ``client_disconnect``, ``upstream_disconnect``...). ``call``: the call id
    (default: the capture's first such call); ``speed``: as :func:`feed_stream`. A call still open at the
    capture's end gets no final call.
    """
    for wait, event, error in _http_paced(capture, call, speed):
        if wait:
            time.sleep(wait)
        callback(event, error)


async def feed_events_aio(capture: CaptureSource, *, call: str | None = None, speed: float | None = None
                          ) -> AsyncIterator[tuple[dict[str, Any] | None, str | None]]:  # fmt: skip
    """Async iterator of the ``(event, error)`` pairs :func:`feed_events` passes to its callback, the final
    ``(None, error)`` pair included; same arguments."""
    for wait, event, error in _http_paced(capture, call, speed):
        if wait:
            await asyncio.sleep(wait)
        yield event, error

"""``triton-tap serve``: a mock Triton that answers real clients from captures.

The shell around the pure parts: a grpc.aio server implementing ``inference.GRPCInferenceService``
(tritonclient's ``service_pb2_grpc`` servicer) whose answers come from a
:class:`~replay.tools.captured.LoadedCapture`. Which captured request an incoming one stands for is
:mod:`replay.tools.match`'s decision; this module only schedules and sends.

* ``ModelStreamInfer``: each incoming request is matched; its captured responses are sent with the
  captured delays after the request's arrival (relative timing), scaled, or at once (``fast``:
  in captured order among the requests that have arrived). Each response carries the incoming
  request's id (``keep_ids`` keeps the captured ones). The stream follows the captured call of its
  first matched request: a captured non-OK end (a client cancel, a deadline, a dropped upstream,
  an error status) is reproduced with its status and details once every request and response
  captured before it has been replayed, at the captured point in time; an OK end closes the stream
  with the captured trailers after the client half-closed and every response was sent.
* ``ModelInfer``: the captured response (``--payload full``: the real bytes; ``meta``: names, shapes
  and datatypes with zero-filled data, and a logged warning) or the captured error status.
* Other RPCs (readiness, metadata, config...): the captured answer of a call of the same method,
  preferring one whose request was the same. ``meta`` captures hold no bytes of those answers;
  only the readiness booleans can be told from the message size (protobuf writes ``false`` as
  nothing), the others answer ``FAILED_PRECONDITION`` explaining why.
* A request that matches nothing: ``NOT_FOUND`` naming the closest captured request and why it did
  not match, and a log line.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import heapq
import itertools
import logging
import math
import socket
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb

from replay.capture import events as ev
from replay.capture.methods import SERVICE, path_of
from replay.errors import UserError
from replay.hostport import format_hostport, parse_hostport
from replay.tools.captured import CapturedCall, LoadedCapture, Response
from replay.tools.feed import _DEFAULT_DETAILS, _metadata
from replay.tools.grpcstatus import status_code
from replay.tools.match import STRATEGIES, Key, Matcher, input_hash

log = logging.getLogger("triton_tap.serve")

_READINESS = {"ServerLive": "live", "ServerReady": "ready", "ModelReady": "ready"}
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


def _details(status: str, details: str | None) -> str:
    # What the client's gRPC would have reported for a status that came without a message.
    return details if details is not None else _DEFAULT_DETAILS.get(status, "")



def _zeros(spec: ev.TensorSpec) -> bytes:
    n = math.prod(spec.shape) if spec.shape else 1
    n = max(n, 0)
    if spec.datatype == "BYTES":
        return b"\0\0\0\0" * n  # n empty strings, each a 4-byte zero length
    return bytes(n * _ITEMSIZE.get(spec.datatype, 0))


def _has_bytes(rec: ev.MessageSeen) -> bool:
    return rec.payload is not None and not rec.payload_truncated and not rec.compressed


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
        r.raw_output_contents.append(_zeros(spec))
    return r, False


def stream_response(rec: ev.MessageSeen) -> tuple[Any, bool]:
    """The ``ModelStreamInferResponse`` to send for a captured one, and whether its data is real."""
    if _has_bytes(rec):
        assert rec.payload is not None
        return pb.ModelStreamInferResponse.FromString(base64.b64decode(rec.payload)), True
    inner, _ = infer_response(rec)
    return pb.ModelStreamInferResponse(error_message=rec.error or "", infer_response=inner), False


def unary_response(rec: ev.MessageSeen) -> tuple[Any, bool]:
    """The ``ModelInferResponse`` to send for a captured unary response, and whether its data is real."""
    if _has_bytes(rec):
        assert rec.payload is not None
        return pb.ModelInferResponse.FromString(base64.b64decode(rec.payload)), True
    return infer_response(rec)


def _request_key(kind: str, request: Any) -> Key:
    return Key(kind=kind, model=request.model_name, request_id=request.id, input_hash=input_hash(request))


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    n: int
    message: Any = field(compare=False)
    call: str = field(compare=False)


class _Stream:
    """The replay of one incoming ModelStreamInfer call."""

    def __init__(self, server: MockTriton, context: Any, name: str) -> None:
        self.server = server
        self.context = context
        self.name = name
        self.pending: list[_Due] = []
        self.counter = itertools.count()
        self.primary: CapturedCall | None = None
        self.arrived: dict[int, float] = {}  # captured request seq (primary call) -> arrival (monotonic)
        self.half_closed = False
        self._before_end: list[int] = []  # the primary call's requests captured before its end
        self._sent_at: dict[int, int] = {}  # the primary call's request seq -> captured t_ns

    def _schedule(self, call: CapturedCall, req_seq: int, req_t: int, incoming_id: str, now: float) -> None:
        speed = self.server.speed
        for resp in call.responses_of(req_seq):
            msg, real = stream_response(resp.record)
            self.server.note_dataless(real, "ModelStreamInfer")
            if not self.server.keep_ids:
                msg.infer_response.id = incoming_id
            # fast: everything is due at once, so the heap orders what is pending by captured seq,
            # which keeps the captured interleaving among the requests that have arrived.
            at = 0.0 if speed is None else now + (resp.record.t_ns - req_t) / 1e9 / speed
            heapq.heappush(self.pending, _Due(at, resp.seq, next(self.counter), msg, call.id))

    def _end_reachable(self) -> bool:
        """A captured non-OK end is next once the requests captured before it arrived (or can no longer)."""
        call = self.primary
        if call is None or call.end is None or call.end.status == "OK":
            return False
        # The client may still send what was sent before the captured end.
        return self.half_closed or all(seq in self.arrived for seq in self._before_end)

    def _end_ready(self, now: float) -> bool:
        call = self.primary
        if not self._end_reachable() or call is None or call.end is None:
            return False
        if any(d.call == call.id and d.seq < call.end.seq for d in self.pending):
            return False
        return now >= self._end_at()

    def _end_at(self) -> float:
        call = self.primary
        speed = self.server.speed
        if speed is None or call is None or call.end is None or not self.arrived:
            return 0.0
        t = self._sent_at
        return max(at + (call.end.t_ns - t[seq]) / 1e9 / speed for seq, at in self.arrived.items())

    async def _take(self, item: Any) -> None:
        if item is None:
            self.half_closed = True
        elif isinstance(item, _Undecodable):
            await self.server.undecodable(self.context, item, f"ModelStreamInfer {self.name}")
        else:
            await self._request(item, time.monotonic())

    async def _drain(self, incoming: asyncio.Queue[Any]) -> None:
        # Everything the client already sent is matched before anything more is written, so that
        # responses due together go out in captured order across requests.
        while not incoming.empty():
            await self._take(incoming.get_nowait())

    async def run(self, incoming: asyncio.Queue[Any]) -> None:
        """Match, schedule and write until the call ends as captured (or by the client)."""
        while True:
            await self._drain(incoming)
            while self.pending and self.pending[0].at <= time.monotonic():
                await self.context.write(heapq.heappop(self.pending).message)
                await self._drain(incoming)
            if self._end_ready(time.monotonic()):
                await self._abort_as_captured()
            if self.half_closed and not self.pending:
                call = self.primary
                if call is not None and call.end is not None and call.end.status != "OK":
                    # The client will send nothing more: the captured end comes at its time.
                    await asyncio.sleep(max(0.0, self._end_at() - time.monotonic()))
                    await self._abort_as_captured()
                if call is not None and call.end is not None and call.end.trailers:
                    self.context.set_trailing_metadata(tuple(_metadata(call.end.trailers)))
                return
            wake: float | None = None
            if self.pending:
                wake = self.pending[0].at
            elif self._end_reachable():
                wake = self._end_at()
            if wake is not None and wake <= time.monotonic():
                continue
            try:
                timeout = None if wake is None else wake - time.monotonic()
                item = await asyncio.wait_for(incoming.get(), timeout)
            except TimeoutError:
                continue
            await self._take(item)

    async def _request(self, request: Any, now: float) -> None:
        key = _request_key("stream", request)
        m = self.server.matcher.match(key, prefer_call=self.primary.id if self.primary else None)
        if m.candidate is None:
            await self.server.not_found(self.context, key, f"ModelStreamInfer {self.name}")
            return
        call = self.server.capture.calls[m.candidate.call]
        log.debug("%s: %s matched %s (call %s, seq %d) by %s%s", self.name, key.describe(),
                 m.candidate.key.describe(), call.id, m.candidate.seq, m.by, " (again)" if m.reused else "")  # fmt: skip
        if self.primary is None:
            self.primary = call
            end_seq = call.end.seq if call.end is not None else -1
            self._before_end = [seq for seq, rec in call.requests if seq < end_seq and rec.request_id is not None]
            self._sent_at = {seq: rec.t_ns for seq, rec in call.requests}
        if call is self.primary:
            self.arrived[m.candidate.seq] = now
        req_t = self.server.capture.request(call.id, m.candidate.seq).t_ns
        self._schedule(call, m.candidate.seq, req_t, request.id, now)

    async def _abort_as_captured(self) -> None:
        assert self.primary is not None and self.primary.end is not None
        end = self.primary.end
        log.info("%s: ending as captured call %s did: %s (%s)", self.name, self.primary.id, end.status, end.cause)
        await self.context.abort(status_code(end.status), _details(end.status, end.details), tuple(_metadata(end.trailers)))


@dataclass(frozen=True, slots=True)
class _Undecodable:
    """A request message that does not parse as the method's type (what the deserializer hands on)."""

    size: int
    error: str


def _lenient(parse: Any) -> Any:
    # grpc's own handling of a deserializer that raises is a logged traceback and UNKNOWN for the
    # client; the handler answers INVALID_ARGUMENT with one log line instead.
    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as e:
            return _Undecodable(len(data), str(e) or type(e).__name__)

    return deserialize


def _handlers(server: MockTriton) -> Any:
    """The GRPCInferenceService methods, each parsing its request leniently."""
    handlers: dict[str, Any] = {}
    for method in pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods:
        request_type = getattr(pb, method.input_type.name)
        response_type = getattr(pb, method.output_type.name)
        kw = {"request_deserializer": _lenient(request_type.FromString),
              "response_serializer": response_type.SerializeToString}  # fmt: skip
        if method.name == "ModelStreamInfer":
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(server.stream_infer, **kw)
        elif method.name == "ModelInfer":
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(server.model_infer, **kw)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _other_handler(server, method.name, response_type), **kw
            )
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


def _other_handler(server: MockTriton, name: str, response_type: Any) -> Any:
    async def handler(request: Any, context: Any) -> Any:
        return await server.other(name, response_type, request, context)

    return handler


def _check_bindable(host: str, port: int, listen: str) -> None:
    """One line naming the reason when ``host:port`` cannot be bound (busy, not local, unresolvable)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as e:
        raise UserError(f"cannot listen on {listen}: {e.strerror or e}") from None
    family, kind, proto, _name, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        try:
            sock.bind(addr)
        except OSError as e:
            why = "address already in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
            raise UserError(f"cannot listen on {listen}: {why}") from None


class MockTriton:
    """A grpc.aio server answering from a loaded capture; :meth:`start` / :meth:`stop` on a running loop."""

    def __init__(
        self, capture: LoadedCapture, *, speed: float | None = 1.0, strategies: Sequence[str] = STRATEGIES,
        keep_ids: bool = False,
    ) -> None:  # fmt: skip
        if capture.payload_modes == {"none"}:
            raise UserError(
                "the capture was recorded with --payload none: it keeps request ids and message sizes only, "
                "no input or output specs to match requests or shape answers; record with --payload meta or full"
            )
        self.capture = capture
        self.speed = speed
        self.keep_ids = keep_ids
        self.matcher = Matcher(capture.candidates, strategies)
        if capture.outcomes.unattributable:
            log.warning("%d captured response(s) cannot be attributed to a request (see `replay check`): "
                        "they are not replayed", len(capture.outcomes.unattributable))  # fmt: skip
        for g in capture.outcomes.gaps:
            where = f"{g.file}:{g.line}" if g.line is not None else g.file
            log.warning("capture hole: %s at %s: %s", g.kind, where, g.detail)
        self.unmatched: list[str] = []  # NOT_FOUND messages, in order (for callers and tests)
        self.open_streams = 0  # ModelStreamInfer calls being served (their reader tasks included)
        self._warned: set[str] = set()
        self._other_used: set[str] = set()
        self._streams = itertools.count(1)
        self._server: Any = None
        self.port = 0

    async def start(self, listen: str = "127.0.0.1:0") -> int:
        """Bind ``listen`` (port 0: a free one) and serve; returns the port."""
        host, want = parse_hostport(listen, "--listen", allow_port_zero=True)
        if want:
            # A plain bind first: grpc would log its own C-core line for a busy port, and say less.
            _check_bindable(host, want, listen)
        # grpc sets SO_REUSEPORT by default, so a second serve on a busy port would silently share it.
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        server.add_generic_rpc_handlers((_handlers(self),))
        try:
            port: int = int(server.add_insecure_port(format_hostport(host, want)))
        except RuntimeError as e:
            port, why = 0, str(e)
        else:
            why = "address in use or not available"
        if not port:
            raise UserError(f"cannot listen on {listen}: {why}")
        await server.start()
        self._server, self.port = server, port
        return port

    async def stop(self, grace: float = 1.0) -> None:
        """Stop serving; open calls get ``grace`` seconds."""
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None

    # -- shared ------------------------------------------------------------------------------------

    def note_dataless(self, real: bool, what: str) -> None:
        """Warn once per RPC kind that answers carry zero-filled data."""
        if not real and what not in self._warned:
            self._warned.add(what)
            log.warning("%s answers are rebuilt from a meta capture: output data is zero-filled "
                        "(record with --payload full for the real bytes)", what)  # fmt: skip

    async def not_found(self, context: Any, key: Key, where: str) -> None:
        """Log and end the call with NOT_FOUND explaining the closest candidate."""
        message = "triton-tap serve: " + self.matcher.explain(key)
        self.unmatched.append(message)
        log.warning("%s: %s", where, message)
        await context.abort(grpc.StatusCode.NOT_FOUND, message)

    async def undecodable(self, context: Any, request: _Undecodable, where: str) -> None:
        """Log one line and end the call with INVALID_ARGUMENT: the client sent bytes that do not parse."""
        message = f"triton-tap serve: the request message ({request.size} bytes) does not parse: {request.error}"
        log.warning("%s: %s", where, message)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)

    async def _pause(self, start_ns: int, end_ns: int) -> None:
        if self.speed is not None and end_ns > start_ns:
            await asyncio.sleep((end_ns - start_ns) / 1e9 / self.speed)

    # -- RPCs --------------------------------------------------------------------------------------

    async def stream_infer(self, request_iterator: AsyncIterator[Any], context: Any) -> None:
        """ModelStreamInfer (see the module docstring)."""
        stream = _Stream(self, context, f"stream {next(self._streams)}")
        incoming: asyncio.Queue[Any] = asyncio.Queue()

        async def read() -> None:
            try:
                async for request in request_iterator:
                    incoming.put_nowait(request)
            finally:
                incoming.put_nowait(None)

        reader = asyncio.create_task(read(), name=f"serve-{stream.name}-reader")
        self.open_streams += 1
        try:
            await stream.run(incoming)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            self.open_streams -= 1

    async def model_infer(self, request: Any, context: Any) -> Any:
        """ModelInfer (see the module docstring)."""
        if isinstance(request, _Undecodable):
            await self.undecodable(context, request, "ModelInfer")
        key = _request_key("unary", request)
        m = self.matcher.match(key)
        if m.candidate is None:
            await self.not_found(context, key, "ModelInfer")
            return None
        call = self.capture.calls[m.candidate.call]
        log.debug("ModelInfer: %s matched call %s by %s", key.describe(), call.id, m.by)
        req = self.capture.request(call.id, m.candidate.seq)
        return await self._answer(call, req.t_ns, context, lambda r: self._unary(r, request.id),
                                  lambda: pb.ModelInferResponse(id=request.id))  # fmt: skip

    def _unary(self, resp: Response, incoming_id: str) -> Any:
        msg, real = unary_response(resp.record)
        self.note_dataless(real, "ModelInfer")
        if not self.keep_ids:
            msg.id = incoming_id
        return msg

    async def _answer(self, call: CapturedCall, t0: int, context: Any, build: Any, empty: Any) -> Any:
        end = call.end
        await self._pause(t0, end.t_ns if end is not None else t0)
        if end is not None and end.status != "OK":
            await context.abort(status_code(end.status), _details(end.status, end.details), tuple(_metadata(end.trailers)))
        if end is not None and end.trailers:
            context.set_trailing_metadata(tuple(_metadata(end.trailers)))
        if not call.responses:
            # A 0-byte answer is a message record of size 0; here the capture has none at all, yet the
            # status the client got was OK (or never recorded): answer that status with the empty message.
            log.warning("captured call %s (%s) has no response message: answering %s with an empty message",
                        call.id, call.short_method, "OK" if end is not None else "its unrecorded end")  # fmt: skip
            return empty()
        return build(call.responses[0])

    async def other(self, name: str, response_type: Any, request: Any, context: Any) -> Any:
        """Readiness, metadata and the other unary RPCs (see the module docstring)."""
        if isinstance(request, _Undecodable):
            await self.undecodable(context, request, name)
        calls = [c for c in self.capture.calls.values() if c.method == path_of(name)]
        if not calls:
            message = f"triton-tap serve: the capture has no {name} call to answer with"
            self.unmatched.append(message)
            log.warning("%s: %s", name, message)
            await context.abort(grpc.StatusCode.NOT_FOUND, message)
        wanted = request.SerializeToString(deterministic=True)

        def same(c: CapturedCall) -> bool | None:  # None: the request's bytes were not captured
            if not c.requests or not _has_bytes(c.requests[0][1]):
                return None
            payload = c.requests[0][1].payload
            assert payload is not None
            parsed = type(request).FromString(base64.b64decode(payload))
            return bool(parsed.SerializeToString(deterministic=True) == wanted)

        verdicts = [(c, same(c)) for c in calls]
        exact = [c for c, v in verdicts if v is True]
        unknown = [c for c, v in verdicts if v is None]
        pool = exact or unknown
        if not pool:
            asked = " ".join(str(request).split()) or "empty request"
            message = (f"triton-tap serve: no captured {name} call had this request ({asked}); "
                       f"{len(calls)} captured {name} call(s) asked something else")  # fmt: skip
            self.unmatched.append(message)
            log.warning("%s: %s", name, message)
            await context.abort(grpc.StatusCode.NOT_FOUND, message)
        call = next((c for c in pool if c.id not in self._other_used), pool[-1])
        self._other_used.add(call.id)
        ok = call.end is None or call.end.status == "OK"
        if ok and call.responses and name not in _READINESS and not _has_bytes(call.responses[0].record):
            message = (f"triton-tap serve: the capture holds no bytes of the {name} answer (recorded with "
                       "--payload meta); record with --payload full to serve it")  # fmt: skip
            log.warning("%s: %s", name, message)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, message)
        t0 = call.requests[0][1].t_ns if call.requests else call.t_start
        return await self._answer(call, t0, context, lambda r: self._other_response(name, response_type, r),
                                  response_type)  # fmt: skip

    def _other_response(self, name: str, response_type: Any, resp: Response) -> Any:
        rec = resp.record
        if _has_bytes(rec):
            assert rec.payload is not None
            return response_type.FromString(base64.b64decode(rec.payload))
        # Only readiness gets here without bytes: proto3 writes a false bool as nothing, so a
        # non-empty answer was `true`.
        return response_type(**{_READINESS[name]: rec.size > 0})

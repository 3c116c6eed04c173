"""The grpc.aio shell of ``triton-tap serve``: the server, its handlers, and the non-stream RPCs.

What the answers are is :mod:`replay.tools.serve.responses`' (pure), which captured call answers a
non-inference RPC :mod:`replay.tools.serve.pick`'s; one ModelStreamInfer call's replay is
:mod:`replay.tools.serve.stream`'s; what every call shares (matcher, timing, refusals) is
:mod:`replay.tools.serve.session`'s; which captured request an incoming one stands for is
:mod:`replay.tools.match`'s. See :mod:`replay.tools.serve` for what each RPC answers.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb

from replay.aioserver import Handlers
from replay.capture.methods import SERVICE, path_of
from replay.capture.shm import manages_regions, parsed_regions
from replay.errors import UserError
from replay.hostport import cannot_listen, format_hostport, parse_hostport
from replay.tools.grpcstatus import grpc_metadata, status_code, status_details
from replay.tools.match import STRATEGIES
from replay.tools.serve.index import Answer, CapturedCall, LoadedCapture
from replay.tools.serve.pick import missing_answer, pick_other, unsure
from replay.tools.serve.responses import Undecodable, lenient, request_key
from replay.tools.serve.session import Session
from replay.tools.serve.stream import Stream

log = logging.getLogger("triton_tap.serve")

#: Triton's gRPC server takes and sends messages of any size; grpc's default refuses to receive one over
#: 4 MiB (RESOURCE_EXHAUSTED), so serve would turn away a request that the capture holds with Triton's answer.
MESSAGE_SIZE_UNLIMITED = (("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1))


def _handlers(server: MockTriton) -> Any:
    """The GRPCInferenceService methods, each parsing its request leniently."""
    handlers: dict[str, Any] = {}
    for method in pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods:
        request_type = getattr(pb, method.input_type.name)
        response_type = getattr(pb, method.output_type.name)
        kw = {"request_deserializer": lenient(request_type.FromString),
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
        family, kind, proto, _name, addr = infos[0]
        with socket.socket(family, kind, proto) as sock:
            sock.bind(addr)
    except OSError as e:
        raise cannot_listen(listen, e) from None


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
        self.session = Session(capture, speed, strategies, keep_ids)
        if capture.outcomes.unattributable:
            log.warning("%d captured response(s) cannot be attributed to a request (see `replay check`): "
                        "they are not replayed", len(capture.outcomes.unattributable))  # fmt: skip
        for g in capture.outcomes.gaps:
            where = f"{g.file}:{g.line}" if g.line is not None else g.file
            log.warning("capture hole: %s at %s: %s", g.kind, where, g.detail)
        self.open_streams = 0  # ModelStreamInfer calls being served (their reader tasks included)
        #: Captured non-inference calls answered already (shared with the HTTP half)
        self.other_used: set[str] = set()
        self._doubted: set[str] = set()  # calls whose unsure answer was warned of (once each)
        self._streams = itertools.count(1)
        self._server: Any = None
        self.handlers = Handlers()
        self.port = 0

    async def start(self, listen: str = "127.0.0.1:0") -> int:
        """Bind ``listen`` (port 0: a free one) and serve; returns the port."""
        host, want = parse_hostport(listen, "--listen", allow_port_zero=True)
        if want:
            # A plain bind first: grpc would log its own C-core line for a busy port, and say less.
            _check_bindable(host, want, listen)
        # grpc sets SO_REUSEPORT by default, so a second serve on a busy port would silently share it.
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0), *MESSAGE_SIZE_UNLIMITED])
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
        """Stop serving; open calls get ``grace`` seconds, and handlers still finishing as long again."""
        if self._server is not None:
            await self.handlers.stop(self._server, grace)
            self._server = None

    @property
    def unmatched(self) -> list[str]:
        """The NOT_FOUND messages so far, in order (for callers and tests)."""
        return self.session.unmatched

    # -- RPCs --------------------------------------------------------------------------------------

    async def stream_infer(self, request_iterator: AsyncIterator[Any], context: Any) -> None:
        """ModelStreamInfer (see :mod:`replay.tools.serve`)."""
        self.handlers.enter()
        stream = Stream(self.session, context, f"stream {next(self._streams)}")
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
        """ModelInfer (see :mod:`replay.tools.serve`)."""
        self.handlers.enter()
        if isinstance(request, Undecodable):
            await self.session.undecodable(context, request, "ModelInfer")
        key = request_key("unary", request)
        m = self.session.matcher.match(key)
        if m.candidate is None:
            await self.session.not_found(context, key, "ModelInfer")
            return None
        call = self.session.capture.calls[m.candidate.call]
        log.debug("ModelInfer: %s matched call %s by %s", key.describe(), call.id, m.by)
        self.session.note_shared_memory(f"ModelInfer {key.describe()}", parsed_regions(request), m.candidate)
        return await self._answer(call, call.request_t(m.candidate.seq), context, lambda r: self._unary(r, request.id),
                                  lambda: pb.ModelInferResponse(id=request.id))  # fmt: skip

    def _unary(self, answer: Answer, incoming_id: str) -> Any:
        assert answer.data is not None  # every ModelInfer response has an answer
        msg = pb.ModelInferResponse.FromString(answer.data)
        self.session.note_dataless(answer.real, "ModelInfer")
        if not self.session.keep_ids:
            msg.id = incoming_id
        return msg

    async def _answer(self, call: CapturedCall, t0: int, context: Any, build: Any, empty: Any) -> Any:
        end = call.end
        if end is None:
            await self.session.unrecorded_end(context, call.id, call.short_method)
        await self.session.pause(t0, end.t_ns if end is not None else t0)
        if end is not None and end.status != "OK":
            await asyncio.sleep(self.session.grace(end.cause))
            await context.abort(status_code(end.status), status_details(end.status, end.details),
                                tuple(grpc_metadata(end.trailers)))  # fmt: skip
        if end is not None and end.trailers:
            context.set_trailing_metadata(tuple(grpc_metadata(end.trailers)))
        first = call.first_response()
        if first is None:
            # A 0-byte answer is a message record of size 0; here the capture has none at all, yet the
            # status the client got was OK: answer that status with the empty message.
            log.warning("captured call %s (%s) has no response message: answering OK with an empty message",
                        call.id, call.short_method)  # fmt: skip
            return empty()
        return build(first)

    async def other(self, name: str, response_type: Any, request: Any, context: Any) -> Any:
        """Readiness, metadata and the other unary RPCs (see :mod:`replay.tools.serve`)."""
        self.handlers.enter()
        if isinstance(request, Undecodable):
            await self.session.undecodable(context, request, name)
        path = path_of(name)
        if manages_regions(path):
            self.session.note_region_call(name)
        call = pick_other(name, self.session.capture.calls_of(path), request, self.other_used)
        if isinstance(call, str):
            self.unmatched.append(call)
            log.warning("%s: %s", name, call)
            await context.abort(grpc.StatusCode.NOT_FOUND, call)
            return None
        self.other_used.add(call.id)
        doubt = unsure(name, call, request)
        if doubt is not None and call.id not in self._doubted:
            self._doubted.add(call.id)
            log.warning("%s: %s", name, doubt)
        refusal = missing_answer(name, call)
        if refusal is not None:
            log.warning("%s: %s", name, refusal)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, refusal)
        return await self._answer(call, call.first_request_t, context, lambda r: response_type.FromString(r.data),
                                  response_type)  # fmt: skip

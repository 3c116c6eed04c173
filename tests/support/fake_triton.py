"""A fast in-memory fake Triton (grpc.aio) for loopback tests and benchmarks.

It exists for what a real tritonserver cannot do cheaply or at all: hundreds of responses per ms,
exact control of timing, and wire shapes Triton produces only under rare conditions. Tests that
use it say so in their docstrings; behaviour tests run against the real server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc


def stream_response(model: str, rid: str, final: bool, text: bytes | None) -> pb.ModelStreamInferResponse:
    """A decoupled response as Triton 2.51 sends it."""
    r = pb.ModelInferResponse(model_name=model, model_version="1" if text is not None else "", id=rid)
    r.parameters["triton_final_response"].bool_param = final
    if text is not None:
        out = r.outputs.add(name="TEXT", datatype="BYTES", shape=[1])
        _ = out
        r.raw_output_contents.append(len(text).to_bytes(4, "little") + text)
    return pb.ModelStreamInferResponse(infer_response=r)


class FakeTriton(pb_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """Answers ModelStreamInfer with N responses per request (N from parameter ``n``, default 3).

    ModelInfer echoes its inputs; request id ``fail`` aborts with INVALID_ARGUMENT, a ``delay_ms``
    parameter delays the answer (server-side, to create in-flight windows); on streams ``gap_ms``
    waits before each response. Every call's
    metadata is kept in ``seen_metadata`` so tests can prove what reached the upstream.
    """

    def __init__(self) -> None:
        self.seen_metadata: list[tuple[tuple[str, Any], ...]] = []
        #: stream responses handed to grpc so far (grpc.aio's yield blocks on flow control)
        self.yielded = 0

    async def ServerLive(self, request: Any, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=True)

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        self.seen_metadata.append(tuple(context.invocation_metadata()))
        await context.send_initial_metadata((("x-initial", "i1"), ("x-initial-bin", b"\x00\xffi")))
        context.set_trailing_metadata((("x-trailer", "t1"), ("x-trailer-bin", b"\x01\x02")))
        if "delay_ms" in request.parameters:
            await asyncio.sleep(request.parameters["delay_ms"].int64_param / 1000)
        if request.id == "fail":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "fake: bad request, ünïcode % detail")
        r = pb.ModelInferResponse(model_name=request.model_name, model_version="1", id=request.id)
        for t in request.inputs:
            r.outputs.add(name="OUTPUT", datatype=t.datatype, shape=list(t.shape))
        r.raw_output_contents.extend(request.raw_input_contents)
        return r

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Any
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        self.seen_metadata.append(tuple(context.invocation_metadata()))
        async for req in request_iterator:
            n = req.parameters["n"].int64_param if "n" in req.parameters else 3
            size = req.parameters["size"].int64_param if "size" in req.parameters else 0
            empty_final = (
                "triton_enable_empty_final_response" in req.parameters
                and req.parameters["triton_enable_empty_final_response"].bool_param
            )
            gap_ms = req.parameters["gap_ms"].int64_param if "gap_ms" in req.parameters else 0
            for i in range(n):
                if gap_ms:
                    await asyncio.sleep(gap_ms / 1000)
                last = i == n - 1 and not empty_final
                self.yielded += 1
                yield stream_response(req.model_name, req.id, last, b"x" * size if size else b"tok%d" % i)
            if empty_final:
                yield stream_response(req.model_name, req.id, True, None)


async def start_fake(
    port: int = 0, with_servicer: bool = False, max_streams: int | None = None, tls: Any = None, mtls: bool = False
) -> Any:
    """Start the fake on 127.0.0.1; returns ``(server, port)`` (plus the servicer when asked).

    ``tls`` (a :class:`tests.support.tls.Pki`) serves TLS with its server certificate; ``mtls``
    also requires a client certificate signed by its CA.
    """
    options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    if max_streams is not None:
        options.append(("grpc.max_concurrent_streams", max_streams))
    server = grpc.aio.server(options=options)
    servicer = FakeTriton()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    if tls is None:
        port = server.add_insecure_port(f"127.0.0.1:{port}")
    else:
        creds = grpc.ssl_server_credentials(
            [(tls.read("server_key"), tls.read("server_cert"))],
            root_certificates=tls.read("ca") if mtls else None,
            require_client_auth=mtls,
        )
        port = server.add_secure_port(f"127.0.0.1:{port}", creds)
    await server.start()
    return (server, port, servicer) if with_servicer else (server, port)


if __name__ == "__main__":
    async def _main() -> None:
        server, port = await start_fake(int(__import__("sys").argv[1]))
        print(port, flush=True)
        await server.wait_for_termination()

    asyncio.run(_main())

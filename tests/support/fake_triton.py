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
    """Answers ModelStreamInfer with N responses per request (N from parameter ``n``, default 3)."""

    async def ServerLive(self, request: Any, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=True)

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        r = pb.ModelInferResponse(model_name=request.model_name, model_version="1", id=request.id)
        for t in request.inputs:
            r.outputs.add(name="OUTPUT", datatype=t.datatype, shape=list(t.shape))
        r.raw_output_contents.extend(request.raw_input_contents)
        return r

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Any
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        async for req in request_iterator:
            n = req.parameters["n"].int64_param if "n" in req.parameters else 3
            empty_final = (
                "triton_enable_empty_final_response" in req.parameters
                and req.parameters["triton_enable_empty_final_response"].bool_param
            )
            for i in range(n):
                last = i == n - 1 and not empty_final
                yield stream_response(req.model_name, req.id, last, b"tok%d" % i)
            if empty_final:
                yield stream_response(req.model_name, req.id, True, None)


async def start_fake(port: int = 0) -> tuple[grpc.aio.Server, int]:
    """Start the fake on 127.0.0.1; returns the server and its port."""
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)])
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(FakeTriton(), server)
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, port


if __name__ == "__main__":
    async def _main() -> None:
        server, port = await start_fake(int(__import__("sys").argv[1]))
        print(port, flush=True)
        await server.wait_for_termination()

    asyncio.run(_main())

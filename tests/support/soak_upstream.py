"""The soak test's fake Triton, in its own process: checks a hash on every request, hashes every response.

ModelStreamInfer: each request carries ``raw_input_contents[0]`` and its SHA-256 as string
parameter ``sha``; the server recomputes it (counting mismatches) and answers ``n`` responses,
each with fresh random bytes in ``raw_output_contents[0]`` and their SHA-256 as parameter ``sha``.
A unary ModelInfer to model ``__stats__`` returns the counters as int64 parameters. A fake, not
tritonserver: the real Python backend does ~1 ms per response, far below what a soak needs.

Run: ``python -m tests.support.soak_upstream``; prints its port, serves until SIGTERM.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import signal
from collections.abc import AsyncIterator
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc


class SoakTriton(pb_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """Counts requests, bad hashes and responses."""

    def __init__(self) -> None:
        self.requests = 0
        self.bad = 0
        self.responses = 0
        self._rand = random.Random(os.getpid())

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        r = pb.ModelInferResponse(model_name=request.model_name, id=request.id)
        for k in ("requests", "bad", "responses"):
            r.parameters[k].int64_param = getattr(self, k)
        return r

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Any
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        async for req in request_iterator:
            self.requests += 1
            data = req.raw_input_contents[0] if req.raw_input_contents else b""
            if hashlib.sha256(data).hexdigest() != req.parameters["sha"].string_param:
                self.bad += 1
            n = req.parameters["n"].int64_param
            for i in range(n):
                body = self._rand.randbytes(self._rand.randrange(0, 2048))
                r = pb.ModelInferResponse(model_name=req.model_name, model_version="1", id=req.id)
                r.parameters["triton_final_response"].bool_param = i == n - 1
                r.parameters["sha"].string_param = hashlib.sha256(body).hexdigest()
                r.outputs.add(name="OUT", datatype="UINT8", shape=[len(body)])
                r.raw_output_contents.append(body)
                self.responses += 1
                yield pb.ModelStreamInferResponse(infer_response=r)


async def _main() -> None:
    server = grpc.aio.server(options=[("grpc.max_concurrent_streams", 100_000)])
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(SoakTriton(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1)


if __name__ == "__main__":
    asyncio.run(_main())

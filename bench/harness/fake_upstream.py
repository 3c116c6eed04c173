"""A fast fake Triton for the benchmark: grpc.aio, bytes in and out, in its own process.

Same protocol as ``tests/support/fake_triton.py`` (ModelStreamInfer answers N responses per
request, N = int64 request parameter ``n``; ModelInfer echoes the inputs), but the per-response
work is taken off the CPU the proxy and the load generator share: the two response variants a
request needs (non-final, final) are serialised once per request and the same ``bytes`` object is
yielded N times (grpc passes ``bytes`` through when the handler has no serializer).

Extra request parameters (int64), all optional:

``bytes``
    size of each response's ``raw_output_contents`` (default: a 4-byte-prefixed ``tok``), used by
    the memory scenario to stream 1 MB responses.
``pace_us``
    sleep this long before each response and stamp it with parameter ``t_ns`` =
    ``time.monotonic_ns()`` at send time (CLOCK_MONOTONIC is system-wide on Linux, so the client
    computes a one-way upstream->client latency); used by the paced latency scenario.

Run: ``python -m bench.harness.fake_upstream [--port P]``; prints the port on stdout, then serves until
SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb

SERVICE = "inference.GRPCInferenceService"
_TOKEN = (3).to_bytes(4, "little") + b"tok"


def _param_int(req: pb.ModelInferRequest, name: str, default: int) -> int:
    params = req.parameters
    return params[name].int64_param if name in params else default


def _response(req: pb.ModelInferRequest, final: bool, payload: bytes) -> pb.ModelInferResponse:
    r = pb.ModelInferResponse(model_name=req.model_name, model_version="1", id=req.id)
    r.parameters["triton_final_response"].bool_param = final
    r.outputs.add(name="TEXT", datatype="BYTES", shape=[1])
    r.raw_output_contents.append(payload)
    return r


def _stream_bytes(req: pb.ModelInferRequest, final: bool, payload: bytes) -> bytes:
    out: bytes = pb.ModelStreamInferResponse(infer_response=_response(req, final, payload)).SerializeToString()
    return out


async def model_stream_infer(requests: AsyncIterator[pb.ModelInferRequest], context: Any) -> AsyncIterator[bytes]:
    async for req in requests:
        n = _param_int(req, "n", 3)
        size = _param_int(req, "bytes", 0)
        pace_us = _param_int(req, "pace_us", 0)
        payload = b"\0" * size if size else _TOKEN
        if pace_us:
            # Absolute schedule, so sleep overshoot does not lower the rate.
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            for i in range(n):
                delay = t0 + (i + 1) * pace_us / 1e6 - loop.time()
                await asyncio.sleep(delay if delay > 0 else 0)
                r = _response(req, i == n - 1, payload)
                r.parameters["t_ns"].int64_param = time.monotonic_ns()
                yield pb.ModelStreamInferResponse(infer_response=r).SerializeToString()
            continue
        if n <= 0:
            continue
        more = _stream_bytes(req, False, payload)
        for _ in range(n - 1):
            yield more
        yield _stream_bytes(req, True, payload)


async def model_infer(req: pb.ModelInferRequest, context: Any) -> bytes:
    r = pb.ModelInferResponse(model_name=req.model_name, model_version="1", id=req.id)
    for t in req.inputs:
        r.outputs.add(name="OUTPUT", datatype=t.datatype, shape=list(t.shape))
    r.raw_output_contents.extend(req.raw_input_contents)
    out: bytes = r.SerializeToString()
    return out


async def server_live(req: Any, context: Any) -> bytes:
    out: bytes = pb.ServerLiveResponse(live=True).SerializeToString()
    return out


def handler() -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(
                model_stream_infer, request_deserializer=pb.ModelInferRequest.FromString
            ),
            "ModelInfer": grpc.unary_unary_rpc_method_handler(
                model_infer, request_deserializer=pb.ModelInferRequest.FromString
            ),
            "ServerLive": grpc.unary_unary_rpc_method_handler(
                server_live, request_deserializer=pb.ServerLiveRequest.FromString
            ),
        },
    )


async def serve(port: int, max_streams: int = 100_000) -> None:
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", -1),
            ("grpc.max_send_message_length", -1),
            ("grpc.max_concurrent_streams", max_streams),
        ]
    )
    server.add_generic_rpc_handlers((handler(),))
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(bound, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(0.5)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.harness.fake_upstream")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--max-concurrent-streams", type=int, default=100_000, help="HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS")
    args = p.parse_args(argv)
    asyncio.run(serve(args.port, args.max_concurrent_streams))
    return 0


if __name__ == "__main__":
    sys.exit(main())

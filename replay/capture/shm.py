"""Triton's shared memory as a capture sees it: which calls manage regions, which requests name one.

A client using system (or CUDA) shared memory registers a region with Triton (``SystemSharedMemoryRegister``,
``POST /v2/systemsharedmemory/region/{name}/register``: the region's name, the key of the memory on the
client's host, its size) and then names the region in a tensor's parameters (``shared_memory_region``,
``shared_memory_byte_size``, ``shared_memory_offset``) instead of sending the tensor's data: Triton reads
the input from that memory and writes the output into it. The data never crosses the wire, so no capture
holds it, even with ``--payload full``: the capture holds the region's *name*. Every tool that replays a
capture reads these rules from here, never the strings themselves: ``serve`` says it writes no region,
``send`` does not hand the recording host's region keys to another Triton.

Pure: request bytes in, region names out. A gRPC request is parsed by protobuf (tritonclient's message
classes, imported when one is read): a request naming a region carries that tensor's data nowhere, so it is
small, and one that names none is told by a scan of its bytes for the parameter's name, unparsed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from replay.capture.methods import HTTP_INFERENCE, INFERENCE, PREFIX, http_call, protocol
from replay.capture.payload import inflate

#: The tensor parameter that names a shared-memory region (its data is there, not in the message).
REGION = "shared_memory_region"
#: The gRPC RPCs that register, unregister or report shared-memory regions (system and CUDA).
GRPC_CALLS = frozenset(
    PREFIX + f"{kind}SharedMemory{action}" for kind in ("System", "Cuda") for action in ("Status", "Register", "Unregister")
)
#: The HTTP paths under which Triton registers, unregisters and reports regions.
HTTP_PREFIXES = ("/v2/systemsharedmemory", "/v2/cudasharedmemory")

_REGION_BYTES = REGION.encode()


def manages_regions(method: str) -> bool:
    """The call (``call_start.method``: a gRPC path or an HTTP request line) registers, unregisters or
    reports shared-memory regions (system or CUDA)."""
    if protocol(method) == "grpc":
        return method in GRPC_CALLS
    call = http_call(method)
    return call is not None and any(call.path == p or call.path.startswith(p + "/") for p in HTTP_PREFIXES)


def parsed_regions(request: Any) -> tuple[str, ...]:
    """The regions a parsed ``ModelInferRequest`` names in its inputs' and outputs' parameters, in order."""
    out: list[str] = []
    for tensor in (*request.inputs, *request.outputs):
        if REGION in tensor.parameters:
            out.append(str(tensor.parameters[REGION].string_param))
    return tuple(out)


def json_regions(head: Mapping[str, Any]) -> tuple[str, ...]:
    """The regions an HTTP inference body's JSON names in its inputs' and outputs' ``parameters``, in order."""
    out: list[str] = []
    for side in ("inputs", "outputs"):
        tensors = head.get(side)
        for tensor in tensors if isinstance(tensors, list) else ():
            params = tensor.get("parameters") if isinstance(tensor, dict) else None
            if isinstance(params, dict) and REGION in params:
                out.append(str(params[REGION]))
    return tuple(out)


def request_regions(method: str, body: bytes, compressed: bool = False) -> tuple[str, ...]:
    """The shared-memory regions an inference request message of a call of ``method`` names (its captured
    bytes; ``compressed``: as sent with gzip or deflate), ``()`` when it names none, the call carries no
    inference request, or the bytes do not read as one."""
    if compressed:
        plain = inflate(body)
        if plain is None:
            return ()
        body = plain
    if _REGION_BYTES not in body:  # the parameter's name is in the bytes of any request naming a region
        return ()
    if protocol(method) == "grpc":
        if method not in INFERENCE:
            return ()
        # Imported here: tritonclient (and grpc under it) costs ~0.6 s, and most captures name no region.
        from google.protobuf.message import DecodeError
        from tritonclient.grpc import service_pb2 as pb

        try:
            return parsed_regions(pb.ModelInferRequest.FromString(body))
        except DecodeError:
            return ()
    call = http_call(method)
    if call is None or call.kind not in HTTP_INFERENCE:
        return ()
    try:
        head, _end = json.JSONDecoder().raw_decode(body.decode("utf-8", "replace"))
    except ValueError:
        return ()
    return json_regions(head) if isinstance(head, dict) else ()

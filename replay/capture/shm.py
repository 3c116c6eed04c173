"""Triton's shared memory as a capture sees it: which calls manage regions, which requests name one.

A client using system (or CUDA) shared memory registers a region with Triton (``SystemSharedMemoryRegister``,
``POST /v2/systemsharedmemory/region/{name}/register``: the region's name, the key of the memory on the
client's host, its size) and then names the region in a tensor's parameters (``shared_memory_region``,
``shared_memory_byte_size``, ``shared_memory_offset``) instead of sending the tensor's data: Triton reads
the input from that memory and writes the output into it. The data never crosses the wire, so no capture
holds it, even with ``--payload full``: the capture holds the region's *name*. Every tool that replays a
capture reads these rules from here, never the strings themselves: ``serve`` says it writes no region,
``send`` does not hand the recording host's region keys to another Triton.

Pure: request bytes in, region names out. A gRPC request is read by a small protobuf field walk (no
``tritonclient``: this package imports no grpc, and the walk skips the raw tensors unread).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

from replay.capture.methods import HTTP_INFERENCE, INFERENCE, PREFIX, http_call, protocol

#: The tensor parameter that names a shared-memory region (its data is there, not in the message).
REGION = "shared_memory_region"
#: The gRPC RPCs that register, unregister or report shared-memory regions (system and CUDA).
GRPC_CALLS = frozenset(
    PREFIX + f"{kind}SharedMemory{action}" for kind in ("System", "Cuda") for action in ("Status", "Register", "Unregister")
)
#: The HTTP paths under which Triton registers, unregisters and reports regions.
HTTP_PREFIXES = ("/v2/systemsharedmemory", "/v2/cudasharedmemory")

_REGION_BYTES = REGION.encode()
# ModelInferRequest: inputs = 5, outputs = 6; an input's parameters = 4, an output's = 2 (map entries:
# key = 1, value = 2); InferParameter.string_param = 3 (tritonclient's grpc_service.proto).
_INPUTS, _OUTPUTS, _INPUT_PARAMS, _OUTPUT_PARAMS, _STRING_PARAM = 5, 6, 4, 2, 3


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
        body = _inflate(body)
    if _REGION_BYTES not in body:  # the parameter's name is in the bytes of any request naming a region
        return ()
    if protocol(method) == "grpc":
        if method not in INFERENCE:
            return ()
        try:
            return _grpc_regions(body)
        except ValueError:
            return ()
    call = http_call(method)
    if call is None or call.kind not in HTTP_INFERENCE:
        return ()
    try:
        head, _end = json.JSONDecoder().raw_decode(body.decode("utf-8", "replace"))
    except ValueError:
        return ()
    return json_regions(head) if isinstance(head, dict) else ()


def _inflate(body: bytes) -> bytes:
    for inflate in (gzip.decompress, zlib.decompress, lambda b: zlib.decompress(b, -zlib.MAX_WBITS)):
        try:
            return inflate(body)
        except (OSError, EOFError, zlib.error):
            continue
    return body


def _varint(buf: memoryview, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("cut varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(buf: memoryview) -> Iterator[tuple[int, memoryview | None]]:
    """``(field number, bytes)`` of each length-delimited field of a message, ``(number, None)`` of the others."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        wire = key & 7
        if wire == 0:
            _, i = _varint(buf, i)
            value = None
        elif wire == 2:
            length, i = _varint(buf, i)
            if i + length > len(buf):
                raise ValueError("cut field")
            value, i = buf[i : i + length], i + length
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
            value = None
        else:
            raise ValueError(f"wire type {wire}")
        yield key >> 3, value


def _grpc_regions(body: bytes) -> tuple[str, ...]:
    out: list[str] = []
    for number, tensor in _fields(memoryview(body)):
        if tensor is None or number not in (_INPUTS, _OUTPUTS):
            continue
        params = _INPUT_PARAMS if number == _INPUTS else _OUTPUT_PARAMS
        for pnum, entry in _fields(tensor):
            if entry is None or pnum != params:
                continue
            fields = dict(_fields(entry))
            key, value = fields.get(1), fields.get(2)
            if key is None or bytes(key) != _REGION_BYTES:
                continue
            name = dict(_fields(value)).get(_STRING_PARAM) if value is not None else None
            out.append(bytes(name).decode("utf-8", "replace") if name is not None else "")
    return tuple(out)

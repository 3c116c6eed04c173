"""What uses Triton's shared memory, read from a capture: the region calls and the regions a request names."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from replay.capture.methods import INFER, STREAM_INFER, path_of
from replay.capture.shm import manages_regions, parsed_regions, request_regions

_text = st.text(max_size=12)
_param = st.one_of(
    st.builds(lambda v: pb.InferParameter(string_param=v), _text),
    st.builds(lambda v: pb.InferParameter(int64_param=v), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: pb.InferParameter(bool_param=v), st.booleans()),
)
_params = st.dictionaries(st.sampled_from(["shared_memory_region", "shared_memory_byte_size", "binary_data", "x"]),
                          _param, max_size=3)  # fmt: skip


@st.composite
def _requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    r = pb.ModelInferRequest(model_name=draw(_text), id=draw(_text))
    for key, value in draw(_params).items():
        r.parameters[key].CopyFrom(value)
    for _ in range(draw(st.integers(0, 3))):
        t = r.inputs.add(name=draw(_text), datatype="UINT8", shape=draw(st.lists(st.integers(0, 9), max_size=3)))
        for key, value in draw(_params).items():
            t.parameters[key].CopyFrom(value)
        r.raw_input_contents.append(draw(st.binary(max_size=40)) + draw(st.sampled_from([b"", b"shared_memory_region"])))
    for _ in range(draw(st.integers(0, 3))):
        o = r.outputs.add(name=draw(_text))
        for key, value in draw(_params).items():
            o.parameters[key].CopyFrom(value)
    return r


@given(_requests())
def test_the_regions_of_a_requests_bytes_are_its_tensors_regions(request: pb.ModelInferRequest) -> None:
    """The bytes name the regions the message's tensors name, in order (a region named by a non-string parameter
    reads as its string_param: ``""``), never one in the request's own parameters or inside tensor data; the scan
    that leaves most requests unparsed never hides one."""
    body = request.SerializeToString()
    assert request_regions(INFER, body) == parsed_regions(pb.ModelInferRequest.FromString(body))
    assert request_regions(STREAM_INFER, body) == parsed_regions(request)


def test_regions_of_grpc_and_http_requests() -> None:
    r = pb.ModelInferRequest(model_name="echo")
    r.inputs.add(name="INPUT").parameters["shared_memory_region"].string_param = "in"
    r.outputs.add(name="OUTPUT").parameters["shared_memory_region"].string_param = "out"
    body = r.SerializeToString()
    assert request_regions(INFER, body) == ("in", "out")
    assert request_regions(path_of("ModelConfig"), body) == ()  # not an inference call
    assert request_regions(INFER, gzip.compress(body), compressed=True) == ("in", "out")
    assert request_regions(INFER, zlib.compress(body), compressed=True) == ("in", "out")
    assert request_regions(INFER, body[:-3]) == ()  # cut: does not read
    http = (b'{"inputs":[{"name":"I","parameters":{"shared_memory_region":"a"}}],'
            b'"outputs":[{"name":"O","parameters":{"binary_data":true}},{"name":"P","parameters":{"shared_memory_region":"b"}}]}')  # fmt: skip
    assert request_regions("POST /v2/models/echo/infer", http) == ("a", "b")
    assert request_regions("POST /v2/models/echo/versions/2/infer", http + b"\x00binary tail") == ("a", "b")
    assert request_regions("POST /v2/models/echo/config", http) == ()
    assert request_regions("POST /v2/models/echo/infer", b'{"inputs":[{"data":["shared_memory_region"]}]}') == ()


@pytest.mark.parametrize(
    ("method", "manages"),
    [
        (path_of("SystemSharedMemoryRegister"), True),
        (path_of("SystemSharedMemoryUnregister"), True),
        (path_of("SystemSharedMemoryStatus"), True),
        (path_of("CudaSharedMemoryRegister"), True),
        (path_of("CudaSharedMemoryUnregister"), True),
        (path_of("CudaSharedMemoryStatus"), True),
        ("/other.Service/SystemSharedMemoryRegister", False),
        (INFER, False),
        ("POST /v2/systemsharedmemory/region/r/register", True),
        ("POST /v2/systemsharedmemory/unregister", True),
        ("GET /v2/systemsharedmemory/status", True),
        ("GET /v2/cudasharedmemory/region/r/status?x=1", True),
        ("GET /v2/systemsharedmemoryx", False),
        ("POST /v2/models/systemsharedmemory/infer", False),
        ("GET /v2/health/ready", False),
    ],
)
def test_the_region_calls(method: str, manages: bool) -> None:
    assert manages_regions(method) is manages

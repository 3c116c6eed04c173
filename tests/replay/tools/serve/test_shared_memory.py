"""`serve` and clients using Triton's system shared memory: the tensor data is in the client's memory, never on
the wire, so serve answers as captured and says that it writes no output region.

The captures are built as the proxy writes them (tests/data/make_golden.py's Builder) from the messages a real
Triton (the lab's, through the proxy) exchanged with tritonclient using ``set_shared_memory``; the clients are
real tritonclient (gRPC and HTTP) with real POSIX shared-memory regions.
"""

from __future__ import annotations

import logging
import os
import queue
import uuid
from collections.abc import Iterator
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb

from replay.tools.captured import summarize
from replay.tools.serve import MockTriton, load
from replay.tools.serve.httpd import HttpServe
from tests.data.make_golden import INFER, STREAM, Builder
from tests.proxy.triton.http_wire import Exchange
from tests.support.loop_thread import BackgroundLoop
from tests.support.triton_client import http_client

WAIT_S = 30.0
SIZE = 16
SYSTEM_REGISTER = "/inference.GRPCInferenceService/SystemSharedMemoryRegister"
LOGGER = "triton_tap.serve"


class _Regions:
    """An input and an output region of the client's (POSIX shared memory, as tritonclient's shared-memory helper
    makes them: the standard library's, which that helper wraps; it also imports pkg_resources, which Python
    3.12's venvs no longer carry), removed at the end."""

    def __init__(self) -> None:
        tag = f"{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.names = ("in0", "out0")
        self.keys = (f"/tap_test_in_{tag}", f"/tap_test_out_{tag}")
        self.handles = [SharedMemory(name=k.lstrip("/"), create=True, size=SIZE) for k in self.keys]
        self.handles[0].buf[:SIZE] = np.arange(1, SIZE + 1, dtype=np.uint8).tobytes()
        # What the output region held before: Triton would overwrite it with the echo; serve must leave it.
        self.handles[1].buf[:SIZE] = np.full(SIZE, 7, dtype=np.uint8).tobytes()

    def output(self) -> list[int]:
        return list(bytes(self.handles[1].buf[:SIZE]))

    def close(self) -> None:
        for h in self.handles:
            h.close()
            h.unlink()


@pytest.fixture
def regions() -> Iterator[_Regions]:
    r = _Regions()
    try:
        yield r
    finally:
        r.close()


def _shm_request(rid: str, regions: _Regions | None) -> Any:
    """The ModelInferRequest tritonclient sends for the echo model; with ``regions``, as ``set_shared_memory``
    writes it (no data: the regions' names, sizes), else with the input's data."""
    r = pb.ModelInferRequest(model_name="echo", id=rid)
    t = r.inputs.add(name="INPUT", datatype="UINT8", shape=[SIZE])
    o = r.outputs.add(name="OUTPUT")
    if regions is None:
        r.raw_input_contents.append(np.arange(1, SIZE + 1, dtype=np.uint8).tobytes())
        return r
    for tensor, name in ((t, regions.names[0]), (o, regions.names[1])):
        tensor.parameters["shared_memory_region"].string_param = name
        tensor.parameters["shared_memory_byte_size"].int64_param = SIZE
    return r


def _shm_response(rid: str) -> Any:
    """What Triton answers a request whose output is in shared memory: the output named, its data empty."""
    r = pb.ModelInferResponse(model_name="echo", model_version="1", id=rid)
    r.outputs.add(name="OUTPUT", datatype="UINT8", shape=[SIZE])
    r.raw_output_contents.append(b"")
    return r


def _grpc_capture(tmp: Path, regions: _Regions, payload: str, *, stream: bool = False) -> Path:
    b = Builder(payload=payload).start()
    n = 0
    for name, key in zip(regions.names, regions.keys, strict=True):
        n += 1
        b.call(f"c1.{n}", SYSTEM_REGISTER)
        b.ask(f"c1.{n}", pb.SystemSharedMemoryRegisterRequest(name=name, key=key, byte_size=SIZE),
              pb.SystemSharedMemoryRegisterResponse())  # fmt: skip
        b.end(f"c1.{n}")
    call = f"c1.{n + 1}"
    b.call(call, STREAM if stream else INFER)
    for rid in ("s1", "s2") if stream else ("s1",):
        b.infer_message(call, _shm_request(rid, regions))
        answer = _shm_response(rid)
        if stream:
            answer.parameters["triton_final_response"].bool_param = True
            b.infer_message(call, pb.ModelStreamInferResponse(infer_response=answer))
        else:
            b.infer_message(call, answer)
    if stream:
        b.half_close(call)
    b.end(call)
    path = tmp / f"shm-{payload}.jsonl"
    path.write_bytes(b.finish().render())
    return path


def _serve_grpc(loop: BackgroundLoop, path: Path) -> tuple[MockTriton, str]:
    server = MockTriton(load([path]), speed=None)
    port = loop.run(server.start("127.0.0.1:0"))
    return server, f"127.0.0.1:{port}"


def _shm_infer_inputs(regions: _Regions) -> tuple[list[Any], list[Any]]:
    x = grpcclient.InferInput("INPUT", [SIZE], "UINT8")
    x.set_shared_memory(regions.names[0], SIZE)
    o = grpcclient.InferRequestedOutput("OUTPUT")
    o.set_shared_memory(regions.names[1], SIZE)
    return [x], [o]


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and text in r.getMessage()]


@pytest.mark.parametrize("payload", ["full", "meta"])
def test_a_grpc_infer_naming_shared_memory_is_answered_as_captured_and_says_the_region_is_not_written(
    loop: BackgroundLoop, regions: _Regions, tmp_path: Path, caplog: pytest.LogCaptureFixture, payload: str
) -> None:
    """Live Triton wrote the echo into the output region; serve cannot (the data was never on the wire): the call
    is OK as captured, the region keeps what it held, and one warning per call says so, whatever the capture."""
    server, url = _serve_grpc(loop, _grpc_capture(tmp_path, regions, payload))
    client = grpcclient.InferenceServerClient(url)
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            if payload == "full":  # a meta capture holds no bytes of a register answer (refused as for metadata)
                for name, key in zip(regions.names, regions.keys, strict=True):
                    client.register_system_shared_memory(name, key, SIZE)
            inputs, outputs = _shm_infer_inputs(regions)
            result = client.infer("echo", inputs, outputs=outputs, request_id="s1")
            client.infer("echo", inputs, outputs=outputs, request_id="s1")  # a second call: warned again
    finally:
        client.close()
        loop.run(server.stop(0))
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT"]
    assert regions.output() == [7] * SIZE  # left as it was
    said = _warnings(caplog, "the request names shared-memory region(s) 'in0', 'out0'")
    assert len(said) == 2, caplog.text
    assert "not in the capture" in said[0] and "does not write the output region" in said[0]
    assert said[0].startswith("ModelInfer unary request id 's1' of model 'echo'")
    if payload == "full":
        assert len(_warnings(caplog, "serve maps no shared memory")) == 1  # the two registrations: once


def test_a_captured_shared_memory_request_matched_by_a_client_sending_data_says_the_answer_has_none(
    loop: BackgroundLoop, regions: _Regions, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The client now sends its data, but the captured request had its tensors in shared memory: the captured
    answer carries no output data, which the client must not take for the model's answer."""
    server, url = _serve_grpc(loop, _grpc_capture(tmp_path, regions, "full"))
    client = grpcclient.InferenceServerClient(url)
    try:
        x = grpcclient.InferInput("INPUT", [SIZE], "UINT8")
        x.set_data_from_numpy(np.arange(1, SIZE + 1, dtype=np.uint8))
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            client.infer("echo", [x], request_id="s1")
    finally:
        client.close()
        loop.run(server.stop(0))
    (said,) = _warnings(caplog, "shared-memory region")
    assert said.startswith("ModelInfer unary request id 's1' of model 'echo': captured call c1.3's request named "
                           "shared-memory region(s) 'in0', 'out0'")  # fmt: skip
    assert "carries no data of the outputs" in said


def test_a_stream_of_shared_memory_requests_warns_once(
    loop: BackgroundLoop, regions: _Regions, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server, url = _serve_grpc(loop, _grpc_capture(tmp_path, regions, "full", stream=True))
    got: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            client.start_stream(callback=lambda result, error: got.put(error or result))
            inputs, outputs = _shm_infer_inputs(regions)
            for rid in ("s1", "s2"):
                client.async_stream_infer("echo", inputs, outputs=outputs, request_id=rid)
            answers = [got.get(timeout=WAIT_S) for _ in range(2)]
            client.stop_stream()
    finally:
        client.close()
        loop.run(server.stop(0))
    assert [a.get_response().id for a in answers] == ["s1", "s2"]
    assert regions.output() == [7] * SIZE
    (said,) = _warnings(caplog, "the request names shared-memory region(s)")
    assert said.startswith("ModelStreamInfer stream 1 stream request id 's1'")


def test_a_request_without_shared_memory_gets_no_such_warning(
    loop: BackgroundLoop, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    b = Builder(payload="full").start()
    b.call("c1.1", INFER)
    b.infer_message("c1.1", _shm_request("p1", None))
    answer = pb.ModelInferResponse(model_name="echo", model_version="1", id="p1")
    answer.outputs.add(name="OUTPUT", datatype="UINT8", shape=[SIZE])
    answer.raw_output_contents.append(np.arange(1, SIZE + 1, dtype=np.uint8).tobytes())
    b.infer_message("c1.1", answer)
    b.end("c1.1")
    path = tmp_path / "plain.jsonl"
    path.write_bytes(b.finish().render())
    assert [c.regions for c in summarize([path]).candidates] == [()]
    server, url = _serve_grpc(loop, path)
    client = grpcclient.InferenceServerClient(url)
    try:
        x = grpcclient.InferInput("INPUT", [SIZE], "UINT8")
        x.set_data_from_numpy(np.arange(1, SIZE + 1, dtype=np.uint8))
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            result = client.infer("echo", [x], request_id="p1")
    finally:
        client.close()
        loop.run(server.stop(0))
    assert result.as_numpy("OUTPUT").tolist() == list(range(1, SIZE + 1))
    assert _warnings(caplog, "shared") == []


def test_the_captured_requests_regions_are_read_from_a_full_capture_only(regions: _Regions, tmp_path: Path) -> None:
    """What the capture can tell: the request bytes of ``--payload full`` name the regions; a meta capture's
    labels do not (serve still reads the incoming request's)."""
    full = summarize([_grpc_capture(tmp_path, regions, "full")])
    meta = summarize([_grpc_capture(tmp_path, regions, "meta")])
    assert [c.regions for c in full.candidates] == [("in0", "out0")]
    assert [c.regions for c in meta.candidates] == [()]


# -- HTTP ----------------------------------------------------------------------------------------------


def _http_capture(tmp: Path, regions: _Regions) -> Path:
    """Register both regions, infer with both in shared memory: the exchanges the lab's Triton had with
    tritonclient.http through the proxy (its infer answer names the output, no data)."""
    json_headers = [(b"host", b"localhost"), (b"content-type", b"application/json")]
    registers = [Exchange(method=f"POST /v2/systemsharedmemory/region/{name}/register", headers=json_headers,
                          body=f'{{"key":"{key}","offset":0,"byte_size":{SIZE}}}'.encode(), status=200,
                          reply_headers=[(b"content-length", b"0")], reply=b"", clean_end=True)
                 for name, key in zip(regions.names, regions.keys, strict=True)]  # fmt: skip
    body = (b'{"id":"h1","inputs":[{"name":"INPUT","shape":[16],"datatype":"UINT8","parameters":'
            b'{"shared_memory_region":"in0","shared_memory_byte_size":16}}],"outputs":[{"name":"OUTPUT",'
            b'"parameters":{"binary_data":false,"shared_memory_region":"out0","shared_memory_byte_size":16}}]}')  # fmt: skip
    reply = b'{"id":"h1","model_name":"echo","model_version":"1","outputs":[{"name":"OUTPUT","datatype":"UINT8","shape":[16]}]}'
    infer = Exchange(method="POST /v2/models/echo/infer", headers=json_headers, body=body, status=200,
                     reply_headers=[(b"content-type", b"application/json"),
                                    (b"content-length", str(len(reply)).encode())],
                     reply=reply, clean_end=True)  # fmt: skip
    b = Builder(payload="full").start(grpc=False, http=True)
    for i, x in enumerate([*registers, infer]):
        call = f"c1.{i + 1}"
        b.http_call(call, x)
        b.http_request(call, x)
        b.http_reply(call, x)
        b.http_end(call, x)
    path = tmp / "shm-http.jsonl"
    path.write_bytes(b.finish().render())
    return path


def test_an_http_infer_naming_shared_memory_is_answered_as_captured_and_says_the_region_is_not_written(
    loop: BackgroundLoop, regions: _Regions, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mock = MockTriton(load([_http_capture(tmp_path, regions)]), speed=None)
    http = HttpServe(mock.session, mock.other_used)
    port = loop.run(http.start("127.0.0.1:0"))
    try:
        with http_client(f"127.0.0.1:{port}", network_timeout=WAIT_S) as client, caplog.at_level(logging.WARNING,
                                                                                                  logger=LOGGER):  # fmt: skip
            for name, key in zip(regions.names, regions.keys, strict=True):
                client.register_system_shared_memory(name, key, SIZE)
            x = httpclient.InferInput("INPUT", [SIZE], "UINT8")
            x.set_shared_memory(regions.names[0], SIZE)
            o = httpclient.InferRequestedOutput("OUTPUT", binary_data=False)
            o.set_shared_memory(regions.names[1], SIZE)
            result = client.infer("echo", [x], outputs=[o], request_id="h1")
    finally:
        loop.run(http.stop())
    assert result.get_response()["outputs"][0]["name"] == "OUTPUT"
    assert regions.output() == [7] * SIZE
    (said,) = _warnings(caplog, "the request names shared-memory region(s) 'in0', 'out0'")
    assert said.startswith("POST /v2/models/echo/infer http infer request id 'h1'") and "not in the capture" in said
    (registered,) = _warnings(caplog, "serve maps no shared memory")
    assert registered.startswith("POST /v2/systemsharedmemory/region/in0/register: answered as captured")

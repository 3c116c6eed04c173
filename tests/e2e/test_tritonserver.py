"""End-to-end behaviour of the real Triton server and of the packaged models.

These pin what a client sees directly from Triton, which is what the proxy must
reproduce. Every wait is a bounded wait on a condition: the machine is small and noisy.
"""

from __future__ import annotations

import queue
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from proxy.lab.tritonserver import TritonServer
from tests.support.triton_client import token_inputs

pytestmark = pytest.mark.timeout(300)

MODELS = (
    "echo", "fail_midstream", "silent", "steps_serial", "steps_serial_ignore_cancel", "steps_unary", "tokens",
    "tokens_ignore_cancel", "scripted",
)  # fmt: skip
EVENT_TIMEOUT_S = 30.0
LOG_TIMEOUT_S = 30.0

Event = tuple[grpcclient.InferResult | None, InferenceServerException | None]


class StreamRecorder:
    """Collects stream callback events in arrival order."""

    def __init__(self) -> None:
        self.events: queue.Queue[Event] = queue.Queue()

    def __call__(
        self,
        result: grpcclient.InferResult | None = None,
        error: InferenceServerException | None = None,
    ) -> None:
        self.events.put((result, error))

    def next(self, timeout: float = EVENT_TIMEOUT_S) -> Event:
        return self.events.get(timeout=timeout)

    def drain(self) -> list[Event]:
        drained: list[Event] = []
        while True:
            try:
                drained.append(self.events.get_nowait())
            except queue.Empty:
                return drained


@pytest.fixture
def client(triton: TritonServer) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(triton.grpc_url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def stream(client: grpcclient.InferenceServerClient) -> Iterator[StreamRecorder]:
    recorder = StreamRecorder()
    client.start_stream(callback=recorder)
    try:
        yield recorder
    finally:
        client.stop_stream(cancel_requests=True)








def _is_final(result: grpcclient.InferResult) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


def _texts(result: grpcclient.InferResult) -> list[bytes] | None:
    array = result.as_numpy("TEXT")
    return None if array is None else [bytes(item) for item in array]


def _wait_for_log(triton: TritonServer, needle: str, timeout: float = LOG_TIMEOUT_S) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = triton.log_path.read_text(encoding="utf-8", errors="replace")
        for line in text.splitlines():
            if needle in line:
                return line
        if time.monotonic() >= deadline:
            raise AssertionError(f"{needle!r} not in {triton.log_path} after {timeout}s")
        time.sleep(0.1)


def test_server_live_ready_and_all_models_ready(
    client: grpcclient.InferenceServerClient,
) -> None:
    """The server is live and ready on loopback and serves exactly the five packaged models."""
    assert client.is_server_live()
    assert client.is_server_ready()
    index = client.get_model_repository_index()
    assert {(m.name, m.state) for m in index.models} == {(m, "READY") for m in MODELS}
    for model in MODELS:
        assert client.is_model_ready(model), model


def test_tokens_streams_texts_then_one_empty_final(
    client: grpcclient.InferenceServerClient, stream: StreamRecorder
) -> None:
    """tokens sends MAX_TOKENS non-final texts, then one empty final, all with the request id."""
    client.async_stream_infer(
        "tokens",
        token_inputs("hi", max_tokens=4),
        request_id="req-tokens",
        enable_empty_final_response=True,
    )
    events = [stream.next() for _ in range(5)]
    client.stop_stream()  # waits for the stream to end: anything else would be queued now
    assert stream.drain() == []
    for i, (result, error) in enumerate(events[:4]):
        assert error is None
        assert result is not None
        assert result.get_response().id == "req-tokens"
        assert not _is_final(result)
        assert _texts(result) == [f"hi-{i}".encode()]
    final, error = events[4]
    assert error is None
    assert final is not None
    assert final.get_response().id == "req-tokens"
    assert _is_final(final)
    assert len(final.get_response().outputs) == 0
    assert _texts(final) is None


def test_two_requests_on_one_stream_interleave(
    client: grpcclient.InferenceServerClient, stream: StreamRecorder
) -> None:
    """Two requests on one stream are answered concurrently: b's texts arrive before a's final."""
    # 20 tokens 25 ms apart give a ~0.5 s window, wide enough for b to start on a busy box.
    for request_id in ("a", "b"):
        client.async_stream_infer(
            "tokens",
            token_inputs(request_id, max_tokens=20, delay_ms=25),
            request_id=request_id,
            enable_empty_final_response=True,
        )
    order: list[tuple[str, bool]] = []
    finals: set[str] = set()
    while finals != {"a", "b"}:
        result, error = stream.next()
        assert error is None
        assert result is not None
        request_id = result.get_response().id
        final = _is_final(result)
        order.append((request_id, final))
        if final:
            finals.add(request_id)
        else:
            count = sum(1 for rid, fin in order if rid == request_id and not fin)
            assert _texts(result) == [f"{request_id}-{count - 1}".encode()]
    assert sum(1 for rid, fin in order if rid == "a" and not fin) == 20
    assert sum(1 for rid, fin in order if rid == "b" and not fin) == 20
    first_b = order.index(("b", False))
    a_final = order.index(("a", True))
    last_a_text = max(i for i, event in enumerate(order) if event == ("a", False))
    assert first_b < a_final, order
    assert first_b < last_a_text, order


def test_silent_gives_exactly_one_empty_final(client: grpcclient.InferenceServerClient, stream: StreamRecorder) -> None:
    """silent produces no data: exactly one empty, final response carrying the request id."""
    client.async_stream_infer(
        "silent",
        token_inputs("quiet"),
        request_id="req-silent",
        enable_empty_final_response=True,
    )
    result, error = stream.next()
    client.stop_stream()
    assert stream.drain() == []
    assert error is None
    assert result is not None
    assert result.get_response().id == "req-silent"
    assert _is_final(result)
    assert len(result.get_response().outputs) == 0


def test_fail_midstream_texts_then_error_without_final_result(
    client: grpcclient.InferenceServerClient, stream: StreamRecorder
) -> None:
    """fail_midstream: 2 texts, then error=InferenceServerException(message) and no final result."""
    client.async_stream_infer(
        "fail_midstream",
        token_inputs("x", max_tokens=5),
        request_id="req-fail",
        enable_empty_final_response=True,
    )
    events = [stream.next() for _ in range(3)]
    client.stop_stream()
    # tritonclient turns the error message into the whole event: the final flag and the
    # request id that travel with it on the wire (see the next test) are dropped.
    assert stream.drain() == []
    for i, (result, error) in enumerate(events[:2]):
        assert error is None
        assert result is not None
        assert result.get_response().id == "req-fail"
        assert not _is_final(result)
        assert _texts(result) == [f"x-{i}".encode()]
    result, error = events[2]
    assert result is None
    assert isinstance(error, InferenceServerException)
    assert error.message() == "fail_midstream: backend failure after 2 responses"
    assert error.status() is None


def test_fail_midstream_wire_error_carries_id_and_final_flag(triton: TritonServer) -> None:
    """On the gRPC wire the error message comes with an infer_response holding id and final=true."""
    request = service_pb2.ModelInferRequest(model_name="fail_midstream", id="req-wire")
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    prompt = request.inputs.add(name="PROMPT", datatype="BYTES", shape=[1])
    prompt.contents.bytes_contents.append(b"w")
    max_tokens = request.inputs.add(name="MAX_TOKENS", datatype="INT32", shape=[1])
    max_tokens.contents.int_contents.append(5)
    with grpc.insecure_channel(triton.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(iter([request]), timeout=EVENT_TIMEOUT_S)
        # The request iterator ends after one message; the server still answers in full.
        responses = list(call)
    assert [r.error_message for r in responses] == [
        "",
        "",
        "fail_midstream: backend failure after 2 responses",
    ]
    last = responses[-1].infer_response
    assert last.id == "req-wire"
    assert last.model_name == "fail_midstream"
    assert last.parameters["triton_final_response"].bool_param
    assert len(last.outputs) == 0
    for response in responses[:2]:
        assert response.infer_response.id == "req-wire"
        assert not response.infer_response.parameters["triton_final_response"].bool_param


def test_echo_round_trips_20mb_tensor(client: grpcclient.InferenceServerClient) -> None:
    """echo returns a 20 MB+ uint8 tensor unchanged (no gRPC or shared-memory size limit hit)."""
    data = np.random.default_rng(1234).integers(0, 256, size=20 * 1024 * 1024 + 7, dtype=np.uint8)
    tensor = grpcclient.InferInput("INPUT", [data.size], "UINT8")
    tensor.set_data_from_numpy(data)
    result = client.infer("echo", [tensor], request_id="req-echo", client_timeout=120)
    output = result.as_numpy("OUTPUT")
    assert result.get_response().id == "req-echo"
    assert output is not None
    assert output.dtype == np.uint8
    assert np.array_equal(output, data)


def test_cancel_mid_stream_stops_tokens_model(
    triton: TritonServer, client: grpcclient.InferenceServerClient, stream: StreamRecorder
) -> None:
    """stop_stream(cancel_requests=True) mid-generation makes tokens log its cancellation."""
    request_id = f"cancel-{uuid.uuid4().hex[:8]}"
    client.async_stream_infer(
        "tokens",
        token_inputs("c", max_tokens=100_000, delay_ms=10),
        request_id=request_id,
        enable_empty_final_response=True,
    )
    result, error = stream.next()  # generation is under way
    assert error is None and result is not None and not _is_final(result)
    client.stop_stream(cancel_requests=True)
    line = _wait_for_log(triton, f"tokens: request {request_id} cancelled after ")
    sent = int(line.rsplit("cancelled after ", 1)[1].split()[0])
    assert 1 <= sent < 100_000
    # The client's own cancel reaches the callback as a CANCELLED error, never as a final.
    while True:
        result, error = stream.next()
        if error is not None:
            break
        assert result is not None and not _is_final(result)
    assert error.status() == "StatusCode.CANCELLED"
    assert error.message() == "Locally cancelled by application!"


def test_cancel_does_not_stop_tokens_ignore_cancel(
    triton: TritonServer, client: grpcclient.InferenceServerClient, stream: StreamRecorder
) -> None:
    """tokens_ignore_cancel keeps computing to MAX_TOKENS after the client cancelled."""
    request_id = f"ignore-{uuid.uuid4().hex[:8]}"
    client.async_stream_infer(
        "tokens_ignore_cancel",
        token_inputs("i", max_tokens=30, delay_ms=10),
        request_id=request_id,
        enable_empty_final_response=True,
    )
    result, error = stream.next()
    assert error is None and result is not None and not _is_final(result)
    client.stop_stream(cancel_requests=True)
    _wait_for_log(triton, f"tokens_ignore_cancel: request {request_id} done 30")


def test_kill_then_restart_on_same_ports(triton: TritonServer) -> None:
    """kill() takes the server down hard; restart() brings it back ready on the same ports."""
    grpc_url, http_url, metrics_url = triton.grpc_url, triton.http_url, triton.metrics_url
    old_pid = triton.pid
    triton.kill()
    assert not triton.running
    assert triton.pid is None
    probe = grpcclient.InferenceServerClient(grpc_url)
    try:
        with pytest.raises(InferenceServerException):
            probe.is_server_live(client_timeout=5)
    finally:
        probe.close()

    triton.restart()
    assert triton.running
    assert triton.pid is not None and triton.pid != old_pid
    assert (triton.grpc_url, triton.http_url, triton.metrics_url) == (
        grpc_url,
        http_url,
        metrics_url,
    )
    fresh = grpcclient.InferenceServerClient(triton.grpc_url)
    try:
        assert fresh.is_server_ready()
        for model in MODELS:
            assert fresh.is_model_ready(model), model
    finally:
        fresh.close()


def test_a_port_chosen_free_but_taken_before_triton_binds_it_is_chosen_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Servers started in parallel on a busy machine: a port the launcher chose free is taken by another
    process before Triton binds it. The real tritonserver fails to start on it; the launcher chooses
    again (only ports it chose: a port the caller named is the caller's)."""
    from proxy.lab import tritonserver as ts

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    real, choices = ts._free_ports, []

    def first_choice_taken(count: int) -> list[int]:
        ports = real(count)
        choices.append(ports)
        return [ports[0], taken, *ports[2:]] if len(choices) == 1 else ports

    monkeypatch.setattr(ts, "_free_ports", first_choice_taken)
    server = ts.TritonServer(ts.model_repository(), tmp_path / "triton")
    try:
        server.start(timeout=180)
        assert len(choices) == 2 and server.http_url != f"http://127.0.0.1:{taken}"
        assert "already in use" in server.log_path.read_text(errors="replace")  # the first launch's failure
        assert "echo" in server.ready_models()
    finally:
        server.stop()
        held.close()

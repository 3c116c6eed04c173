"""The relay on loopback in front of a fake in-memory Triton (fast, controllable upstream).

Behaviour against the real tritonserver is pinned in tests/e2e; these tests cover what the fake
makes cheap to observe: exactly what reached the upstream, trailers, payload capture.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc
from tritonclient.utils import InferenceServerException

from proxy.ops.server import RecordingProxy
from replay.capture import events as ev
from tests.support.capture import calls_by_method, of_kind, records, stored_payload
from tests.support.proxy import stop_proxy as bg_stop

INFER = "/inference.GRPCInferenceService/ModelInfer"


def _infer_with_call(target: str, rid: str, metadata: list[tuple[str, Any]]) -> tuple[Any, Any]:
    """Raw stub call: tritonclient does not expose initial metadata and trailers."""
    with grpc.insecure_channel(target) as ch:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        req = pb.ModelInferRequest(model_name="echo", id=rid)
        req.inputs.add(name="INPUT", datatype="UINT8", shape=[3])
        req.raw_input_contents.append(b"\x01\x02\x03")
        try:
            resp, call = stub.ModelInfer.with_call(req, metadata=metadata, timeout=10)
        except grpc.RpcError as e:
            return None, e
        return resp, call


def _wire_view(result: tuple[Any, Any]) -> tuple[Any, ...]:
    resp, call = result
    return (
        resp.SerializeToString() if resp is not None else None,
        call.code(),
        call.details(),
        tuple(call.initial_metadata() or ()),
        tuple(call.trailing_metadata() or ()),
    )


def test_metadata_reaches_upstream_unchanged(fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]) -> None:
    """Custom, -bin and user-agent headers reach the upstream byte for byte."""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    md = [("x-custom", "v1"), ("x-blob-bin", b"\x00\xffbin"), ("authorization", "Bearer s3cret")]
    _infer_with_call(f"127.0.0.1:{fake_upstream.port}", "direct", md)
    _infer_with_call(f"127.0.0.1:{proxy.port}", "proxied", md)
    direct, proxied = fake_upstream.servicer.seen_metadata[-2:]
    assert dict(direct) == dict(proxied)
    assert dict(proxied)["user-agent"].startswith("grpc-python/")


def test_status_details_initial_metadata_and_trailers_are_identical(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """Responses, status, details (non-ASCII, %), initial metadata and -bin trailers equal direct."""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    for rid in ("ok", "fail"):
        direct = _infer_with_call(f"127.0.0.1:{fake_upstream.port}", rid, [])
        via = _infer_with_call(f"127.0.0.1:{proxy.port}", rid, [])
        assert _wire_view(direct) == _wire_view(via)
    assert _wire_view(via)[1] == grpc.StatusCode.INVALID_ARGUMENT


def test_unknown_method_is_forwarded(fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]) -> None:
    """A method the proxy does not know is forwarded; the upstream's UNIMPLEMENTED comes back."""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    codes = []
    for port in (fake_upstream.port, proxy.port):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            with pytest.raises(grpc.RpcError) as info:
                ch.unary_unary("/no.Such/Method")(b"\x08\x01", timeout=10)
            codes.append((info.value.code(), info.value.details()))
    assert codes[0] == codes[1] and codes[0][0] == grpc.StatusCode.UNIMPLEMENTED
    bg_stop(proxy)
    recs = records(proxy.capture_path)
    (call,) = calls_by_method(recs, "/no.Such/Method")
    (end,) = of_kind(recs, "call_end", call)
    assert end["status"] == "UNIMPLEMENTED" and end["cause"] == "error"


def test_capture_redacts_and_keeps_headers(fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]) -> None:
    """call_start keeps every header in wire order but never an authorization value in clear."""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    md = [("x-custom", "v1"), ("authorization", "Bearer s3cret"), ("my-token", "t0k"), ("x-blob-bin", b"\x00")]
    began = time.monotonic()
    _infer_with_call(f"127.0.0.1:{proxy.port}", "r", md)
    took_ms = (time.monotonic() - began) * 1000
    bg_stop(proxy)
    text = proxy.capture_path.read_text()
    assert "s3cret" not in text and "t0k" not in text
    (start,) = of_kind(records(proxy.capture_path), "call_start")
    meta = dict(start["metadata"])
    assert meta["authorization"] == "<redacted>" and meta["my-token"] == "<redacted>"
    assert meta["x-custom"] == "v1" and meta["x-blob-bin"] == "AA"
    # grpc-timeout is what is left of the client's 10 s when its headers leave: less by at most the call's time
    # (not a fixed margin: on a loaded machine the headers can leave a good part of a second later). grpc
    # reckons it on a cached clock that can lag, so it may read a hair over 10 s, which it rounds up to its
    # next unit at that size, 100 ms.
    assert meta[":path"] == INFER and 10_000 - took_ms - 1 <= start["timeout_ms"] <= 10_100


def test_stream_records_ids_finals_and_half_close(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """Each stream message is recorded with request id, raw final flag and outputs, then half_close."""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{proxy.port}")
    import queue

    q: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: q.put((result, error)))
    for rid in ("a", "b"):
        inp = grpcclient.InferInput("PROMPT", [1], "BYTES")
        inp.set_data_from_numpy(np.array([b"p"], dtype=object))
        client.async_stream_infer("m", [inp], request_id=rid, parameters={"n": 2}, enable_empty_final_response=True)
    got = [q.get(timeout=10) for _ in range(6)]
    assert all(e is None for _, e in got)
    client.stop_stream()
    client.close()
    bg_stop(proxy)
    recs = records(proxy.capture_path)
    (call,) = calls_by_method(recs, "ModelStreamInfer")
    s2c = [r for r in of_kind(recs, "message", call) if r["dir"] == "s2c"]
    assert [(r["request_id"], r["final"], r["outputs"]) for r in s2c if r["request_id"] == "a"] == [
        ("a", False, ["TEXT"]),
        ("a", False, ["TEXT"]),
        ("a", True, []),
    ]
    assert [r["index"] for r in s2c] == list(range(6))
    c2s = [r for r in of_kind(recs, "message", call) if r["dir"] == "c2s"]
    assert [(r["request_id"], r["enable_empty_final"]) for r in c2s] == [("a", True), ("b", True)]
    assert len(of_kind(recs, "half_close", call)) == 1
    (end,) = of_kind(recs, "call_end", call)
    assert end["cause"] == "ok" and end["status"] == "OK" and end["messages_s2c"] == 6


def test_payload_full_stores_message_and_hash(fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]) -> None:
    """--payload full keeps each message (in the side file) with its SHA-256; the cap cuts and says so."""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", payload="full", payload_cap=10)
    _infer_with_call(f"127.0.0.1:{proxy.port}", "r", [])
    bg_stop(proxy)
    (req,) = [r for r in of_kind(records(proxy.capture_path), "message") if r["dir"] == "c2s"]
    expected = pb.ModelInferRequest(model_name="echo", id="r")
    expected.inputs.add(name="INPUT", datatype="UINT8", shape=[3])
    expected.raw_input_contents.append(b"\x01\x02\x03")
    raw = expected.SerializeToString()
    assert req["payload_sha256"] == hashlib.sha256(raw).hexdigest()
    assert stored_payload(proxy.capture_path, req) == raw[:10] and req["payload_truncated"] is True


def test_large_tensor_round_trips(fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]) -> None:
    """A 64 MB tensor passes both ways unchanged (no message-size limit of the proxy's own)."""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{proxy.port}")
    data = np.random.default_rng(1).integers(0, 255, 64 * 1024 * 1024, dtype=np.uint8)
    inp = grpcclient.InferInput("INPUT", [data.size], "UINT8")
    inp.set_data_from_numpy(data)
    out = client.infer("echo", [inp], client_timeout=60).as_numpy("OUTPUT")
    client.close()
    assert np.array_equal(out, data)
    bg_stop(proxy)
    msgs = of_kind(records(proxy.capture_path), "message")
    assert {r["dir"]: r["size"] > data.size for r in msgs} == {"c2s": True, "s2c": True}
    assert all(r["decode_error"] is None and r["model"] == "echo" for r in msgs)


def test_unary_cancel_is_recorded_with_in_flight(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """async_infer + cancel() on a slow call: cancel record with the request id in flight."""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{proxy.port}")
    inp = grpcclient.InferInput("INPUT", [1], "UINT8")
    inp.set_data_from_numpy(np.zeros(1, dtype=np.uint8))
    import queue

    q: queue.Queue[Any] = queue.Queue()
    fut = client.async_infer(
        "echo", [inp], callback=lambda result, error: q.put(error), request_id="slow1", parameters={"delay_ms": 5000}
    )
    _wait_for(lambda: any(r["kind"] == "message" for r in _live_records(proxy)))
    fut.cancel()
    err = q.get(timeout=10)
    assert isinstance(err, InferenceServerException) and "CANCELLED" in str(err.status())
    client.close()
    bg_stop(proxy)
    recs = records(proxy.capture_path)
    (cancel,) = of_kind(recs, "cancel")
    assert cancel["cause"] == "client_cancel" and cancel["in_flight"] == ["slow1"]
    assert cancel["forwarded_upstream"] is True and cancel["rst_code"] == 8
    (end,) = of_kind(recs, "call_end", cancel["call"])
    assert end["status"] == "CANCELLED" and end["cause"] == "client_cancel"


def _live_records(proxy: RecordingProxy) -> list[dict[str, Any]]:
    try:
        return records(proxy.capture_path)
    except ValueError:  # a line being written right now
        return []


def _wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def test_upstream_stream_limit_reaches_the_client_end_to_end(bg: Any, start_proxy: Callable[..., RecordingProxy]) -> None:
    """Upstream allows 2 streams; 6 concurrent calls: the client itself keeps to the limit (SETTINGS pass
    through); the proxy refuses nothing, and what the upstream refuses is recorded as its own REFUSED_STREAM."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.support.fake_triton import start_fake

    server, port = bg.run(start_fake(0, max_streams=2))
    try:
        proxy = start_proxy(f"127.0.0.1:{port}")
        with grpc.insecure_channel(f"127.0.0.1:{proxy.port}") as ch:
            stub = pb_grpc.GRPCInferenceServiceStub(ch)

            def call(i: int) -> grpc.StatusCode:
                req = pb.ModelInferRequest(model_name="echo", id=f"lim{i}")
                req.parameters["delay_ms"].int64_param = 300
                try:
                    stub.ModelInfer(req, timeout=20)
                    return grpc.StatusCode.OK
                except grpc.RpcError as e:
                    return e.code()

            # One call first, so the upstream's SETTINGS (max 2 streams) have reached the client.
            assert call(98) == grpc.StatusCode.OK
            with ThreadPoolExecutor(6) as pool:
                codes = list(pool.map(call, range(6)))
            # grpc-core sometimes opens a stream the server still counts as busy, and the server
            # refuses it (UNAVAILABLE) - measured the same without the proxy, 3 of 48 calls.
            assert codes.count(grpc.StatusCode.OK) >= 2, codes
            assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE}, codes
            assert call(99) == grpc.StatusCode.OK  # same channel, same connection: still usable
        bg_stop(proxy)
        recs = records(proxy.capture_path)
        ends = of_kind(recs, "call_end")
        refused = [e for e in ends if e["cause"] != "ok"]
        assert all(e["upstream_rst_code"] == 7 and "triton-tap" not in (e["details"] or "") for e in refused), refused
        assert len(ends) - len(refused) >= 4
        # The client kept to the limit: never more than 2 calls open at once, bar the ones refused.
        marks = sorted([(r["t_ns"], 1) for r in of_kind(recs, "call_start")] + [(r["t_ns"], -1) for r in ends])
        open_now = peak = 0
        for _, step in marks:
            open_now += step
            peak = max(peak, open_now)
        assert peak <= 2 + len(refused), (peak, refused)
    finally:
        bg.run(server.stop(None))


def test_internal_error_costs_one_connection_and_is_recorded_as_ours(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the relay ends that connection's calls as proxy_error (client gets INTERNAL); others go on.

    The bug: the records' sink raises once, for the victim's request, inside the relay's handling of a
    read (the relay's own code is compiled here and cannot be patched; what it calls out to can)."""
    from proxy.capture.writer import CaptureWriter

    original = CaptureWriter.emit
    armed = {"on": True}

    def broken(self: CaptureWriter, record: Any) -> None:
        if armed["on"] and isinstance(record, ev.MessageSeen) and record.request_id == "victim":
            armed["on"] = False
            raise RuntimeError("injected relay bug")
        original(self, record)

    monkeypatch.setattr(CaptureWriter, "emit", broken)
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    failed = _infer_with_call(f"127.0.0.1:{proxy.port}", "victim", [])
    assert failed[0] is None and failed[1].code() == grpc.StatusCode.INTERNAL
    ok = _infer_with_call(f"127.0.0.1:{proxy.port}", "next", [])
    assert ok[0] is not None
    bg_stop(proxy)
    recs = records(proxy.capture_path)
    (cancel,) = of_kind(recs, "cancel")
    assert cancel["cause"] == "proxy_error" and cancel["in_flight"] == ["victim"]
    (end,) = of_kind(recs, "call_end", cancel["call"])
    assert (end["status"], end["cause"]) == ("INTERNAL", "proxy_error")


def test_payload_none_keeps_ids_not_tensor_specs(fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]) -> None:
    """--payload none keeps sizes, model and request ids but drops input/output tensor specs (meta keeps them)."""
    none = start_proxy(f"127.0.0.1:{fake_upstream.port}", payload="none")
    meta = start_proxy(f"127.0.0.1:{fake_upstream.port}", payload="meta", capture_dir=none.config.capture_dir / "m")
    for proxy in (none, meta):
        resp, _call = _infer_with_call(f"127.0.0.1:{proxy.port}", "r7", [])
        assert resp is not None
        bg_stop(proxy)
    got = {}
    for name, proxy in (("none", none), ("meta", meta)):
        msgs = {r["dir"]: r for r in of_kind(records(proxy.capture_path), "message")}
        got[name] = msgs
        assert msgs["c2s"]["request_id"] == "r7" and msgs["c2s"]["model"] == "echo" and msgs["s2c"]["size"] > 0
    assert got["meta"]["c2s"]["inputs"] and got["meta"]["s2c"]["output_tensors"]
    assert got["none"]["c2s"].get("inputs") is None and got["none"]["s2c"].get("output_tensors") is None

"""`serve` against reality: a tritonclient script run live through the proxy, then against `serve` of that capture.

Two claims, each over real tritonclient traffic to the real tritonserver:

* the same script run against ``serve`` (answering from the capture) gets what it got live: readiness,
  model metadata, unary outputs and error statuses, and per stream request the texts, response counts,
  final flags and in-band errors (interleaving differs run to run live, so per request);
* the proxy in front of ``serve`` records a capture that ``diff`` finds equivalent to the original.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer
from replay.cli.main import main as replay_main
from replay.machine.tracker import track
from replay.tools.serve import MockTriton, load
from tests.support.loop_thread import BackgroundLoop
from tests.support.triton_client import bytes_input, echo_inputs, token_inputs
from tests.support.user_client import TextAssembler

pytestmark = pytest.mark.timeout(300)

WAIT_S = 60.0
STREAM_IDS = {"n1", "a", "b", "q"}


def script(url: str) -> dict[str, Any]:
    """What a tritonclient user does and sees: readiness, metadata, unary calls, one stream of 5 requests."""
    out: dict[str, Any] = {}
    c = grpcclient.InferenceServerClient(url)
    try:
        out["live"], out["ready"] = c.is_server_live(), c.is_server_ready()
        out["model_ready"] = c.is_model_ready("tokens")
        try:
            out["metadata"] = c.get_model_metadata("tokens", as_json=True)
        except InferenceServerException as e:
            out["metadata"] = (e.status(), e.message())
        r = c.infer("echo", echo_inputs(np.arange(7, dtype=np.uint8)), request_id="e1")
        out["echo"] = (r.get_response().id, r.as_numpy("OUTPUT").tolist())
        try:
            c.infer("nope", echo_inputs(np.arange(1, dtype=np.uint8)), request_id="e2")
            out["nope"] = "answered"
        except InferenceServerException as e:
            out["nope"] = (e.status(), e.message())
        live = TextAssembler()
        c.start_stream(callback=live)
        for model, rid, inputs in (
            ("tokens", "n1", token_inputs("n", 4)),
            ("tokens", "a", token_inputs("a", 3, delay_ms=30)),
            ("tokens", "b", token_inputs("b", 3, delay_ms=30)),
            ("silent", "q", [bytes_input("PROMPT", b"q")]),
            ("fail_midstream", "f1", token_inputs("f", 5)),
        ):
            c.async_stream_infer(model, inputs, request_id=rid, enable_empty_final_response=True)
        live.wait_for(lambda s: s.done >= STREAM_IDS and bool(s.errors), WAIT_S)
        c.stop_stream()
        out["stream"] = live.state()
    finally:
        c.close()
    return out


def _served(loop: BackgroundLoop, capture: Path, request: pytest.FixtureRequest, **kw: Any) -> str:
    server = MockTriton(load(capture), **kw)
    port = loop.run(server.start("127.0.0.1:0"))
    request.addfinalizer(lambda: loop.run(server.stop(0)))
    return f"127.0.0.1:{port}"


def test_serve_answers_the_script_as_triton_did_and_diff_finds_the_rerun_equivalent(
    triton: TritonServer, tmp_path: Path, loop: BackgroundLoop, request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Live (full payload) == served (fast); the proxy in front of serve (as captured) records an equivalent capture."""
    with ProxyThread(triton.grpc_url, tmp_path / "live", payload="full", drain_timeout=5) as proxy:
        live = script(proxy.url)
    original = proxy.capture_path
    assert live["stream"]["text"] == {"n1": "n-0n-1n-2n-3", "a": "a-0a-1a-2", "b": "b-0b-1b-2", "f1": "f-0f-1"}
    assert live["nope"][0] == "StatusCode.NOT_FOUND"

    assert script(_served(loop, original, request, speed=None)) == live

    url = _served(loop, original, request, speed=1.0)
    with ProxyThread(url, tmp_path / "rerun", payload="full", drain_timeout=5) as proxy:
        rerun = script(proxy.url)
    assert rerun == live
    capsys.readouterr()
    # Timing is compared loosely (as tests/e2e/test_send_e2e.py does): the default 100 ms would call a rerun
    # "changed" when a loaded machine delays one response by more; serve's pacing is held by its own tests.
    code = replay_main(["diff", "--json", "--tolerance", "1500,100%", str(original), str(proxy.capture_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    doc = json.loads(out)
    assert doc["summary"] == {"paired": 7, "changed": 0, "raced": 0, "only_a": 0, "only_b": 0, "calls_changed": 0, "unattributable_changed": 0,
                              "holes_a": 0, "holes_b": 0, "models_slower": 0, "models_faster": 0, "refused_a": 0,
                              "refused_b": 0}
    assert doc["calls"] == []
    assert {r["matched_by"] for r in doc["requests"]} == {"id"}


def test_diff_detects_a_cancel_that_was_not_there_before(
    triton: TritonServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run 1 completes request c1; run 2 cancels its stream after the first token: diff exits 1 naming cause and outcome."""
    captures = []
    for run, cancel in (("run1", False), ("run2", True)):
        client = TextAssembler()
        with ProxyThread(triton.grpc_url, tmp_path / run, payload="full", drain_timeout=5) as proxy:
            c = grpcclient.InferenceServerClient(proxy.url)
            c.start_stream(callback=client)
            delay = 3000 if cancel else 5  # run 2: the next token is seconds away when the cancel is sent
            c.async_stream_infer("tokens", token_inputs("c", 3, delay_ms=delay), request_id="c1",
                                 enable_empty_final_response=True)  # fmt: skip
            client.wait_for(lambda s, cancel=cancel: "c1" in s.text and (cancel or "c1" in s.done), WAIT_S)
            c.stop_stream(cancel_requests=cancel)
            c.close()
        captures.append(str(proxy.capture_path))
    capsys.readouterr()
    code = replay_main(["diff", "--json", *captures])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    (pair,) = doc["requests"]
    changes = {c["field"]: (c["a"], c["b"]) for c in pair["changes"]}
    assert changes["outcome"] == ("completed", "cancelled")
    assert changes["cause"] == ("ok", "client_cancel")
    assert changes["final"] == (True, False)


def test_meta_capture_serves_same_ids_finals_errors_with_zero_filled_data(
    recording_proxy: ProxyThread, loop: BackgroundLoop, request: pytest.FixtureRequest
) -> None:
    """A meta capture (recording_proxy): same ids, response counts, finals, errors and statuses; texts zero-filled."""
    live = script(recording_proxy.url)
    served = script(_served(loop, recording_proxy.stop(), request, speed=None))
    assert served["stream"]["responses"] == live["stream"]["responses"]
    assert (served["stream"]["done"], served["stream"]["errors"]) == (live["stream"]["done"], live["stream"]["errors"])
    assert served["stream"]["text"] == {"n1": "", "a": "", "b": "", "f1": ""}
    assert (served["live"], served["ready"], served["model_ready"]) == (True, True, True)
    assert served["nope"] == live["nope"]
    # Metadata answers are not in a meta capture: said so, not invented.
    assert served["metadata"][0] == "StatusCode.FAILED_PRECONDITION" and "--payload full" in served["metadata"][1]
    assert served["echo"] == ("e1", [0] * 7)


def test_a_live_cancel_is_reproduced_by_serve_for_a_client_that_does_not_cancel(
    triton: TritonServer, tmp_path: Path, loop: BackgroundLoop, request: pytest.FixtureRequest
) -> None:
    """Live: the client cancels its stream after the first token. Served: a client that only waits sees the same CANCELLED."""
    live = TextAssembler()
    with ProxyThread(triton.grpc_url, tmp_path, payload="full", drain_timeout=5) as proxy:
        c = grpcclient.InferenceServerClient(proxy.url)
        c.start_stream(callback=live)
        c.async_stream_infer("tokens", token_inputs("k", 3, delay_ms=3000), request_id="k1",
                             enable_empty_final_response=True)  # fmt: skip
        live.wait_for(lambda s: "k1" in s.text, WAIT_S)
        c.stop_stream(cancel_requests=True)
        c.close()
    served = TextAssembler()
    c = grpcclient.InferenceServerClient(_served(loop, proxy.capture_path, request, speed=1.0))
    try:
        c.start_stream(callback=served)
        c.async_stream_infer("tokens", token_inputs("k", 3, delay_ms=3000), request_id="k1",
                             enable_empty_final_response=True)  # fmt: skip
        served.wait_for(lambda s: s.stream_error is not None, WAIT_S)
    finally:
        c.stop_stream()
        c.close()
    want = live.state()
    assert want["text"] == {"k1": "k-0"} and want["done"] == []
    assert want["stream_error"] == ("StatusCode.CANCELLED", "Locally cancelled by application!")
    assert served.state() == want


async def _cancel_after(url: str, n: int) -> list[tuple[str | None, bool | None]]:
    """tritonclient.grpc.aio: two stream requests to `tokens`, the call cancelled (its ``cancel()``) once the
    client has ``n`` responses: (id, final flag) of each response it got."""
    import tritonclient.grpc.aio as aioclient

    client = aioclient.InferenceServerClient(url)

    async def requests() -> Any:
        # `r` answers every 20 ms, `""` after its first token every second: the first five are 4 and 1, whatever
        # the machine's load (which of two equal streams got more before the cancel would be its timing).
        for rid, delay_ms in (("r", 20), ("", 1000)):
            yield {"model_name": "tokens", "inputs": token_inputs(rid or "n", 50, delay_ms=delay_ms), "request_id": rid,
                   "enable_empty_final_response": True}  # fmt: skip
        await asyncio.sleep(30)  # (the stream stays open until the client cancels)

    got: list[tuple[str | None, bool | None]] = []
    it = client.stream_infer(requests())
    try:
        async for result, error in it:
            assert error is None, error
            response = result.get_response()
            got.append((response.id, response.parameters["triton_final_response"].bool_param))
            if len(got) >= n:
                it.cancel()
                break
    finally:
        await client.close()
    return got


def test_a_client_that_cancels_as_the_captured_one_did_cancels_the_served_call_itself(
    triton: TritonServer, tmp_path: Path, loop: BackgroundLoop, request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """An aio client cancels its stream after its 5th response, live against the real Triton and against
    serve of that capture, each through the proxy: the rerun's capture has the client's cancel, as live,
    and diff finds it equivalent. (Serve used to end such a call CANCELLED at the captured moment itself,
    racing the client's own cancel; tests/replay/tools/serve/test_server.py makes that race one serve
    always won.)"""
    with ProxyThread(triton.grpc_url, tmp_path / "live", payload="full", drain_timeout=5) as proxy:
        live = asyncio.run(_cancel_after(proxy.url, 5))
    original = proxy.capture_path
    assert sorted(live) == [("", False)] + [("r", False)] * 4
    url = _served(loop, original, request, speed=1.0)
    with ProxyThread(url, tmp_path / "rerun", payload="full", drain_timeout=5) as proxy:
        assert sorted(asyncio.run(_cancel_after(proxy.url, 5))) == sorted(live)
    capsys.readouterr()
    code = replay_main(["diff", "--json", "--tolerance", "1500,100%", str(original), str(proxy.capture_path)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, [p["changes"] for p in doc["requests"]]
    rerun = track(proxy.capture_path)
    assert [(r.outcome, r.status) for r in rerun.requests] == [("cancelled", "CANCELLED")] * 2
    assert [c.cause for c in rerun.calls] == ["client_cancel"]


def test_a_meta_capture_says_which_model_each_readiness_call_asked_and_serve_answers_by_it(
    triton: TritonServer, tmp_path: Path, loop: BackgroundLoop, request: pytest.FixtureRequest
) -> None:
    """ready('nope') -> False, ready('tokens') -> True through the proxy (meta): each request's record names its
    model, and serve answers each model's question with its own answer, asked in the other order; a model the
    capture never asked about is NOT_FOUND. (serve answered ready('tokens') with nope's `false`, and echo's
    with tokens' `true`.)"""
    with ProxyThread(triton.grpc_url, tmp_path / "live", payload="meta", drain_timeout=5) as proxy:
        c = grpcclient.InferenceServerClient(proxy.url)
        try:
            live = (c.is_model_ready("nope"), c.is_model_ready("tokens"))
        finally:
            c.close()
    assert live == (False, True)
    doc = track(proxy.capture_path)
    assert sorted((c.model, c.ready) for c in doc.calls) == [("nope", False), ("tokens", True)]
    c = grpcclient.InferenceServerClient(_served(loop, proxy.capture_path, request, speed=None))
    try:
        assert (c.is_model_ready("tokens"), c.is_model_ready("nope")) == (True, False)
        with pytest.raises(InferenceServerException) as err:
            c.is_model_ready("echo")
        assert err.value.status() == "StatusCode.NOT_FOUND"
    finally:
        c.close()

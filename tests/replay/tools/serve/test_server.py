"""`serve` on loopback: real tritonclient (sync and aio) against the mock Triton answering from golden captures.

The reference for what a client must see is ``replay.feed_stream`` of the same capture (pinned
against live traffic in tests/e2e): a client talking to ``serve`` ends in the same state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

from replay import feed_stream
from replay.tools.serve import MockTriton, load
from tests.support.loop_thread import BackgroundLoop
from tests.support.paths import DATA
from tests.support.triton_client import echo_inputs, token_inputs
from tests.support.user_client import TextAssembler

WAIT_S = 30.0

Serve = Callable[..., str]


class _Serve:
    """``serve(capture, **kw) -> url``; ``.servers`` are the started MockTritons."""

    def __init__(self, loop: BackgroundLoop) -> None:
        self.loop = loop
        self.servers: list[MockTriton] = []

    def __call__(self, name: str, **kw: Any) -> str:
        server = MockTriton(load(DATA / name), **kw)
        port = self.loop.run(server.start("127.0.0.1:0"))
        self.servers.append(server)
        return f"127.0.0.1:{port}"


@pytest.fixture
def serve() -> Iterator[_Serve]:
    """Start MockTriton(s) on a background loop; all stopped at teardown."""
    loop = BackgroundLoop()
    start = _Serve(loop)
    servers = start.servers

    try:
        yield start
    finally:
        for s in servers:
            loop.run(s.stop(0))
        loop.close()


def _fed(name: str) -> dict[str, Any]:
    client = TextAssembler()
    feed_stream(DATA / name, client)
    return client.state()


def _stream(
    url: str, sends: list[tuple[str, str, list[Any]]], until: Callable[[TextAssembler], bool]
) -> dict[str, Any]:
    client = TextAssembler()
    c = grpcclient.InferenceServerClient(url)
    try:
        c.start_stream(callback=client)
        for model, rid, inputs in sends:
            c.async_stream_infer(model, inputs, request_id=rid, enable_empty_final_response=True)
        client.wait_for(until, WAIT_S)
    finally:
        c.stop_stream()
        c.close()
    return client.state()


def _ended(c: TextAssembler) -> bool:
    return c.stream_error is not None


@pytest.mark.parametrize("timing", [None, 1.0])
def test_interleaved_stream_gets_what_the_capture_says(serve: Serve, timing: float | None) -> None:
    """Two requests on one stream: texts, response counts and finals per id as in the capture (fast and timed)."""
    url = serve("interleaved.jsonl", speed=timing)
    sends = [("tokens", "a", token_inputs("a", 3)), ("tokens", "b", token_inputs("b", 2))]
    state = _stream(url, sends, lambda c: c.done == {"a", "b"})
    assert state == _fed("interleaved.jsonl")


def test_full_capture_serves_the_real_tensor_bytes_and_the_in_band_error(serve: Serve) -> None:
    """error_midstream (full payload): two texts, then the in-band error without a final, stream not failed."""
    url = serve("error_midstream.jsonl", speed=None)
    state = _stream(url, [("fail_midstream", "f1", token_inputs("f", 5))], lambda c: bool(c.errors))
    assert state == _fed("error_midstream.jsonl")
    assert state["text"] == {"f1": "f-0f-1"}


def test_captured_cancel_is_reproduced_after_the_responses_before_it(serve: Serve) -> None:
    """stream_cancel: done completes, a gets 2 texts, b nothing, then the stream ends CANCELLED."""
    url = serve("stream_cancel.jsonl", speed=None)
    sends = [("tokens", r, token_inputs(r, 100)) for r in ("done", "a", "b")]
    state = _stream(url, sends, _ended)
    assert state == _fed("stream_cancel.jsonl")
    assert state["stream_error"] == ("StatusCode.CANCELLED", "Locally cancelled by application!")


def test_captured_deadline_is_reproduced_at_the_captured_time(serve: Serve) -> None:
    """deadline.jsonl: 2 texts at ~200/400 ms, then DEADLINE_EXCEEDED at ~500 ms after the request."""
    url = serve("deadline.jsonl", speed=1.0)
    t0 = time.monotonic()
    state = _stream(url, [("tokens", "slow", token_inputs("s", 100))], _ended)
    elapsed = time.monotonic() - t0
    # A meta capture: the two texts come back zero-filled (empty strings), everything else as captured.
    assert (state["text"], state["responses"], state["done"]) == ({"slow": ""}, {"slow": 2}, [])
    assert state["stream_error"] == ("StatusCode.DEADLINE_EXCEEDED", "Deadline Exceeded")
    assert elapsed >= 0.49


def _timed_stream(url: str) -> float:
    """Seconds from the first request of deadline.jsonl's stream to its captured end."""
    t0 = time.monotonic()
    state = _stream(url, [("tokens", "slow", token_inputs("s", 100))], _ended)
    elapsed = time.monotonic() - t0
    assert state["responses"] == {"slow": 2}
    return elapsed


@pytest.mark.parametrize(("timing", "at_least"), [(2.0, 0.245), (0.5, 0.98)])
def test_timing_modes_wait_the_captured_times_divided_by_n(serve: Serve, timing: float, at_least: float) -> None:
    """xN divides the captured waits by N (deadline.jsonl ends 499 ms after its request)."""
    assert _timed_stream(serve("deadline.jsonl", speed=timing)) >= at_least


def test_fast_mode_does_not_wait_the_captured_times(serve: Serve, tmp_path: Path) -> None:
    """fast answers without the captured waits: a capture stretched x40 (20 s) takes as long as the original.

    Relative, not a wall-clock bound: both runs pay the same client set-up on a loaded machine; a
    fast mode that waited would take 19.5 s longer on the stretched copy (the margin is 10 s).
    """
    stretched = tmp_path / "deadline_x40.jsonl"
    lines = [json.loads(line) for line in (DATA / "deadline.jsonl").read_text().splitlines()]
    t0 = lines[0]["t_ns"]
    stretched.write_text("".join(json.dumps({**r, "t_ns": t0 + 40 * (r["t_ns"] - t0)}) + "\n" for r in lines))
    original = _timed_stream(serve("deadline.jsonl", speed=None))
    assert _timed_stream(serve(str(stretched), speed=None)) < original + 10.0


def test_unmatched_request_gets_not_found_naming_the_closest_candidate(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    """--match id with an unknown id: NOT_FOUND, the closest captured request and why, and a log line."""
    url = serve("interleaved.jsonl", speed=None, strategies=("id",))
    with caplog.at_level(logging.WARNING, logger="triton_tap.serve"):
        state = _stream(url, [("tokens", "zzz", token_inputs("a", 3))], _ended)
    assert state["stream_error"] is not None
    status, message = state["stream_error"]
    assert status == "StatusCode.NOT_FOUND"
    assert "no captured request matches stream request id 'zzz' of model 'tokens'" in message
    assert "closest: stream request id 'a' of model 'tokens' (call c1.1, seq 2): id differs ('a' captured)" in message
    assert any("closest" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("keep", "want"), [(False, "mine"), (True, "r1")])
def test_responses_echo_the_incoming_id_unless_keep_ids(serve: Serve, keep: bool, want: str) -> None:
    """Matched by order under another id: responses carry the incoming id (the captured one with keep_ids)."""
    url = serve("many_responses.jsonl", speed=None, keep_ids=keep)
    state = _stream(url, [("tokens", "mine", token_inputs("x", 5))], lambda c: bool(c.done))
    assert state["text"] == {want: "hi-0hi-1hi-2hi-3hi-4"} and state["done"] == [want]


def test_aio_client_sees_results_then_the_captured_cancel(serve: Serve) -> None:
    """tritonclient.grpc.aio stream_infer: the captured responses, then the stream's CANCELLED end."""
    url = serve("stream_cancel.jsonl", speed=None)

    async def run() -> tuple[list[tuple[str, str]], grpc.aio.AioRpcError | None]:
        client = aioclient.InferenceServerClient(url)

        async def requests() -> Any:
            for rid in ("done", "a", "b"):
                yield {"model_name": "tokens", "inputs": token_inputs(rid, 100), "request_id": rid,
                       "enable_empty_final_response": True}  # fmt: skip
            await asyncio.sleep(WAIT_S)  # keep the request side open, as a live client would

        got: list[tuple[str, str]] = []
        failure: grpc.aio.AioRpcError | None = None
        try:
            async for result, error in client.stream_infer(requests()):
                assert error is None
                r = result.get_response()
                texts = result.as_numpy("TEXT") if len(r.outputs) else []
                got.append((r.id, "".join(t.decode() for t in texts)))
        except grpc.aio.AioRpcError as e:  # what the aio stream iterator raises for a non-OK end
            failure = e
        finally:
            await client.close()
        return got, failure

    got, failure = asyncio.run(asyncio.wait_for(run(), WAIT_S))
    assert sorted(got) == sorted([("done", "d-0"), ("done", ""), ("a", "a-0"), ("a", "a-1")])
    assert isinstance(failure, grpc.aio.AioRpcError) and failure.code() is grpc.StatusCode.CANCELLED


def test_a_client_cancelling_as_the_captured_one_did_cancels_the_call_itself(serve: Serve, tmp_path: Path) -> None:
    """stream_cancel's client cancelled after its 4th response. An aio client doing the same (its call's
    ``cancel()`` once it has 4), through the recording proxy in front of serve: the proxy records the
    client's cancel, as live (`client_cancel`). Serve sent the captured CANCELLED status right after the
    4th response, before the client could act (the proxy recorded `error`, and diff said
    `cancelled -> error`); it now leaves a client's end to the client for a grace second."""
    from proxy.lab.background import ProxyThread
    from replay.machine.tracker import track

    url = serve("stream_cancel.jsonl", speed=None)

    async def run(target: str) -> int:
        client = aioclient.InferenceServerClient(target)

        async def requests() -> Any:
            for rid in ("done", "a", "b"):
                yield {"model_name": "tokens", "inputs": token_inputs(rid, 100), "request_id": rid,
                       "enable_empty_final_response": True}  # fmt: skip
            await asyncio.sleep(WAIT_S)

        got = 0
        it = client.stream_infer(requests())
        try:
            async for _result, error in it:
                assert error is None
                got += 1
                if got == 4:
                    it.cancel()
                    break
        finally:
            await client.close()
        return got

    with ProxyThread(url, tmp_path, payload="full", drain_timeout=5) as proxy:
        assert asyncio.run(asyncio.wait_for(run(proxy.url), WAIT_S)) == 4
    result = track(proxy.capture_path)
    assert [(c.cause, c.status) for c in result.calls] == [("client_cancel", "CANCELLED")]
    assert [r.outcome for r in result.requests] == ["completed", "cancelled", "cancelled"]


def test_unary_meta_capture_zero_fills_outputs_and_reproduces_the_error_status(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    """unary.jsonl (meta): echo answers OUTPUT of the captured shape/datatype with zero data (warned); 'nope' NOT_FOUND as captured."""
    url = serve("unary.jsonl", speed=None)
    c = grpcclient.InferenceServerClient(url)
    try:
        with caplog.at_level(logging.WARNING, logger="triton_tap.serve"):
            result = c.infer("echo", echo_inputs(np.zeros(2, dtype=np.uint8)), request_id="e1")
        r = result.get_response()
        assert (r.id, [o.name for o in r.outputs], list(r.outputs[0].shape), r.outputs[0].datatype) == (
            "e1", ["OUTPUT"], [1], "BYTES",
        )  # fmt: skip
        assert result.as_numpy("OUTPUT").tolist() == [b""]
        assert any("zero-filled" in rec.getMessage() for rec in caplog.records)
        with pytest.raises(InferenceServerException) as err:
            c.infer("nope", echo_inputs(np.zeros(1, dtype=np.uint8)), request_id="e2")
        assert (err.value.status(), err.value.message()) == (
            "StatusCode.NOT_FOUND", "Request for unknown model: 'nope' is not found",
        )  # fmt: skip
        with pytest.raises(InferenceServerException) as err:
            c.infer("other", echo_inputs(np.zeros(1, dtype=np.uint8)), request_id="x")
        assert err.value.status() == "StatusCode.NOT_FOUND"
        assert "no captured request matches unary request id 'x' of model 'other'" in err.value.message()
    finally:
        c.close()


def test_serve_command_runs_until_sigterm_and_logs_unmatched_requests(tmp_path: Path) -> None:
    """`triton-tap serve` as a process: answers a client, logs a NOT_FOUND, exits 0 on SIGTERM."""
    import signal
    import subprocess
    import sys

    from proxy.lab.tritonserver import free_port
    from tests.support.triton_client import wait_for

    port = free_port()
    log = tmp_path / "serve.log"
    exe = Path(sys.executable).parent / "triton-tap"
    with open(log, "wb") as f:
        proc = subprocess.Popen([str(exe), "serve", "--listen", f"127.0.0.1:{port}", "--timing", "fast",
                                 "--match", "id", str(DATA / "interleaved.jsonl")], stderr=f)  # fmt: skip
    try:
        wait_for(lambda: b"serving" in log.read_bytes(), WAIT_S, "serve to listen")
        sends = [("tokens", "a", token_inputs("a", 3)), ("tokens", "b", token_inputs("b", 2))]
        assert _stream(f"127.0.0.1:{port}", sends, lambda c: c.done == {"a", "b"}) == _fed("interleaved.jsonl")
        state = _stream(f"127.0.0.1:{port}", [("tokens", "nobody", token_inputs("a", 3))], _ended)
        assert state["stream_error"] is not None and state["stream_error"][0] == "StatusCode.NOT_FOUND"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert "no captured request matches stream request id 'nobody'" in text
    assert "Traceback" not in text


def test_timed_replay_keeps_the_captured_interleaving_across_requests(serve: Serve) -> None:
    """x0.02 (captured 5 ms gaps become 250 ms): responses of a and b arrive in the captured order a b a b b a a.

    Each request's answers are timed from its own arrival, so the order holds while b arrives less than ~6 of
    the captured ms after a: 300 ms at this speed, room for a loaded machine (at x0.1 it was 60 ms)."""
    from tests.support.triton_client import StreamSession

    url = serve("interleaved.jsonl", speed=0.02)
    s = StreamSession(url)
    try:
        s.send("tokens", token_inputs("a", 3), "a", enable_empty_final_response=True)
        s.send("tokens", token_inputs("b", 2), "b", enable_empty_final_response=True)
        events = s.take(7, timeout=WAIT_S)
    finally:
        s.close()
    assert [e[1] for e in events] == ["a", "b", "a", "b", "b", "a", "a"]


def test_timed_replay_never_answers_before_an_answer_captured_earlier(serve: Serve, tmp_path: Path) -> None:
    """Captured: p answered 400 ms after its request, then q asked and answered 1 ms later (a non-decoupled model
    answers a stream's requests in turn). A client sending p and q back to back got q's answer first: each is
    timed from its own request, an order Triton never gave. An answer now waits for those captured before it."""
    from tests.data.make_golden import Builder
    from tests.support.triton_client import StreamSession

    b = Builder(payload="full").start()
    b.call("c1.1")
    b.request("c1.1", "p", prompt="p", max_tokens=1, empty_final=None)
    b.response("c1.1", "p", "p-0", final=True, ms=400.0)
    b.request("c1.1", "q", prompt="q", max_tokens=1, empty_final=None)
    b.response("c1.1", "q", "q-0", final=True, ms=1.0)
    b.half_close("c1.1")
    b.end("c1.1")
    (tmp_path / "turns.jsonl").write_bytes(b.finish().render())
    url = serve(str(tmp_path / "turns.jsonl"), speed=1.0)
    s = StreamSession(url)
    try:
        s.send("tokens", token_inputs("p", 1), "p")
        s.send("tokens", token_inputs("q", 1), "q")
        events = s.take(2, timeout=WAIT_S)
    finally:
        s.close()
    assert [e[1] for e in events] == ["p", "q"], events


def test_new_ids_with_the_captured_inputs_match_by_payload(serve: Serve) -> None:
    """--match payload: requests under other ids but with the captured inputs get the captured answers, under their ids."""
    url = serve("interleaved.jsonl", speed=None, strategies=("payload",))
    sends = [("tokens", "x-a", token_inputs("a", 3)), ("tokens", "x-b", token_inputs("b", 2))]
    state = _stream(url, sends, lambda c: c.done == {"x-a", "x-b"})
    assert state["text"] == {"x-a": "a-0a-1a-2", "x-b": "b-0b-1"}
    other = _stream(url, [("tokens", "x-c", token_inputs("c", 2))], _ended)
    assert other["stream_error"] is not None and "payload: inputs differ" in other["stream_error"][1]


def test_a_client_cancel_mid_replay_ends_the_served_stream_and_its_reader(serve: _Serve) -> None:
    """The client cancels while serve waits to send the next captured response: the handler and its reader task end."""
    from tests.support.triton_client import StreamSession, wait_for

    url = serve("deadline.jsonl", speed=0.2)  # the second response is ~1 s away
    s = StreamSession(url)
    s.send("tokens", token_inputs("s", 100), "slow", enable_empty_final_response=True)
    assert s.take(1, timeout=WAIT_S)[0][1] == "slow"
    assert serve.servers[0].open_streams == 1
    s.close(cancel_requests=True)
    wait_for(lambda: serve.servers[0].open_streams == 0, WAIT_S, "the served stream to end")


def test_a_payload_none_capture_is_refused_in_one_line() -> None:
    """A capture without labels or payloads has nothing to answer with: UserError, not a server that 404s everything."""
    from replay.errors import UserError
    from tests.data.make_golden import Builder

    b = Builder(payload="none").start()
    b.call("c1.1")
    b.end("c1.1")
    with pytest.raises(UserError, match="--payload none"):
        MockTriton(load(b.finish().records))


def test_serve_logs_the_holes_of_its_capture(caplog: pytest.LogCaptureFixture) -> None:
    """gaps.jsonl: each hole (gap record, missing seqs) is a warning when the server is built."""
    with caplog.at_level(logging.WARNING, logger="triton_tap.serve"):
        MockTriton(load(DATA / "gaps.jsonl"))
    holes = [r.getMessage() for r in caplog.records if "capture hole" in r.getMessage()]
    assert [h.split()[2] for h in holes] == ["gap_record", "seq_gap"]


@pytest.mark.parametrize("method", ["ModelInfer", "ServerLive", "ModelStreamInfer"])
def test_an_undecodable_request_gets_invalid_argument_and_one_log_line(
    serve: Serve, caplog: pytest.LogCaptureFixture, method: str
) -> None:
    """Bytes that do not parse as the request type: INVALID_ARGUMENT naming the parse error, one warning, no traceback."""
    url = serve("unary.jsonl", speed=None)
    path = f"/inference.GRPCInferenceService/{method}"
    junk = b"\xff\xff\xff"
    with grpc.insecure_channel(url) as channel, caplog.at_level(logging.DEBUG):
        if method == "ModelStreamInfer":
            call = channel.stream_stream(path)(iter([junk]), timeout=WAIT_S)
            with pytest.raises(grpc.RpcError) as err:
                list(call)
        else:
            with pytest.raises(grpc.RpcError) as err:
                channel.unary_unary(path)(junk, timeout=WAIT_S)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not parse" in (err.value.details() or "")
    lines = [r for r in caplog.records if "does not parse" in r.getMessage()]
    assert len(lines) == 1 and not any(r.exc_info for r in caplog.records)


def test_a_captured_ok_call_without_a_response_message_answers_ok(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    """unary.jsonl's ServerLive ended OK with no response message: the client gets OK (an empty answer), not UNKNOWN."""
    url = serve("unary.jsonl", speed=None)
    c = grpcclient.InferenceServerClient(url)
    try:
        with caplog.at_level(logging.WARNING, logger="triton_tap.serve"):
            assert c.is_server_live() is False
    finally:
        c.close()
    assert any("has no response message" in r.getMessage() for r in caplog.records)


def test_a_rotated_zstd_capture_is_served_as_captured(serve: Serve, tmp_path: Path) -> None:
    """The writer's rotated .jsonl.zst files of a full capture, served from serve's index: three interleaved
    requests get the texts and finals the capture holds (as fed to a callback), and the unary echo its bytes."""
    from tests.replay.tools.serve.test_index import _capture
    from tests.support.capture import write_rotated

    files = write_rotated(_capture("full", responses=6).records, tmp_path, rotate_bytes=500)
    assert len(files) >= 3
    url = serve(str(tmp_path), speed=None)
    sends = [("tokens", f"r{i}", token_inputs(f"r{i}", 6)) for i in range(3)]
    state = _stream(url, sends, lambda c: c.done == {"r0", "r1", "r2"})
    assert state == _fed(str(tmp_path))
    assert state["text"] == {f"r{i}": "".join(f"r{i}-{k}" for k in range(6)) for i in range(3)}
    c = grpcclient.InferenceServerClient(url)
    try:
        result = c.infer("echo", echo_inputs(np.zeros(2, dtype=np.uint8)), request_id="e1")
        assert result.as_numpy("OUTPUT").tolist() == [b"hi"]
    finally:
        c.close()


def test_stop_waits_for_a_stream_handler_still_cleaning_up_after_its_captured_end(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The captured CANCELLED end is sent (grpc's core counts the call closed) and the client has left while the
    stream's handler is still cleaning up when serve stops: stop() returns once the handler has ended, and when the
    loop then ends nothing is logged at ERROR (grpc logs a traceback for a handler task cancelled under it)."""
    from replay.tools.serve.stream import Stream

    stopping = asyncio.Event()
    cleaned: list[str] = []
    run = Stream.run

    async def run_then_clean_up(self: Stream, incoming: asyncio.Queue[Any]) -> None:
        try:
            await run(self, incoming)
        finally:
            await stopping.wait()
            await asyncio.sleep(0.5)  # cleanup that takes a while: stop() is under way meanwhile
            cleaned.append(self.name)

    monkeypatch.setattr(Stream, "run", run_then_clean_up)

    async def main() -> tuple[list[str], int, grpc.StatusCode]:
        server = MockTriton(load(DATA / "stream_cancel.jsonl"), speed=None)
        port = await server.start("127.0.0.1:0")
        client = aioclient.InferenceServerClient(f"127.0.0.1:{port}")

        async def requests() -> Any:
            for rid in ("done", "a", "b"):
                yield {"model_name": "tokens", "inputs": token_inputs(rid, 100), "request_id": rid,
                       "enable_empty_final_response": True}  # fmt: skip
            await asyncio.sleep(WAIT_S)  # keep the request side open, as a live client would

        code = grpc.StatusCode.OK
        try:
            async for _result, error in client.stream_infer(requests()):
                assert error is None
        except grpc.aio.AioRpcError as e:
            code = e.code()
        finally:
            await client.close()
        stopping.set()
        await server.stop(grace=5.0)
        return list(cleaned), server.handlers.running, code

    got, running, code = asyncio.run(asyncio.wait_for(main(), WAIT_S))
    assert code is grpc.StatusCode.CANCELLED
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert got == ["stream 1"] and running == 0


def test_fast_serve_gives_a_client_ending_before_any_response_its_grace_too(serve: Serve, tmp_path: Path) -> None:
    """--timing fast, a captured client that cancelled before any response: the captured CANCELLED comes a
    grace second after the request arrived, as after the last response when there are some (it came at
    once: the grace counted from no write at all)."""
    from tests.data.make_golden import Builder

    b = Builder(payload="full").start()
    b.call("c1.1")
    b.request("c1.1", "a", prompt="a", max_tokens=100)
    b.cancel("c1.1", "client_cancel", rst_code=8, ms=50)
    b.end("c1.1", "CANCELLED", "client_cancel", ms=0)
    path = tmp_path / "cancel_no_response.jsonl"
    path.write_bytes(b.finish().render())
    server = MockTriton(load(path), speed=None)
    loop = BackgroundLoop()
    port = loop.run(server.start("127.0.0.1:0"))
    client = TextAssembler()
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        c.start_stream(callback=client)
        t0 = time.monotonic()
        c.async_stream_infer("tokens", token_inputs("a", 100), request_id="a", enable_empty_final_response=True)
        client.wait_for(lambda s: s.stream_error is not None, WAIT_S)
        elapsed = time.monotonic() - t0
    finally:
        c.stop_stream()
        c.close()
        loop.run(server.stop(0))
        loop.close()
    assert client.state()["stream_error"][0] == "StatusCode.CANCELLED"
    assert elapsed >= 0.95  # (never sooner: the grace; a loaded machine only makes it later)


def test_a_call_whose_end_the_capture_lacks_never_ends_ok(
    serve: Serve, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The proxy was killed with a stream and a unary call open (no `call_end`, no `capture_end`): the stream
    gets its captured responses, and at the client's half-close UNAVAILABLE saying the end is not in the
    capture; the unary call UNAVAILABLE too, not the OK (with an empty answer) the wire never showed."""
    from tests.data.make_golden import INFER, Builder

    b = Builder(payload="full").start()
    b.call("c1.1")
    b.request("c1.1", "r0", prompt="p0")
    b.response("c1.1", "r0", "r0-0")
    b.response("c1.1", "r0", "r0-1")
    b.call("c1.3", method=INFER)
    b.request("c1.3", "e1", model="echo", empty_final=None)
    (tmp_path / "killed.jsonl").write_bytes(b.render())
    url = serve(str(tmp_path / "killed.jsonl"), speed=None)
    client = TextAssembler()
    c = grpcclient.InferenceServerClient(url)
    try:
        with caplog.at_level(logging.WARNING, logger="triton_tap.serve"):
            c.start_stream(callback=client)
            c.async_stream_infer("tokens", token_inputs("r0", 2), request_id="r0", enable_empty_final_response=True)
            client.wait_for(lambda a: a.text.get("r0") == "r0-0r0-1", WAIT_S)
            c.stop_stream()  # half-closes: the captured call has no end to give
            client.wait_for(_ended, WAIT_S)
            with pytest.raises(InferenceServerException) as unary:
                c.infer("echo", echo_inputs(np.zeros(2, dtype=np.uint8)), request_id="e1")
    finally:
        c.close()
    assert "StatusCode.UNAVAILABLE" in str(client.stream_error) and "holds no end of call c1.1" in str(client.stream_error)
    assert unary.value.status() == "StatusCode.UNAVAILABLE" and "holds no end of call c1.3" in unary.value.message()
    assert sum("holds no end of call" in r.getMessage() for r in caplog.records) == 2


def _readiness_capture(path: Path, *, labelled: bool = True) -> Path:
    """A meta capture of ready('nope') -> false, ready('tokens') -> true, metadata('nope') -> NOT_FOUND, in that
    order (``labelled=False``: the requests as an older proxy recorded them, without the model they name)."""
    from tritonclient.grpc import service_pb2 as pb

    from tests.data.make_golden import Builder

    b = Builder().start()
    for call, model, ready in (("c1.1", "nope", False), ("c2.1", "tokens", True)):
        b.call(call, method="/inference.GRPCInferenceService/ModelReady")
        b.ask(call, pb.ModelReadyRequest(name=model), pb.ModelReadyResponse(ready=ready))
        b.end(call)
    b.call("c3.1", method="/inference.GRPCInferenceService/ModelMetadata")
    b.tick()
    b.ask("c3.1", pb.ModelMetadataRequest(name="nope"), pb.ModelMetadataResponse())
    b.records.pop()  # Triton answered no message: the error status only
    b.end("c3.1", "NOT_FOUND", "error", details="Request for unknown model: 'nope' is not found")
    b.finish()
    if not labelled:
        b.records = [dataclasses.replace(r, model=None, model_version=None) if r.kind == "message" and r.dir == "c2s" else r
                     for r in b.records]  # fmt: skip
    path.write_bytes(b.render())
    return path


def test_a_meta_captures_readiness_and_metadata_answers_are_the_asked_models(serve: Serve, tmp_path: Path) -> None:
    """Each model-named request of a meta capture carries its model: serve answers ready('tokens') with tokens'
    answer, whatever order the client asks in, and a model nobody asked about is NOT_FOUND. (It answered
    ready('tokens') with nope's `false` and metadata('echo') with nope's NOT_FOUND, silently; found against
    the real tritonserver.)"""
    url = serve(str(_readiness_capture(tmp_path / "ready.jsonl")), speed=None)
    c = grpcclient.InferenceServerClient(url)
    try:
        assert c.is_model_ready("tokens") is True
        assert c.is_model_ready("nope") is False
        with pytest.raises(InferenceServerException) as err:
            c.is_model_ready("echo")
        assert err.value.status() == "StatusCode.NOT_FOUND" and "no captured ModelReady call had" in err.value.message()
        with pytest.raises(InferenceServerException) as err:
            c.get_model_metadata("echo")
        assert err.value.status() == "StatusCode.NOT_FOUND" and "no captured ModelMetadata call had" in err.value.message()
        with pytest.raises(InferenceServerException) as err:
            c.get_model_metadata("nope")
        assert err.value.message() == "Request for unknown model: 'nope' is not found"
    finally:
        c.close()


def test_an_older_meta_capture_that_cannot_say_the_model_is_answered_with_a_warning(
    serve: Serve, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the model labels the capture cannot say which call asked what: serve answers in capture order
    as before, and says so once per call it answered that way."""
    url = serve(str(_readiness_capture(tmp_path / "old.jsonl", labelled=False)), speed=None)
    c = grpcclient.InferenceServerClient(url)
    try:
        with caplog.at_level(logging.WARNING, logger="triton_tap.serve"):
            assert c.is_model_ready("tokens") is False  # nope's answer: the capture cannot tell
            assert c.is_model_ready("tokens") is True
            assert c.is_model_ready("tokens") is True
    finally:
        c.close()
    doubts = [r.getMessage() for r in caplog.records if "does not say which model" in r.getMessage()]
    assert len(doubts) == 2 and "call c1.1" in doubts[0] and "'tokens'" in doubts[0]


def test_a_captured_request_over_grpcs_4_mib_default_is_served_its_captured_answer(
    serve: Serve, tmp_path: Path
) -> None:
    """A full capture of a 5 MiB echo request and its 5 MiB answer: serve takes the request and sends the
    answer, as Triton did (it takes messages of any size). With grpc's default receive limit of 4 MiB serve
    answered RESOURCE_EXHAUSTED to a request the capture holds."""
    from tritonclient.grpc import service_pb2 as pb

    from tests.data.make_golden import INFER, Builder

    size = 5 << 20
    data = (np.arange(size, dtype=np.uint64) % 251).astype(np.uint8)
    b = Builder(payload="full").start()
    b.call("c1.1", method=INFER)
    req = pb.ModelInferRequest(model_name="echo", id="big")
    req.inputs.add(name="INPUT", datatype="UINT8", shape=[size])
    req.raw_input_contents.append(data.tobytes())
    b.infer_message("c1.1", req)
    answer = pb.ModelInferResponse(model_name="echo", model_version="1", id="big")
    answer.outputs.add(name="OUTPUT", datatype="UINT8", shape=[size])
    answer.raw_output_contents.append(data[::-1].tobytes())
    b.infer_message("c1.1", answer)
    b.half_close("c1.1", ms=0)
    b.end("c1.1")
    path = tmp_path / "big.jsonl"
    path.write_bytes(b.finish().render())
    url = serve(str(path), speed=None)
    c = grpcclient.InferenceServerClient(url)  # tritonclient's channel takes up to 2 GiB either way
    try:
        result = c.infer("echo", echo_inputs(data), request_id="big")
    finally:
        c.close()
    assert np.array_equal(result.as_numpy("OUTPUT"), data[::-1])

"""`serve --http-listen` on loopback: real HTTP clients (tritonclient.http, httpx, curl, a raw socket) against
the mock Triton answering from HTTP captures.

The captures are built by tests/data/make_golden.py's Builder from the real Triton 2.51 HTTP exchanges of
tests/proxy/triton/data/http, with ``--payload full`` (the bodies and each event's bytes) or ``meta``; what a
client must get is what the real Triton sent in that exchange.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import shutil
import socket
import struct
import subprocess
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from proxy.ops.server import ProxyConfig, RecordingProxy
from proxy.triton.http_labels import SseSplitter
from replay.capture.events import HALF_CLOSE_ANSWERED, HALF_CLOSE_DETAILS
from replay.tools.match import STRATEGIES
from replay.tools.serve import MockTriton, load
from replay.tools.serve.httpd import HttpServe
from tests.data.make_golden import Builder, http_stream_cut_in_second_event
from tests.proxy.triton.http_wire import Exchange, exchanges
from tests.support.capture import of_kind, records
from tests.support.loop_thread import BackgroundLoop
from tests.support.triton_client import http_client, wait_for

WAIT_S = 30.0


class _Serve:
    def __init__(self, loop: BackgroundLoop, tmp: Path) -> None:
        self.loop = loop
        self.tmp = tmp
        self.stops: list[object] = []

    def __call__(self, capture: bytes, *, speed: float | None = 1.0, strategies: Sequence[str] = STRATEGIES) -> str:
        path = self.tmp / f"c{len(self.stops)}.jsonl"
        path.write_bytes(capture)
        mock = MockTriton(load([path]), speed=speed, strategies=strategies)
        http = HttpServe(mock.session, mock.other_used)
        port = self.loop.run(http.start("127.0.0.1:0"))
        self.stops.append(http)
        return f"127.0.0.1:{port}"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[_Serve]:
    loop = BackgroundLoop()
    s = _Serve(loop, tmp_path)
    try:
        yield s
    finally:
        for h in s.stops:
            assert isinstance(h, HttpServe)
            loop.run(h.stop())
        loop.close()


def _capture(*xs: Exchange, payload: str = "full", ms: float | list[float] = 1.0, cancel: bool = False) -> bytes:
    b = Builder(payload=payload).start(grpc=False, http=True)
    for i, x in enumerate(xs):
        call = f"c1.{i + 1}"
        if cancel:
            b.http_call(call, x)
            b.http_request(call, x)
            b.http_reply(call, x, ms=ms)
            b.http_cancel(call, "client_disconnect", ms=0.3)
            b.http_end(call, x, cause="client_disconnect", ms=0.2)
        else:
            b.http_call(call, x)
            b.http_request(call, x)
            b.http_reply(call, x, ms=ms)
            b.http_end(call, x)
    return b.finish().render()


def _events(body: bytes) -> list[str]:
    return [block for block in body.decode().split("\n\n") if block]


@pytest.mark.parametrize("binary", [False, True])
def test_tritonclient_http_infer_gets_the_captured_tensor(serve: _Serve, binary: bool) -> None:
    x = exchanges("01_unary_infer_tritonclient")[int(binary)]
    url = serve(_capture(x))
    with http_client(url, network_timeout=WAIT_S) as client:
        inp = httpclient.InferInput("INPUT", [5], "UINT8")
        inp.set_data_from_numpy(np.arange(5, dtype=np.uint8), binary_data=binary)
        out = httpclient.InferRequestedOutput("OUTPUT", binary_data=binary)
        result = client.infer("echo", [inp], outputs=[out], request_id=f"req-binary-{binary}")
    assert result.get_response()["id"] == f"req-binary-{binary}"
    assert result.as_numpy("OUTPUT").tolist() == [0, 1, 2, 3, 4]


def test_unmatched_infer_gets_404_error_json_naming_the_closest(serve: _Serve) -> None:
    url = serve(_capture(exchanges("01_unary_infer_tritonclient")[0]))
    with http_client(url, network_timeout=WAIT_S) as client:
        inp = httpclient.InferInput("INPUT", [5], "UINT8")
        inp.set_data_from_numpy(np.arange(5, dtype=np.uint8), binary_data=False)
        with pytest.raises(InferenceServerException) as e:
            client.infer("other_model", [inp], request_id="nope")
    assert "no captured request matches http infer request id 'nope' of model 'other_model'" in str(e.value)
    r = httpx.post(f"http://{url}/v2/models/other_model/infer", content=b'{"id":"nope"}', timeout=WAIT_S)
    assert r.status_code == 404 and "closest" in r.json()["error"]
    r = httpx.post(f"http://{url}/v2/models/echo/infer", content=b"not json", timeout=WAIT_S)
    assert r.status_code == 400 and "is not a JSON object" in r.json()["error"]


def test_generate_stream_events_come_as_captured_with_their_timing_and_a_clean_end(serve: _Serve) -> None:
    x = exchanges("03a_generate_stream_completed_keepalive")[0]
    url = serve(_capture(x, ms=[4, 200, 200]))
    arrivals: list[tuple[float, str]] = []
    t0 = time.monotonic()
    with httpx.stream("POST", f"http://{url}/v2/models/tokens/generate_stream", content=x.body, timeout=WAIT_S) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():  # completes without error only on the chunked terminator
            if line:
                arrivals.append((time.monotonic() - t0, line))
    assert [line for _, line in arrivals] == [e.strip() for e in _events(x.reply)]
    # Captured: +4 ms, +200 ms, +200 ms after the request. Served in that order, each no earlier than its captured
    # time after the request (counted from before it was sent): lower bounds from the start, not gaps (serve keeps
    # to the request's arrival, so one event a loaded machine delays makes the next gap shorter).
    times = [t for t, _ in arrivals]
    assert times[1] >= 0.204 and times[2] >= 0.404


def test_timing_fast_does_not_wait(serve: _Serve) -> None:
    x = exchanges("03a_generate_stream_completed_keepalive")[0]
    url = serve(_capture(x, ms=[4, 2000, 2000]), speed=None)
    t0 = time.monotonic()
    r = httpx.post(f"http://{url}/v2/models/tokens/generate_stream", content=x.body, timeout=WAIT_S)
    # Paced, the events would come 4.004 s after the request at the earliest: anything sooner did not wait.
    assert len(_events(r.content)) == 3 and time.monotonic() - t0 < 4.0


def test_captured_disconnect_ends_the_served_stream_without_the_terminator(serve: _Serve) -> None:
    (x,) = exchanges("04a_disconnect_after_2_events_tokens")
    url = serve(_capture(x, ms=[14, 300], cancel=True))
    got: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError):  # "peer closed connection without sending complete message body"
        with httpx.stream("POST", f"http://{url}/v2/models/tokens/generate_stream", content=x.body,
                          timeout=WAIT_S) as r:  # fmt: skip
            got.extend(line for line in r.iter_lines() if line)
    assert got == [e.strip() for e in _events(x.reply)] and len(got) == 2


@pytest.mark.parametrize("length", [True, False])
def test_a_reply_cut_mid_body_is_served_cut_never_as_a_complete_body(serve: _Serve, length: bool) -> None:
    """The head of Triton's infer reply reached the client, then the upstream went away mid-body (the capture:
    a 200 head, no reply message, upstream_disconnect): the served body must read as cut, as the recorded
    client read it, not as a complete empty 200; with or without a captured Content-Length."""
    x = exchanges("01_unary_infer_tritonclient")[0]
    if not length:
        x = dataclasses.replace(x, reply_headers=[(k, v) for k, v in x.reply_headers if k != b"content-length"])
    b = Builder(payload="full").start(grpc=False, http=True)
    b.http_call("c1.1", x)
    b.http_request("c1.1", x)
    b.http_cancel("c1.1", "upstream_disconnect")
    b.http_end("c1.1", x, cause="upstream_disconnect")
    url = serve(b.finish().render())
    path = x.method.split(" ", 1)[1]
    with pytest.raises(httpx.RemoteProtocolError):  # "peer closed connection without sending complete message body"
        httpx.post(f"http://{url}{path}", content=x.body, headers=dict(x.headers), timeout=WAIT_S)


def test_an_event_the_cut_ended_is_served_as_captured_not_completed(serve: _Serve) -> None:
    """A stream the client's disconnect cut inside its second event, whose first part the capture holds (a
    recorder that keeps what arrived of it): serve sends those bytes as they were, with no blank line added,
    so an SSE reader gets one event, as the recorded client did, then the cut."""
    b, x, part = http_stream_cut_in_second_event("full", keep_bytes=True, mark=True)
    url = serve(b.finish().render())
    got = b""
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", f"http://{url}/v2/models/tokens/generate_stream", content=x.body,
                          timeout=WAIT_S) as r:  # fmt: skip
            for piece in r.iter_raw():
                got += piece
    first = _events(x.reply)[0].encode() + b"\n\n"
    assert got == first + part
    assert len(SseSplitter().feed(got)) == 1


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_curl_n_generate_stream_prints_every_event(serve: _Serve) -> None:
    x = exchanges("03a_generate_stream_completed_keepalive")[0]
    url = serve(_capture(x, ms=[4, 50, 50]))
    out = subprocess.run(["curl", "-sS", "-N", "--max-time", "30", "-X", "POST", "-H", "content-type: application/json",
                          "--data-binary", x.body.decode(), f"http://{url}/v2/models/tokens/generate_stream"],
                         capture_output=True, timeout=WAIT_S, check=True)  # fmt: skip
    assert out.stdout == x.reply


def test_meta_capture_generate_stream_is_rebuilt_from_the_labels(serve: _Serve) -> None:
    x = exchanges("03a_generate_stream_completed_keepalive")[0]
    url = serve(_capture(x, payload="meta", ms=[1, 1, 1]))
    r = httpx.post(f"http://{url}/v2/models/tokens/generate_stream", content=x.body, timeout=WAIT_S)
    events = [json.loads(e.removeprefix("data: ")) for e in _events(r.content)]
    assert events == [{"id": "gs-1", "model_name": "tokens", "model_version": "1", "TEXT": None}] * 3


def test_keep_alive_and_pipelined_requests_are_answered_in_order_on_one_connection(serve: _Serve) -> None:
    first, second = exchanges("03a_generate_stream_completed_keepalive")
    health = exchanges("05a_health_metadata")[0]
    url = serve(_capture(first, second, health, ms=1))
    host, port = url.split(":")

    def request(x: Exchange) -> bytes:
        verb, target = x.method.split(" ", 1)
        return (f"{verb} {target} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(x.body)}\r\n\r\n").encode() + x.body

    with socket.create_connection((host, int(port)), timeout=WAIT_S) as s:
        s.sendall(request(second) + request(first))  # pipelined, in the other order than captured
        data = b""
        while data.count(b"0\r\n\r\n") < 2:
            chunk = s.recv(65536)
            assert chunk, f"connection closed early after {data!r}"
            data += chunk
        s.sendall(request(health))  # the same connection is still open: keep-alive
        while not data.endswith(b"content-length: 0\r\n\r\n"):
            chunk = s.recv(65536)
            assert chunk, f"connection closed early after {data!r}"
            data += chunk
    assert data.index(b"again-1") < data.index(b"hi-0")
    assert data.count(b"HTTP/1.1 200 OK") == 3


def test_http10_keep_alive_requests_are_answered_on_one_connection_as_triton_does(serve: _Serve) -> None:
    """ApacheBench -k: HTTP/1.0 with `Connection: keep-alive`. Triton answers `HTTP/1.0` with `Connection:
    keep-alive` and reads the next request; serve answered HTTP/1.1 `Connection: close` and closed (h11 keeps no
    HTTP/1.0 connection), so the client got one reply of three. Without keep-alive, the connection still ends."""
    health = exchanges("05a_health_metadata")[0]
    url = serve(_capture(health, health, ms=1))
    host, port = url.split(":")
    verb, target = health.method.split(" ", 1)
    kept = f"{verb} {target} HTTP/1.0\r\nhost: x\r\nconnection: keep-alive\r\n\r\n".encode()

    def read(s: socket.socket, heads: int) -> bytes:
        data = b""
        while data.count(b"HTTP/1.") < heads or not data.endswith(b"\r\n\r\n"):
            chunk = s.recv(65536)
            assert chunk, f"connection closed early after {data!r}"
            data += chunk
        return data

    with socket.create_connection((host, int(port)), timeout=WAIT_S) as s:
        s.sendall(kept + kept)  # pipelined
        data = read(s, 2)
        s.sendall(kept)  # and one more, later, on the same connection
        data += read(s, 1)
    assert data.count(b"HTTP/1.0 200 OK\r\n") == 3 and data.count(b"Connection: keep-alive\r\n") == 3, data
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as s:
        s.sendall(f"{verb} {target} HTTP/1.0\r\nhost: x\r\n\r\n".encode())
        once = b""
        while chunk := s.recv(65536):  # until serve closes
            once += chunk
    assert once.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close\r\n" in once, once


def test_a_head_request_gets_a_reply_without_a_body_and_the_connection_goes_on(serve: _Serve) -> None:
    """HEAD on a path the capture never saw: serve's own 404 went with its JSON body, which h11 refuses on a HEAD
    reply: the handler died in a traceback and the keep-alive connection with it (a captured HEAD reply with
    Triton's body did the same). Now the head alone, with its length, and the next request is answered."""
    health = exchanges("05a_health_metadata")[0]
    url = serve(_capture(health, ms=1))
    host, port = url.split(":")
    verb, target = health.method.split(" ", 1)
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as s:
        s.sendall(b"HEAD /v2/models/nowhere HTTP/1.1\r\nhost: x\r\n\r\n")
        data = b""
        while not data.endswith(b"\r\n\r\n"):
            chunk = s.recv(65536)
            assert chunk, f"connection closed early after {data!r}"
            data += chunk
        assert data.startswith(b"HTTP/1.1 404 ") and b"content-length: " in data.lower(), data
        s.sendall(f"{verb} {target} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
        rest = b""
        while b"HTTP/1.1 200 OK" not in rest or not rest.endswith(b"\r\n\r\n"):
            chunk = s.recv(65536)
            assert chunk, f"connection closed early after {rest!r}"
            rest += chunk
    assert rest.startswith(b"HTTP/1.1 200 OK"), rest  # (nothing of the 404's body before it)


def test_health_and_metadata_come_from_captured_calls(serve: _Serve) -> None:
    xs = exchanges("05a_health_metadata")
    url = serve(_capture(*xs[:4], xs[6]))
    with http_client(url, network_timeout=WAIT_S) as client:
        assert client.is_server_ready() and client.is_server_live()
        assert client.get_server_metadata()["version"] == "2.51.0"
        assert client.get_model_metadata("echo")["outputs"][0]["name"] == "OUTPUT"
    r = httpx.get(f"http://{url}/v2/models/nosuch", timeout=WAIT_S)  # captured: Triton's own 404
    assert r.status_code == 404 and r.json() == {"error": "Request for unknown model: 'nosuch' is not found"}
    r = httpx.get(f"http://{url}/v2/models/tokens", timeout=WAIT_S)  # not captured
    assert r.status_code == 404 and "no GET /v2/models/tokens call" in r.json()["error"]
    meta = serve(_capture(*xs[:4], payload="meta"))
    r = httpx.get(f"http://{meta}/v2", timeout=WAIT_S)
    assert r.status_code == 503 and "--payload full" in r.json()["error"]
    assert httpx.get(f"http://{meta}/v2/health/ready", timeout=WAIT_S).status_code == 200


def test_serve_command_with_http_listen_only(tmp_path: Path) -> None:
    """`triton-tap serve --http-listen` as a process: HTTP only, the ready file names the HTTP address, a
    client is answered, a stray request is logged, SIGTERM exits 0."""
    import signal
    import sys

    from tests.support.triton_client import wait_for

    capture = tmp_path / "c.jsonl"
    x = exchanges("03a_generate_stream_completed_keepalive")[0]
    capture.write_bytes(_capture(x, ms=1))
    ready, log = tmp_path / "ready.json", tmp_path / "serve.log"
    exe = Path(sys.executable).parent / "triton-tap"
    with open(log, "wb") as f:
        proc = subprocess.Popen([str(exe), "serve", "--http-listen", "127.0.0.1:0", "--ready-file", str(ready),
                                 str(capture)], stderr=f)  # fmt: skip
    try:
        wait_for(lambda: ready.exists() and ready.read_text().endswith("\n"), WAIT_S, "serve to be ready")
        info = json.loads(ready.read_text())
        assert info["listen"] == "" and info["http_listen"].startswith("127.0.0.1:")
        r = httpx.post(f"http://{info['http_listen']}/v2/models/tokens/generate_stream", content=x.body, timeout=WAIT_S)
        assert r.content == x.reply
        assert httpx.get(f"http://{info['http_listen']}/v2/health/live", timeout=WAIT_S).status_code == 404
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert f"on {info['http_listen']} (HTTP) (Ctrl-C stops)" in text
    assert "the capture has no GET /v2/health/live call" in text and "Traceback" not in text


@pytest.mark.parametrize("payload", ["full", "meta"])
def test_tritonclient_http_aio_gets_the_gzip_reply_as_captured_or_rebuilt(serve: _Serve, payload: str) -> None:
    """aiohttp asks for gzip and Triton compressed the replies: ``full`` serves the captured gzip bytes with
    their headers; ``meta`` rebuilds the JSON (zero-filled data) without the headers of the captured bytes."""
    import asyncio

    import tritonclient.http.aio as aioclient

    xs = exchanges("01c_unary_infer_tritonclient_aio")[:2]
    url = serve(_capture(*xs, payload=payload))

    async def run() -> list[list[int]]:
        c = aioclient.InferenceServerClient(url)
        try:
            inp = aioclient.InferInput("INPUT", [4], "UINT8")
            inp.set_data_from_numpy(np.arange(4, dtype=np.uint8))
            results = [await c.infer("echo", [inp], request_id=f"aio-{i}") for i in range(2)]
            return [r.as_numpy("OUTPUT").tolist() for r in results]
        finally:
            await c.close()

    assert asyncio.run(run()) == ([[0, 1, 2, 3]] * 2 if payload == "full" else [[0, 0, 0, 0]] * 2)
    x = xs[0]
    r = httpx.post(f"http://{url}/v2/models/echo/infer", content=x.body, headers=[(k.decode(), v.decode()) for k, v in x.headers
                   if k != b"content-length"], timeout=WAIT_S)  # fmt: skip
    of_the_bytes = {k: r.headers.get(k) for k in ("content-encoding", "inference-header-content-length")}
    assert of_the_bytes == ({"content-encoding": "gzip", "inference-header-content-length": "151"} if payload == "full"
                            else {"content-encoding": None, "inference-header-content-length": None})  # fmt: skip


def test_a_client_leaving_mid_request_is_one_info_line_not_a_traceback(
    serve: _Serve, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that sends a request head promising 20 bytes of body, sends 5 and closes: h11 calls that a
    protocol error, but the client only left: one info line, no "not HTTP/1.1" warning, no traceback of an
    answer written to a closed connection (asyncio's "Unhandled exception in client_connected_cb"), and
    serve answers the next client."""
    health = exchanges("05a_health_metadata")[0]
    url = serve(_capture(health, ms=1))
    host, port = url.split(":")
    with caplog.at_level(logging.INFO):
        with socket.create_connection((host, int(port)), timeout=WAIT_S) as s:
            s.sendall(b"POST /v2/models/echo/infer HTTP/1.1\r\nhost: x\r\ncontent-length: 20\r\n\r\n{\"id\"")
        deadline = time.monotonic() + WAIT_S
        while not any("in the middle of a request" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
            time.sleep(0.01)
        verb, target = health.method.split(" ", 1)
        reply = httpx.request(verb, f"http://{url}{target}", timeout=WAIT_S)
    assert reply.status_code == health.status
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_client_resetting_an_idle_keep_alive_connection_is_no_traceback(
    serve: _Serve, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that resets its idle keep-alive connection after an answer (SO_LINGER 0, as clients and load
    balancers do): the read fails with ECONNRESET; asyncio logged "Unhandled exception in client_connected_cb"
    with a traceback. Nothing is logged now (the client only left), and serve answers the next client."""
    health = exchanges("05a_health_metadata")[0]
    url = serve(_capture(health, ms=1))
    host, port = url.split(":")
    verb, target = health.method.split(" ", 1)
    with caplog.at_level(logging.INFO):
        s = socket.create_connection((host, int(port)), timeout=WAIT_S)
        s.sendall(f"{verb} {target} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
        got = b""
        while b"\r\n\r\n" not in got:
            got += s.recv(65536)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        reply = httpx.request(verb, f"http://{url}{target}", timeout=WAIT_S)
        time.sleep(0)  # (the reset is read by serve's loop; the next answer above came after it)
    assert reply.status_code == health.status and got.startswith(b"HTTP/1.1 200")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_expect_100_continue_is_answered_before_the_body(serve: _Serve) -> None:
    """curl sends `Expect: 100-continue` with bodies over 1 KiB and waits up to 1 s for it; Triton answers it at
    once. A client waiting for it (as this one does) got nothing from serve, and curl waited its second."""
    x = exchanges("01_unary_infer_tritonclient")[0]  # a JSON reply
    url = serve(_capture(x))
    host, port = url.split(":")
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as s:
        s.sendall(f"POST {x.method.split(' ', 1)[1]} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  f"content-length: {len(x.body)}\r\nexpect: 100-continue\r\n\r\n".encode())  # fmt: skip
        interim = b""
        while b"\r\n\r\n" not in interim:
            interim += s.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 "), interim
        s.sendall(x.body)
        reply = interim.split(b"\r\n\r\n", 1)[1]
        while not reply.endswith(b"]}"):  # (the JSON reply's end)
            reply += s.recv(65536)
    assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(x.reply[-30:]), reply


def test_stopping_while_an_answer_waits_is_no_traceback(serve: _Serve, caplog: pytest.LogCaptureFixture) -> None:
    """serve stopped (Ctrl-C) while it replays a stream whose client went away (it waits out the captured
    events, then a grace): the connection's task is cancelled, and asyncio's callback for it logged
    "Exception in callback ... CancelledError" with a traceback. Stopping ends it quietly."""
    (x,) = exchanges("04a_disconnect_after_2_events_tokens")
    url = serve(_capture(x, ms=[14, 3000], cancel=True))
    got: list[str] = []
    with caplog.at_level(logging.INFO):
        with httpx.stream("POST", f"http://{url}/v2/models/tokens/generate_stream", content=x.body,
                          timeout=WAIT_S) as r:  # fmt: skip
            lines = r.iter_lines()
            while not got:
                got.extend(line for line in [next(lines)] if line)
            http = serve.stops[-1]
            assert isinstance(http, HttpServe)
            serve.loop.run(http.stop())
    assert got and [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_meta_captures_health_answers_are_served_without_a_zero_filled_warning(
    serve: _Serve, caplog: pytest.LogCaptureFixture
) -> None:
    """A health answer is an empty body: a meta capture holds all of it, so there is no data to rebuild and no
    "output data is zero-filled" warning to give (it came once per health method, crying wolf)."""
    xs = exchanges("05a_health_metadata")
    meta = serve(_capture(*xs[:4], payload="meta"))
    with caplog.at_level(logging.INFO):
        for path in ("/v2/health/ready", "/v2/health/live"):
            r = httpx.get(f"http://{meta}{path}", timeout=WAIT_S)
            assert (r.status_code, r.content) == (200, b"")
    assert not [r.getMessage() for r in caplog.records if "zero-filled" in r.getMessage()]


def _closed_after_fin(x: Exchange) -> bytes:
    """A generate_stream whose client read 2 events and closed its socket (``curl -m``, a client that timed out),
    as the proxy records it in front of tritonserver 2.51: the events 2 and 100 ms after the request, the
    client's FIN (``half_close``), which the proxy passed on, and Triton's close 8 ms later: a
    ``client_disconnect`` whose details say Triton closed after the FIN (the capture of such a real client)."""
    b = Builder(payload="full").start(grpc=False, http=True)
    b.http_call("c1.1", x)
    b.http_request("c1.1", x)
    b.http_reply("c1.1", x, ms=[2, 100])
    b.half_close("c1.1", ms=0.4)
    b.http_cancel("c1.1", "client_disconnect", ms=8)
    b.http_end("c1.1", x, cause="client_disconnect", ms=0.1, details=HALF_CLOSE_DETAILS)
    return b.finish().render()


def _two_events(url: str, x: Exchange) -> tuple[socket.socket, bytes, float]:
    """A raw client's generate_stream request, read until 2 events have come; the socket, what it read, and when
    (``time.monotonic()``) it sent the request."""
    host, port = url.split(":")
    s = socket.create_connection((host, int(port)), timeout=WAIT_S)
    t0 = time.monotonic()
    s.sendall(f"POST {x.method.split(' ', 1)[1]} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              f"content-length: {len(x.body)}\r\n\r\n".encode() + x.body)  # fmt: skip
    got = b""
    while got.count(b"data:") < 2:
        chunk = s.recv(65536)
        assert chunk, got
        got += chunk
    return s, got, t0


def _to_eof(s: socket.socket, got: bytes) -> bytes:
    while chunk := s.recv(65536):
        got += chunk
    return got


@pytest.mark.parametrize("fin", [True, False])
def test_a_client_s_fin_ends_the_stream_when_triton_closed_after_the_captured_fin(serve: _Serve, fin: bool) -> None:
    """Triton closed 8 ms after the captured client's FIN; serve read nothing of the client while it replayed, so
    it never saw a live FIN and held the connection to the captured end plus the 1 s grace of an end a client
    makes (a call of ~110 ms lasted ~1.1 s through serve). A client that sends its FIN after 2 events (here it
    only half-closes, to see when serve closes) now sees the close as soon as Triton closed; one that sends no
    FIN still gets the captured end, after the grace."""
    (x,) = exchanges("04a_disconnect_after_2_events_tokens")
    url = serve(_closed_after_fin(x))
    s, got, t0 = _two_events(url, x)
    with s:
        t_fin = time.monotonic()
        if fin:
            s.shutdown(socket.SHUT_WR)
        got = _to_eof(s, got)
        closed = time.monotonic()
    assert got.startswith(b"HTTP/1.1 200 ") and got.count(b"data:") == 2 and not got.endswith(b"0\r\n\r\n")
    if fin:
        assert closed - t_fin < 0.5, closed - t_fin  # captured: 8 ms (not the grace's 1 s)
    else:
        assert closed - t0 >= 1.0, closed - t0  # the captured end (110 ms after the request) and the grace


def test_a_client_closing_after_two_events_lasts_as_captured_through_a_proxy(serve: _Serve, tmp_path: Path) -> None:
    """The reviewer's case: a client that reads 2 events and closes its socket, through the recording proxy in
    front of serve. The proxy passes the FIN on and records the call's end when serve closes: it lasted the
    captured ~110 ms, not 1 s more (``replay diff`` of the two captures said "slower beyond tolerance")."""
    (x,) = exchanges("04a_disconnect_after_2_events_tokens")
    url = serve(_closed_after_fin(x))
    proxy = RecordingProxy(ProxyConfig(listen="", upstream="", http_listen="127.0.0.1:0", http_upstream=url,
                                       capture_dir=tmp_path / "captures", payload="meta"))  # fmt: skip
    serve.loop.run(proxy.start())
    try:
        s, _, _ = _two_events(f"127.0.0.1:{proxy.http_port}", x)
        s.close()
        wait_for(lambda: b'"kind":"call_end"' in proxy.capture_path.read_bytes(), WAIT_S, "the call's end")
    finally:
        serve.loop.run(proxy.stop())
    (end,) = of_kind(records(proxy.capture_path), "call_end")
    assert (end["cause"], end["details"]) == ("client_disconnect", HALF_CLOSE_DETAILS)
    assert end["duration_ms"] < 600, end  # captured: 110 ms; serve waiting out the grace: over 1100


def test_a_client_that_half_closes_after_its_request_still_gets_an_answer_triton_gave_in_full(serve: _Serve) -> None:
    """An HTTP/1.1 client may send its FIN right after a complete request and read on: Triton answered this
    unary request in full after it (the capture says so). serve, which now reads the client's side while it
    answers, must not take that FIN for a close: the whole reply comes, then the connection closes."""
    x = exchanges("01_unary_infer_tritonclient")[0]  # a JSON reply
    b = Builder(payload="full").start(grpc=False, http=True)
    b.http_call("c1.1", x)
    b.http_request("c1.1", x)
    b.half_close("c1.1", ms=0.1)
    b.http_reply("c1.1", x, ms=200)
    b.http_end("c1.1", x, details=HALF_CLOSE_ANSWERED)
    url = serve(b.finish().render())
    host, port = url.split(":")
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as s:
        s.sendall(f"POST {x.method.split(' ', 1)[1]} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  f"content-length: {len(x.body)}\r\n\r\n".encode() + x.body)  # fmt: skip
        s.shutdown(socket.SHUT_WR)
        got = _to_eof(s, b"")
    head, body = got.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 ") and body == x.reply


def test_a_request_sent_while_an_answer_is_replayed_is_answered_next_and_a_fin_after_it_cuts_neither(
    serve: _Serve,
) -> None:
    """serve reads the client's side while it replays an answer (to see a FIN when it comes): a request sent
    meanwhile on the keep-alive connection must be kept for the next cycle, and the client's FIN after it (it
    half-closes once it has sent its last request) ends neither answer: the capture's Triton answered both."""
    first, second = exchanges("03a_generate_stream_completed_keepalive")
    url = serve(_capture(first, second, ms=[4, 150, 150]))
    host, port = url.split(":")

    def request(x: Exchange) -> bytes:
        verb, target = x.method.split(" ", 1)
        return (f"{verb} {target} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(x.body)}\r\n\r\n").encode() + x.body

    with socket.create_connection((host, int(port)), timeout=WAIT_S) as s:
        s.sendall(request(first))
        data = b""
        while b"data:" not in data:
            chunk = s.recv(65536)
            assert chunk, data
            data += chunk
        s.sendall(request(second))
        s.shutdown(socket.SHUT_WR)
        data = _to_eof(s, data)
    assert data.count(b"HTTP/1.1 200 OK") == 2 and data.count(b"\r\n0\r\n\r\n") == 2, data
    assert data.count(b"data:") == len(_events(first.reply)) + len(_events(second.reply))


def _echo_exchange(x: Exchange, rid: str, data: list[int]) -> Exchange:
    """``x``, a compressed echo infer exchange of the real Triton, asking (compressed the same way) and answered
    for ``data`` under the id ``rid``."""
    encoding = next(v for k, v in x.headers if k == b"content-encoding")
    # What tritonclient.http sends for one JSON input and no outputs named (its parameter included)
    ask = json.dumps({"id": rid, "inputs": [{"name": "INPUT", "shape": [3], "datatype": "UINT8", "data": data}],
                      "parameters": {"binary_data_output": True}}, separators=(",", ":")).encode()  # fmt: skip
    body = gzip.compress(ask) if encoding == b"gzip" else zlib.compress(ask)
    reply = json.dumps({"id": rid, "model_name": "echo", "model_version": "1", "outputs": [
        {"name": "OUTPUT", "datatype": "UINT8", "shape": [3], "data": data}]}, separators=(",", ":")).encode()  # fmt: skip

    def sized(headers: list[tuple[bytes, bytes]], n: int) -> list[tuple[bytes, bytes]]:
        return [(k, str(n).encode() if k == b"content-length" else v) for k, v in headers]

    return dataclasses.replace(x, headers=sized(x.headers, len(body)), body=body, reply=reply,
                               reply_headers=sized(x.reply_headers, len(reply)), pieces=[reply])  # fmt: skip


def _echo(client: httpclient.InferenceServerClient, data: list[int], rid: str, encoding: str | None) -> tuple[str, list[int]]:
    inp = httpclient.InferInput("INPUT", [3], "UINT8")
    inp.set_data_from_numpy(np.array(data, dtype=np.uint8), binary_data=False)
    r = client.infer("echo", [inp], request_id=rid, request_compression_algorithm=encoding)
    return r.get_response()["id"], r.as_numpy("OUTPUT").tolist()


def test_tritonclient_http_gzip_and_deflate_requests_are_matched_by_their_id_in_any_order(serve: _Serve) -> None:
    """A compressed body is read decompressed, as the recorder's labels read the captured one: its id matches
    (it was read as no id at all, so the first request took the first captured answer, whoever's it was, and a
    second run got 404s)."""
    gz, deflate = exchanges("05b_compressed_request_bodies")[:2]  # the real Triton's, ids gz-1 and deflate-1
    url = serve(_capture(gz, deflate))
    with http_client(url, network_timeout=WAIT_S) as client:
        for _ in range(2):  # the same script twice: id matches replay a captured request again
            assert _echo(client, [7, 8, 9], "deflate-1", "deflate") == ("deflate-1", [7, 8, 9])
            assert _echo(client, [7, 8, 9], "gz-1", "gzip") == ("gz-1", [7, 8, 9])


def test_a_compressed_request_is_matched_by_what_it_asks_whatever_its_encoding(serve: _Serve) -> None:
    """``--match payload``: the input hash of a compressed body is of its decompressed bytes, on both sides, so a
    request matches the captured one that asked the same, gzip, deflate or plain (it matched none: 404)."""
    gz, deflate = exchanges("05b_compressed_request_bodies")[:2]
    url = serve(_capture(_echo_exchange(gz, "gzA", [1, 2, 3]), _echo_exchange(deflate, "dfB", [7, 8, 9])),
                strategies=("payload",))  # fmt: skip
    with http_client(url, network_timeout=WAIT_S) as client:
        assert _echo(client, [7, 8, 9], "new-1", "gzip") == ("dfB", [7, 8, 9])  # served as captured: its id
        assert _echo(client, [1, 2, 3], "new-2", "deflate") == ("gzA", [1, 2, 3])
        assert _echo(client, [1, 2, 3], "new-3", None) == ("gzA", [1, 2, 3])


def test_a_body_serve_cannot_decompress_is_matched_by_order_and_a_compressed_non_json_one_is_400(
    serve: _Serve, caplog: pytest.LogCaptureFixture
) -> None:
    """br (Triton answers 501) and a body sent as gzip that is not: neither has an id or hash the labels could read,
    here or in the capture, so the capture's order decides, and an info line says why. A body that decompresses to
    something other than JSON is refused as a plain one is."""
    xs = exchanges("05b_compressed_request_bodies")
    bad, br = xs[3], xs[4]
    url = serve(_capture(br, bad))

    def post(x: Exchange) -> httpx.Response:
        headers = [(k.decode(), v.decode()) for k, v in x.headers if k != b"content-length"]
        return httpx.post(f"http://{url}/v2/models/echo/infer", content=x.body, headers=headers, timeout=WAIT_S)

    with caplog.at_level(logging.INFO, logger="triton_tap.serve"):
        r = post(br)
        assert (r.status_code, r.json()) == (501, {"error": "Unsupported compression type"})
        r = post(bad)
        assert r.status_code == 400 and "Raw request must only have 1 input" in r.json()["error"]
    said = [m.getMessage() for m in caplog.records]
    assert any("Content-Encoding 'br': body not decoded: no id or input hash" in m for m in said)
    assert any("gzip body does not decompress" in m for m in said)
    r = httpx.post(f"http://{url}/v2/models/echo/infer", content=gzip.compress(b"not json"),
                   headers={"Content-Encoding": "gzip"}, timeout=WAIT_S)  # fmt: skip
    assert r.status_code == 400 and "body (8 bytes) is not a JSON object" in r.json()["error"]

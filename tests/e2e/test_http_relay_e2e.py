"""``record`` relaying Triton's HTTP port (and its gRPC port, one capture), against the real CPU
tritonserver, with clients nobody here wrote: tritonclient.http (binary data on and off,
async_infer), tritonclient.http.aio, ``curl -N`` and httpx disconnecting mid-stream and before the
first event. Each test has its own proxy (random ports) in a thread, stopped at teardown.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer
from proxy.relay.http1 import HALF_CLOSE_ANSWERED, HALF_CLOSE_DETAILS
from replay.capture.reader import read_capture
from replay.machine.tracker import track
from tests.support.capture import of_kind, records
from tests.support.triton_client import http_client


def http_url(proxy: ProxyThread) -> str:
    return f"127.0.0.1:{proxy.proxy.http_port}"


def wait_for(cond: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def calls(recs: list[dict[str, Any]], method: str) -> list[str]:
    return [r["call"] for r in of_kind(recs, "call_start") if r["method"] == method]


def end_of(recs: list[dict[str, Any]], call: str) -> dict[str, Any]:
    (end,) = of_kind(recs, "call_end", call)
    return end


def test_tritonclient_http_binary_on_off_and_async(both_ports: ProxyThread) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    data = np.arange(16, dtype=np.uint8)
    with http_client(http_url(both_ports)) as c:
        for binary in (False, True):
            inp = httpclient.InferInput("INPUT", [16], "UINT8")
            inp.set_data_from_numpy(data, binary_data=binary)
            out = httpclient.InferRequestedOutput("OUTPUT", binary_data=binary)
            r = c.infer("echo", [inp], outputs=[out], request_id=f"bin-{binary}")
            assert (r.as_numpy("OUTPUT") == data).all()
        inp = httpclient.InferInput("INPUT", [16], "UINT8")
        inp.set_data_from_numpy(data)
        assert (c.async_infer("echo", [inp], request_id="async-1").get_result().as_numpy("OUTPUT") == data).all()
        assert c.is_server_ready()
    # One gRPC call too: one capture, one seq, connection ids unique across both ports.
    with grpcclient.InferenceServerClient(both_ports.url) as g:
        assert g.is_server_ready()
    recs = records(both_ports.stop())
    start = recs[0]
    assert start["http_listen"] == http_url(both_ports) and start["listen"] == both_ports.url
    infers = calls(recs, "POST /v2/models/echo/infer")
    assert len(infers) == 3
    ids = [m["request_id"] for c in infers for m in of_kind(recs, "message", c) if m["dir"] == "s2c"]
    assert ids == ["bin-False", "bin-True", "async-1"]
    for c in infers:
        end = end_of(recs, c)
        assert (end["status"], end["cause"], end["http_status"]) == ("200", "ok", 200)
        reply = next(m for m in of_kind(recs, "message", c) if m["dir"] == "s2c")
        assert reply["output_tensors"][0]["name"] == "OUTPUT" and reply["decode_error"] is None
    conns = {r["conn"]: r["protocol"] for r in of_kind(recs, "call_start")}
    assert set(conns.values()) == {"http", "grpc"}
    assert [r["seq"] for r in recs] == list(range(len(recs)))


def test_tritonclient_http_aio_gzip_replies(both_ports: ProxyThread) -> None:
    import tritonclient.http.aio as aioclient

    async def run() -> None:
        c = aioclient.InferenceServerClient(http_url(both_ports))
        try:
            inp = aioclient.InferInput("INPUT", [4], "UINT8")
            inp.set_data_from_numpy(np.arange(4, dtype=np.uint8))
            results = await asyncio.gather(*(c.infer("echo", [inp], request_id=f"aio-{i}") for i in range(3)))
            assert all(r.as_numpy("OUTPUT").tolist() == [0, 1, 2, 3] for r in results)
        finally:
            await c.close()

    asyncio.run(run())
    recs = records(both_ports.stop())
    replies = [m for c in calls(recs, "POST /v2/models/echo/infer") for m in of_kind(recs, "message", c)
               if m["dir"] == "s2c"]  # fmt: skip
    assert sorted(m["request_id"] for m in replies) == ["aio-0", "aio-1", "aio-2"]
    # aiohttp asks for gzip and Triton compresses infer replies: labelled after decompressing.
    assert all(m["compressed"] and m["outputs"] == ["OUTPUT"] for m in replies)


def test_curl_generate_stream(both_ports: ProxyThread) -> None:
    body = '{"id":"curl-1","PROMPT":"c","MAX_TOKENS":3,"DELAY_MS":20}'
    out = subprocess.run(
        ["curl", "-sN", "-X", "POST", f"http://{http_url(both_ports)}/v2/models/tokens/generate_stream", "-d", body],
        capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    assert out.stdout.count(b"data: ") == 3
    recs = records(both_ports.stop())
    (call,) = calls(recs, "POST /v2/models/tokens/generate_stream")
    events = [m for m in of_kind(recs, "message", call) if m["dir"] == "s2c"]
    assert [(m["request_id"], m["final"]) for m in events] == [("curl-1", False), ("curl-1", False), ("curl-1", True)]
    assert (end_of(recs, call)["status"], end_of(recs, call)["cause"]) == ("200", "ok")


def test_an_http10_health_check_answered_up_to_tritons_close_is_ok(both_ports: ProxyThread) -> None:
    """`curl --http1.0` (HAProxy's and ab's health checks alike): Triton answers 200 with neither Content-Length
    nor Transfer-Encoding and closes, which ends the reply. The call is `ok`, not `upstream_disconnect` (every
    healthy check was read as Triton dropping the connection)."""
    for path in ("/v2/health/live", "/v2/health/ready"):
        out = subprocess.run(["curl", "-sS", "--http1.0", "-o", "/dev/null", "-w", "%{http_code}",
                              f"http://{http_url(both_ports)}{path}"], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert (out.returncode, out.stdout) == (0, "200"), out
    recs = records(both_ports.stop())
    ends = [(end_of(recs, c)["status"], end_of(recs, c)["cause"]) for p in ("live", "ready")
            for c in calls(recs, f"GET /v2/health/{p}")]  # fmt: skip
    assert ends == [("200", "ok"), ("200", "ok")], ends
    assert not of_kind(recs, "cancel")


def _cancelled_in_log(triton: TritonServer, model: str, rid: str) -> bool:
    return f"{model}: request {rid} cancelled after" in triton.log_path.read_text(errors="replace")


def test_httpx_disconnect_mid_stream(both_ports: ProxyThread, triton: TritonServer) -> None:
    rid = "hx-mid-e2e"
    got = 0
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", f"http://{http_url(both_ports)}/v2/models/tokens/generate_stream",
                           json={"id": rid, "PROMPT": "h", "MAX_TOKENS": 50, "DELAY_MS": 100}) as r:  # fmt: skip
            for line in r.iter_lines():
                if line.startswith("data: "):
                    got += 1
                    if got == 2:
                        break
    # Leaving the blocks closed the connection: the proxy closes upstream and the model stops.
    wait_for(lambda: _cancelled_in_log(triton, "tokens", rid), what="the model's cancel log line")
    recs = records(both_ports.stop())
    (call,) = calls(recs, "POST /v2/models/tokens/generate_stream")
    (cancel,) = of_kind(recs, "cancel", call)
    assert (cancel["cause"], cancel["in_flight"], cancel["responded"], cancel["forwarded_upstream"]) == (
        "client_disconnect", [rid], [rid], True)  # fmt: skip
    events = [m for m in of_kind(recs, "message", call) if m["dir"] == "s2c"]
    assert len(events) >= 2 and not any(m["final"] for m in events)
    assert end_of(recs, call)["cause"] == "client_disconnect"


def test_httpx_disconnect_before_first_event(both_ports: ProxyThread, triton: TritonServer) -> None:
    """A request queued behind a busy steps_serial (one instance): Triton sends nothing for it, not
    even headers, until it runs; the client gives up before that. Its close reaches the proxy as a
    FIN, which it passes on (a half-closing client would still want the reply): Triton notices it
    when the request runs, sends the head and at most the first event, and closes; the capture
    records the cancel then, with what Triton sent."""
    import threading

    url = f"http://{http_url(both_ports)}/v2/models/steps_serial/generate_stream"
    busy_done: list[int] = []

    def busy() -> None:
        with httpx.Client(timeout=60) as c:
            busy_done.append(c.post(url, json={"id": "busy-e2e", "PROMPT": "a", "MAX_TOKENS": 4, "DELAY_MS": 400})
                             .status_code)  # fmt: skip

    t = threading.Thread(target=busy, name="busy-client")
    t.start()
    try:
        wait_for(lambda: "steps_serial: request busy-e2e started" in triton.log_path.read_text(errors="replace"),
                 what="the busy request to start")  # fmt: skip
        rid = "hx-first-e2e"
        with httpx.Client(timeout=httpx.Timeout(30, read=0.3)) as client:
            with pytest.raises(httpx.ReadTimeout):
                with client.stream("POST", url, json={"id": rid, "PROMPT": "h", "MAX_TOKENS": 5, "DELAY_MS": 50}) as r:
                    for _ in r.iter_lines():
                        pass
    finally:
        t.join(60)
    assert busy_done == [200]
    # Triton notices the close only when the queued request runs: the model logs the cancel then.
    wait_for(lambda: _cancelled_in_log(triton, "steps_serial", rid), what="the model's cancel log line")
    recs = records(both_ports.stop())
    call = [c for c in calls(recs, "POST /v2/models/steps_serial/generate_stream")
            if of_kind(recs, "cancel", c)]  # fmt: skip
    assert len(call) == 1
    (cancel,) = of_kind(recs, "cancel", call[0])
    end = end_of(recs, call[0])
    assert (cancel["cause"], cancel["in_flight"], cancel["forwarded_upstream"]) == ("client_disconnect", [rid], True)
    assert end["messages_s2c"] <= 1 and cancel["responded"] == ([rid] if end["messages_s2c"] else [])
    assert (end["cause"], end["details"]) == ("client_disconnect", HALF_CLOSE_DETAILS)


def _half_closed_exchange(addr: str, path: str, body: dict[str, Any], timeout: float = 30.0) -> bytes:
    """One POST on a plain socket, then ``shutdown(SHUT_WR)`` (TCP half-close) at once; everything
    read until the server closes its side (a server that keeps the connection open fails the test)."""
    data = json.dumps(body).encode()
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(data)}\r\n\r\n".encode() + data)  # fmt: skip
        s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    return got


def test_half_close_unary_answered_in_full(both_ports: ProxyThread, triton: TritonServer) -> None:
    """Triton 2.51, reached directly, answers a unary request in full after the client half-closed
    (shutdown(SHUT_WR) right after the request; here the reply comes 300 ms later), then closes its
    side. Through the proxy the client gets the same reply and the call is recorded as answered."""
    path = "/v2/models/echo/infer"
    body = {"id": "hc-unary", "inputs": [{"name": "INPUT", "datatype": "UINT8", "shape": [3], "data": [1, 2, 3]},
                                         {"name": "DELAY_MS", "datatype": "INT32", "shape": [1], "data": [300]}]}  # fmt: skip
    direct = _half_closed_exchange(triton.http_url.removeprefix("http://"), path, body)
    assert direct.startswith(b"HTTP/1.1 200 OK\r\n") and direct.endswith(b'"data":[1,2,3]}]}')
    assert _half_closed_exchange(http_url(both_ports), path, body) == direct
    capture = both_ports.stop()
    recs = records(capture)
    (call,) = calls(recs, "POST " + path)
    end = end_of(recs, call)
    assert (end["status"], end["cause"], end["http_status"], end["details"]) == ("200", "ok", 200, HALF_CLOSE_ANSWERED)
    # check: answered in full, after the client's FIN: a client that closed sends the same FIN as this one,
    # so its reading is not confirmed (`unconfirmed`, noted), never `completed`.
    (outcome,) = [r for r in track(capture).requests if r.call == call]
    assert (outcome.outcome, outcome.notes) == ("unconfirmed", ("client_closed_first",))
    assert (end["messages_c2s"], end["messages_s2c"]) == (1, 1)
    assert not of_kind(recs, "cancel")
    # The FIN as it happened, before the reply Triton sent 300 ms later.
    (fin,) = of_kind(recs, "half_close", call)
    (reply,) = [m for m in of_kind(recs, "message", call) if m["dir"] == "s2c"]
    assert fin["seq"] < reply["seq"] and reply["t_ns"] - fin["t_ns"] > 200e6


def test_half_close_stream_cut_by_triton(both_ports: ProxyThread, triton: TritonServer) -> None:
    """Triton 2.51, reached directly, cuts a ``generate_stream`` when the client half-closes: it sends
    the response head and at most the first event on a quiet machine (which of the two is a race
    inside Triton; never the last chunk), closes the connection and cancels the request (the model logs ``cancelled after 1
    responses``). Through the proxy the client gets the same; the capture says the client's FIN ended
    the call (passed on to Triton, which closed), with the events the client got."""
    path = "/v2/models/tokens/generate_stream"
    body = {"id": "hc-direct", "PROMPT": "h", "MAX_TOKENS": 5, "DELAY_MS": 200}
    direct = _half_closed_exchange(triton.http_url.removeprefix("http://"), path, body)
    wait_for(lambda: _cancelled_in_log(triton, "tokens", "hc-direct"), what="the model's cancel log line")
    via = _half_closed_exchange(http_url(both_ports), path, {**body, "id": "hc-proxy"})
    for got in (direct, via):
        # Triton cut the stream: no clean end. What it sent before it noticed is a race inside it (the
        # head, or the head and the first event; on a busy machine possibly more, or nothing): the
        # proxy passes on what Triton sends, and the capture counts exactly that.
        assert not got.endswith(b"0\r\n\r\n") and got.count(b"data: ") < body["MAX_TOKENS"], got
        assert got == b"" or (got.startswith(b"HTTP/1.1 200 OK\r\n") and b"text/event-stream" in got), got
    wait_for(lambda: _cancelled_in_log(triton, "tokens", "hc-proxy"), what="the model's cancel log line")
    recs = records(both_ports.stop())
    (call,) = calls(recs, "POST " + path)
    events = [m for m in of_kind(recs, "message", call) if m["dir"] == "s2c"]
    assert len(events) == via.count(b"data: ") and not any(m["final"] for m in events)
    (cancel,) = of_kind(recs, "cancel", call)
    assert (cancel["cause"], cancel["in_flight"], cancel["forwarded_upstream"]) == (
        "client_disconnect", ["hc-proxy"], True)  # fmt: skip
    end = end_of(recs, call)
    assert (end["cause"], end["details"]) == ("client_disconnect", HALF_CLOSE_DETAILS)
    assert end["http_status"] == (200 if via else None)  # the head, when it reached the client
    (fin,) = of_kind(recs, "half_close", call)
    assert fin["seq"] < cancel["seq"]


def test_capture_reads_and_upgrades(both_ports: ProxyThread, tmp_path: Path) -> None:
    with httpx.Client(timeout=30) as client:
        r = client.post(f"http://{http_url(both_ports)}/v2/models/tokens/generate_stream",
                        json={"id": "up-1", "PROMPT": "u", "MAX_TOKENS": 2, "DELAY_MS": 5})  # fmt: skip
        assert r.status_code == 200
    path = both_ports.stop()
    kinds = [rec.kind for _, rec in read_capture(path)]
    assert kinds.count("call_end") == 1 and kinds[-1] == "capture_end"
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from proxy.cli import main; sys.exit(main())", "replay", "upgrade", str(path), "-o", str(tmp_path / "up")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    (upgraded,) = [Path(p) for p in out.stdout.split()]
    assert [rec.kind for _, rec in read_capture(upgraded)] == kinds


def _read_reply(s: socket.socket) -> tuple[bytes, bytes]:
    """``(head, body)`` of the next Content-Length reply on ``s`` (a close before it fails the test)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, f"closed before a reply: {buf!r}"
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    assert b"content-length:" in head.lower(), head
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(body) < length:
        chunk = s.recv(65536)
        assert chunk, "closed mid-body"
        body += chunk
    return head, body


def test_http10_keep_alive_goes_on(both_ports: ProxyThread) -> None:
    """The real Triton 2.51 answers HTTP/1.0 with ``Connection: keep-alive`` (ApacheBench -k) with
    ``HTTP/1.0`` ``Connection: keep-alive`` and serves the next request on the connection: through
    the proxy too, each a call, and no protocol_error blames the client."""
    host, port = http_url(both_ports).split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        for rid in ("k1", "k2"):
            body = json.dumps({"id": rid, "inputs": [{"name": "INPUT", "shape": [1], "datatype": "UINT8",
                                                      "data": [1]}]}).encode()  # fmt: skip
            s.sendall(b"POST /v2/models/echo/infer HTTP/1.0\r\nHost: tap\r\nConnection: keep-alive\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)  # fmt: skip
            head, reply = _read_reply(s)
            assert head.startswith(b"HTTP/1.0 200") and b"connection: keep-alive" in head.lower()
            assert json.loads(reply)["id"] == rid
    recs = records(both_ports.stop())
    assert not of_kind(recs, "protocol_error")
    kept = calls(recs, "POST /v2/models/echo/infer")
    assert [(end_of(recs, c)["cause"], end_of(recs, c)["http_status"]) for c in kept] == [("ok", 200), ("ok", 200)]
    assert kept[0].split(".")[0] == kept[1].split(".")[0]  # one connection


def test_a_request_after_the_clients_own_close_leaves_it_the_answer_triton_gives(
    both_ports: ProxyThread, triton: TritonServer
) -> None:
    """A client asks to close, then pipelines another request in the same write (HTTP/1.1 forbids it). The real
    Triton answers the first and closes; through the proxy the client gets the same bytes (it got a bare close:
    the proxy took the second request for the client's protocol error before the first answer came)."""

    def exchange(where: str) -> bytes:
        host, port = where.split(":")
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: tap\r\nConnection: close\r\n\r\n"
                      b"GET /v2/health/live HTTP/1.1\r\nHost: tap\r\n\r\n")  # fmt: skip
            got = b""
            while chunk := s.recv(65536):
                got += chunk
            return got

    direct = exchange(triton.http_url.removeprefix("http://"))
    assert direct.startswith(b"HTTP/1.1 200") and direct.count(b"HTTP/1.1") == 1, direct
    assert exchange(http_url(both_ports)) == direct
    recs = records(both_ports.stop())
    assert not of_kind(recs, "protocol_error")
    (ready,) = calls(recs, "GET /v2/health/ready")
    (live,) = calls(recs, "GET /v2/health/live")
    assert (end_of(recs, ready)["cause"], end_of(recs, ready)["http_status"]) == ("ok", 200)
    assert end_of(recs, live)["cause"] == "upstream_disconnect"


def test_generate_stream_completes_at_its_clean_end(both_ports: ProxyThread) -> None:
    """The `scripted` model's "t,F": one text event, then, 800 ms later, the final flag alone, which
    Triton's generate_stream turns into no event, only the body's end. The client learns of completion
    then; check's duration runs to it, not to the event."""
    url = f"http://{http_url(both_ports)}/v2/models/scripted/generate_stream"
    t0 = time.monotonic()
    with httpx.Client(timeout=30) as client:
        r = client.post(url, json={"id": "t-then-final", "PROMPT": "t,F", "MAX_TOKENS": 1, "DELAY_MS": 800})
    client_ms = (time.monotonic() - t0) * 1000
    assert r.status_code == 200 and r.text.count("data: ") == 1 and client_ms > 700
    (req,) = track(both_ports.stop()).requests
    assert (req.outcome, req.responses, req.final) == ("completed", 1, True)
    assert req.duration_ms is not None and 700 < req.duration_ms <= client_ms, (req.duration_ms, client_ms)


def test_a_body_giving_its_id_twice_is_labelled_with_the_id_triton_used(both_ports: ProxyThread) -> None:
    """`{"id": "d1", "id": "d2", ...}`: Triton's JSON parser takes the first, and answers with "d1"; the
    capture said "d2" (orjson keeps the last), an id Triton never used, beside responses saying "d1"."""
    body = b'{"id":"d1","id":"d2","PROMPT":"h","MAX_TOKENS":2,"DELAY_MS":1}'
    r = httpx.post(f"http://{http_url(both_ports)}/v2/models/tokens/generate_stream", content=body, timeout=30)
    assert r.status_code == 200 and '"id":"d1"' in r.text
    recs = records(both_ports.stop())
    (call,) = calls(recs, "POST /v2/models/tokens/generate_stream")
    ids = [(m["dir"], m["request_id"]) for m in of_kind(recs, "message", call)]
    assert ids[0] == ("c2s", "d1") and {rid for _, rid in ids} == {"d1"}, ids


def test_the_http_port_over_tls_offers_http11_and_curl_gets_its_answer(triton: TritonServer, tmp_path: Path) -> None:
    """--tls-cert on a proxy relaying both ports: the HTTP port offers HTTP/1.1 in ALPN, so curl (which offers h2
    first) speaks HTTP/1.1 and gets Triton's answer. It offered h2 only: curl chose it and failed (exit 18), and the
    capture blamed the client for breaking HTTP/1.x. The gRPC port still offers h2."""
    import ssl

    from tests.support.tls import make_pki

    pki = make_pki(tmp_path / "pki")
    http_upstream = triton.http_url.removeprefix("http://")
    with ProxyThread(triton.grpc_url, tmp_path / "captures", payload="meta", drain_timeout=5,
                     http_listen="127.0.0.1:0", http_upstream=http_upstream,
                     tls_cert=pki.server_cert, tls_key=pki.server_key) as proxy:  # fmt: skip
        out = subprocess.run(["curl", "-sS", "--cacert", str(pki.ca), "-o", "/dev/null", "-w", "%{http_code} %{http_version}",
                              f"https://{http_url(proxy)}/v2/health/ready"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert (out.returncode, out.stdout) == (0, "200 1.1"), out.stderr
        ctx = ssl.create_default_context(cafile=pki.ca)
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        chosen = {}
        for name, port in (("grpc", proxy.port), ("http", proxy.proxy.http_port)):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                    ctx.wrap_socket(raw, server_hostname="localhost") as sock:  # fmt: skip
                chosen[name] = sock.selected_alpn_protocol()
        assert chosen == {"grpc": "h2", "http": "http/1.1"}
    recs = records(proxy.stop())
    assert of_kind(recs, "protocol_error") == []
    (call,) = calls(recs, "GET /v2/health/ready")
    assert end_of(recs, call)["status"] == "200"

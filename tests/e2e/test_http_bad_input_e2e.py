"""Bad input on Triton's HTTP port through the proxy, against the real CPU tritonserver.

While a ``generate_stream`` runs on one connection, each bad input arrives on a connection of its
own: bytes that are not HTTP, a header block past the proxy's limit, a request body the client cuts
short, two requests pipelined in one write. Each gets its record; the stream on the other
connection runs to its clean end with every event, the proxy keeps serving (a tritonclient.http
call afterwards), and nothing recorded before is lost. (The sans-IO core's tests in
tests/proxy/relay/test_http1.py decide each case byte by byte; this one proves the running proxy
keeps them apart.)
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

import httpx
import numpy as np

from proxy.lab.background import ProxyThread
from proxy.relay.http1 import MAX_HEAD
from tests.e2e.test_http_relay_e2e import calls, end_of, http_url, wait_for
from tests.support.capture import of_kind, records
from tests.support.triton_client import http_client

#: The steady stream's events, 400 ms apart: it must outlast the bad connections (3.2 s against well under a
#: second quiet; at 150 ms apart, 1.2 s, a loaded machine could finish it first).
STEADY_EVENTS = 8


def _echo_request(rid: str) -> bytes:
    body = json.dumps({"id": rid, "inputs": [{"name": "INPUT", "shape": [3], "datatype": "UINT8", "data": [1, 2, 3]}]})
    return (
        f"POST /v2/models/echo/infer HTTP/1.1\r\nHost: tap\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}"
    ).encode()


def _send_until_closed(address: tuple[str, int], data: bytes, timeout: float = 30.0) -> None:
    """Send ``data`` on a new connection and read until the proxy closes it (a timeout fails the
    test; a reset while sending or reading is a close too)."""
    with socket.create_connection(address, timeout=timeout) as s:
        try:
            s.sendall(data)
            while s.recv(65536):
                pass
        except (ConnectionResetError, BrokenPipeError):
            pass


def _replies(s: socket.socket, n: int, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The JSON bodies of the next ``n`` Content-Length replies on ``s``."""
    s.settimeout(timeout)
    buf = bytearray()
    out: list[dict[str, Any]] = []
    while len(out) < n:
        head_end = buf.find(b"\r\n\r\n")
        if head_end >= 0:
            head = bytes(buf[:head_end]).decode("latin-1").lower()
            length = int(head.split("content-length:")[1].split("\r\n")[0])
            if len(buf) >= head_end + 4 + length:
                assert head.startswith("http/1.1 200"), head
                out.append(json.loads(buf[head_end + 4 : head_end + 4 + length]))
                del buf[: head_end + 4 + length]
                continue
        chunk = s.recv(65536)
        assert chunk, f"closed after {len(out)} of {n} replies"
        buf += chunk
    return out


def test_bad_connections_leave_the_others_and_the_capture_whole(both_ports: ProxyThread) -> None:
    import tritonclient.http as httpclient

    url = http_url(both_ports)
    host, port = url.split(":")
    address = (host, int(port))
    events: list[str] = []
    ended: list[bool] = []

    def steady() -> None:
        with httpx.Client(timeout=60) as c:
            with c.stream("POST", f"http://{url}/v2/models/tokens/generate_stream",
                          json={"id": "steady", "PROMPT": "s", "MAX_TOKENS": STEADY_EVENTS, "DELAY_MS": 400}) as r:  # fmt: skip
                events.extend(line for line in r.iter_lines() if line.startswith("data: "))
        ended.append(True)

    stream = threading.Thread(target=steady, name="steady-stream")
    stream.start()
    try:
        wait_for(lambda: events, what="the steady stream's first event")
        _send_until_closed(address, b"\x16\x03\x01 this is not HTTP at all\r\n\r\n")
        # Past the proxy's limit by more than one read (256 KiB) in 1 KiB lines: Triton would take it.
        lines = b"".join(b"X-H%d: %s\r\n" % (i, b"a" * 1000) for i in range((MAX_HEAD + (512 << 10)) // 1000))
        _send_until_closed(address, b"GET /v2/health/ready HTTP/1.1\r\nHost: tap\r\n" + lines + b"\r\n")
        with socket.create_connection(address, timeout=10) as s:
            # 12 of the 1000 bytes announced, then the close (TCP keeps the order: the bytes arrive first).
            s.sendall(b'POST /v2/models/echo/infer HTTP/1.1\r\nHost: tap\r\nContent-Length: 1000\r\n\r\n{"id": "cut"')
        with socket.create_connection(address, timeout=10) as s:
            s.sendall(_echo_request("pipe-1") + _echo_request("pipe-2"))
            assert [r["id"] for r in _replies(s, 2)] == ["pipe-1", "pipe-2"]
        assert not ended, "the steady stream ended before the bad connections were done: make it longer"
        stream.join(timeout=60)
        assert not stream.is_alive()
    finally:
        stream.join(timeout=60)
    assert ended and len(events) == STEADY_EVENTS
    with http_client(url) as c:
        inp = httpclient.InferInput("INPUT", [3], "UINT8")
        inp.set_data_from_numpy(np.array([7, 8, 9], dtype=np.uint8))
        assert (c.infer("echo", [inp], request_id="after").as_numpy("OUTPUT") == [7, 8, 9]).all()

    recs = records(both_ports.stop())
    assert [r["seq"] for r in recs] == list(range(recs[0]["seq"], recs[0]["seq"] + len(recs)))  # nothing lost
    errors = [(e["side"], e["error"]) for e in of_kind(recs, "protocol_error")]
    assert len(errors) == 2 and all(side == "client" for side, _ in errors), errors
    assert "too long" in errors[1][1], errors
    (steady_call,) = calls(recs, "POST /v2/models/tokens/generate_stream")
    s2c = [m for m in of_kind(recs, "message", steady_call) if m["dir"] == "s2c"]
    assert len(s2c) == STEADY_EVENTS and [m["final"] for m in s2c] == [False] * (STEADY_EVENTS - 1) + [True]
    assert end_of(recs, steady_call)["cause"] == "ok"
    echo = calls(recs, "POST /v2/models/echo/infer")
    assert len(echo) == 4  # the cut body, two pipelined, the last one
    ends = [end_of(recs, c) for c in echo]
    assert [(e["cause"], e["status"]) for e in ends] == [
        ("client_disconnect", "CANCELLED"), ("ok", "200"), ("ok", "200"), ("ok", "200")]  # fmt: skip
    (cancel,) = of_kind(recs, "cancel", echo[0])
    assert cancel["cause"] == "client_disconnect"
    assert [m["size"] for m in of_kind(recs, "message", echo[0])] == [12]  # what arrived, recorded
    assert echo[1].split(".")[0] == echo[2].split(".")[0]  # the pipelined two: one connection
    assert recs[-1]["kind"] == "capture_end"

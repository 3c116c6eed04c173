"""HTTP replay against the real CPU tritonserver's HTTP port: ``replay send`` re-drives a recorded HTTP session
(disconnects included) through its in-process recorder, and ``serve --http-listen`` answers the same clients
from the capture, recorded by the proxy in front of serve.

The session, recorded with ``--payload full`` through the proxy's HTTP relay: tritonclient.http infer (binary
on and off), a generate_stream read to its end (httpx), one the client (httpx) leaves after 2 events and one a
raw-socket client leaves with a reset before the first event (``silent`` answers after 3 s); two raw-socket clients half-close
(TCP FIN) after their request (a unary one Triton answers, an event stream it cuts). ``send`` must re-enact the disconnects and the FINs (the
new capture says ``client_disconnect`` for them, with the same events before), and ``serve`` must give the
clients the captured events.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient

from proxy.lab.background import LoopThread, ProxyThread
from proxy.lab.tritonserver import TritonServer
from replay.capture.events import HALF_CLOSE_DETAILS
from replay.tools.serve import MockTriton, load
from replay.tools.serve.httpd import HttpServe
from tests.support.capture import of_kind, records
from tests.support.triton_client import http_client

pytestmark = pytest.mark.timeout(300)
WAIT_S = 60.0


def _cli(*args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from proxy.cli import main; sys.exit(main(sys.argv[1:]))", *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _session(url: str) -> dict[str, Any]:
    """The recorded client traffic; what each client got."""
    got: dict[str, Any] = {}
    data = np.arange(8, dtype=np.uint8)
    with http_client(url) as c:
        for binary in (False, True):
            inp = httpclient.InferInput("INPUT", [8], "UINT8")
            inp.set_data_from_numpy(data, binary_data=binary)
            r = c.infer("echo", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT", binary_data=binary)],
                        request_id=f"bin-{binary}")  # fmt: skip
            got[f"bin-{binary}"] = r.as_numpy("OUTPUT").tolist()
    body = {"id": "gs-full", "PROMPT": "p", "MAX_TOKENS": 3, "DELAY_MS": 100}
    with httpx.stream("POST", f"http://{url}/v2/models/tokens/generate_stream", json=body, timeout=WAIT_S) as r:
        got["gs-full"] = [line for line in r.iter_lines() if line]
    body = {"id": "gs-cut", "PROMPT": "q", "MAX_TOKENS": 8, "DELAY_MS": 300}
    with httpx.stream("POST", f"http://{url}/v2/models/tokens/generate_stream", json=body, timeout=WAIT_S) as r:
        lines = r.iter_lines()
        got["gs-cut"] = [line for line in (next(lines), next(lines), next(lines)) if line][:2]
    # Leave before the first event: `silent` sends its only response (the final flag) after 3 s. The
    # client resets its connection: a plain close is a FIN, which the proxy passes on to Triton as it
    # would a half-close, and Triton still answers `silent` after one (docs/recording.md).
    data = json.dumps({"id": "gs-early", "PROMPT": "e", "DELAY_MS": 3000}).encode()
    host, port = url.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as s:
        s.sendall(b"POST /v2/models/silent/generate_stream HTTP/1.1\r\nHost: " + url.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)  # fmt: skip
        s.settimeout(0.5)
        with pytest.raises(TimeoutError):
            s.recv(1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    # Two raw-socket clients half-close (TCP FIN) right after their request: Triton answers the
    # unary one in full after it, and cuts the event stream (docs/recording.md).
    for rid, path, body in (
        ("hc-unary", "/v2/models/echo/infer", {"id": "hc-unary", "inputs": [
            {"name": "INPUT", "datatype": "UINT8", "shape": [2], "data": [4, 2]},
            {"name": "DELAY_MS", "datatype": "INT32", "shape": [1], "data": [300]}]}),
        ("hc-cut", "/v2/models/tokens/generate_stream", {"id": "hc-cut", "PROMPT": "h", "MAX_TOKENS": 5, "DELAY_MS": 200}),
    ):  # fmt: skip
        data = json.dumps(body).encode()
        with socket.create_connection((host, int(port)), timeout=WAIT_S) as s:
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: {url}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(data)}\r\n\r\n".encode() + data)  # fmt: skip
            s.shutdown(socket.SHUT_WR)
            got[rid] = b""
            while chunk := s.recv(65536):
                got[rid] += chunk
    return got


def _ended_calls(path: Path) -> int:
    """``call_end`` records written so far (a line being written is not counted)."""
    n = 0
    for line in path.read_text().splitlines():
        try:
            n += json.loads(line).get("kind") == "call_end"
        except ValueError:
            break
    return n


def _http_url(proxy: ProxyThread) -> str:
    return f"127.0.0.1:{proxy.proxy.http_port}"


@pytest.fixture(scope="module")
def recorded(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    out = tmp_path_factory.mktemp("recorded")
    with ProxyThread(triton.grpc_url, out / "captures", payload="full", drain_timeout=5, http_listen="127.0.0.1:0",
                     http_upstream=triton.http_url.removeprefix("http://")) as proxy:  # fmt: skip
        got = _session(_http_url(proxy))
        deadline = time.monotonic() + WAIT_S
        while _ended_calls(proxy.capture_path) < 7:  # every call of the session ended, as recorded
            assert time.monotonic() < deadline, "the session's calls did not all end"
            time.sleep(0.05)
        path = proxy.stop()
    yield path, got


def _causes(path: Path) -> dict[str, tuple[str, int]]:
    """Per request id: the call's cause and its number of s2c messages."""
    recs = records(path)
    out: dict[str, tuple[str, int]] = {}
    for start in of_kind(recs, "call_start"):
        msgs = of_kind(recs, "message", start["call"])
        rid = next((str(m["request_id"]) for m in msgs if m["dir"] == "c2s"), "")
        (end,) = of_kind(recs, "call_end", start["call"])
        out[rid] = (end["cause"], sum(m["dir"] == "s2c" for m in msgs))
    return out


def _call_ids(recs: list[dict[str, Any]]) -> dict[str, str]:
    """Call -> the request id of its c2s message."""
    return {m["call"]: str(m["request_id"]) for m in of_kind(recs, "message") if m["dir"] == "c2s"}


def test_send_re_drives_http_calls_and_re_enacts_the_disconnects(
    recorded: tuple[Path, dict[str, Any]], triton: TritonServer, tmp_path: Path
) -> None:
    path, _ = recorded
    before = _causes(path)
    assert before["gs-cut"] == ("client_disconnect", 2) and before["gs-early"] == ("client_disconnect", 0)
    assert before["hc-unary"] == ("ok", 1) and before["hc-cut"][0] == "client_disconnect"
    recs = records(path)
    assert {c for c in (r["call"] for r in of_kind(recs, "half_close"))} >= {
        c for c, rid in _call_ids(recs).items() if rid in ("hc-unary", "hc-cut")}  # fmt: skip
    # --cancel-at responses: each disconnect after the events its client had (by time alone, how many
    # events arrive before it is Triton's timing: 1 instead of 2 was seen on a loaded machine)
    r = _cli("replay", "send", str(path), "--http-target", triton.http_url.removeprefix("http://"),
             "--out", str(tmp_path / "sent"), "--drain", "20", "--cancel-at", "responses")  # fmt: skip
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stderr
    # gs-cut and gs-early by a reset or a FIN (as recorded), hc-cut by send's FIN that Triton answered with its close
    assert "ended by send: client_disconnect 3" in r.stdout
    assert "outcomes seen by send: ended by send 3, HTTP body ended 4" in r.stdout
    assert "HTTP status seen by send: 200 6;" in r.stdout  # the early disconnect saw no head
    (new,) = (tmp_path / "sent").glob("*.jsonl")
    after = _causes(new)
    assert after["gs-full"] == before["gs-full"] == ("ok", 3)
    assert after["bin-True"] == after["bin-False"] == ("ok", 1)
    assert after["gs-cut"] == ("client_disconnect", 2)
    assert after["gs-early"] == ("client_disconnect", 0)
    assert after["hc-unary"] == ("ok", 1) and after["hc-cut"][0] == "client_disconnect"
    sent = records(new)
    fins = {r["call"] for r in of_kind(sent, "half_close")}
    assert {rid for c, rid in _call_ids(sent).items() if c in fins} >= {"hc-unary", "hc-cut"}  # re-enacted as FINs


def test_send_without_http_target_is_a_clear_error(recorded: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    path, _ = recorded
    r = _cli("replay", "send", str(path), "--out", str(tmp_path / "sent"))
    assert r.returncode == 2 and "give --http-target" in r.stderr and not (tmp_path / "sent").exists()


def test_serve_answers_the_recorded_clients_and_a_recording_of_serve_checks_the_same(
    recorded: tuple[Path, dict[str, Any]], triton: TritonServer, tmp_path: Path
) -> None:
    path, got = recorded
    loop = LoopThread("serve")
    mock = MockTriton(load([path]), speed=1.0)
    http = HttpServe(mock.session, mock.other_used)
    port = loop.run(http.start("127.0.0.1:0"))
    try:
        with ProxyThread(triton.grpc_url, tmp_path / "captures", payload="meta", drain_timeout=5, http_listen="127.0.0.1:0",
                         http_upstream=f"127.0.0.1:{port}") as proxy:  # fmt: skip
            url = _http_url(proxy)
            with http_client(url) as c:
                for binary in (False, True):
                    inp = httpclient.InferInput("INPUT", [8], "UINT8")
                    inp.set_data_from_numpy(np.arange(8, dtype=np.uint8), binary_data=binary)
                    r = c.infer("echo", [inp], request_id=f"bin-{binary}",
                                outputs=[httpclient.InferRequestedOutput("OUTPUT", binary_data=binary)])  # fmt: skip
                    assert r.as_numpy("OUTPUT").tolist() == got[f"bin-{binary}"]
            body = {"id": "gs-full", "PROMPT": "p", "MAX_TOKENS": 3, "DELAY_MS": 100}
            with httpx.stream("POST", f"http://{url}/v2/models/tokens/generate_stream", json=body,
                              timeout=WAIT_S) as resp:  # fmt: skip
                assert [line for line in resp.iter_lines() if line] == got["gs-full"]
            # The captured disconnect: the served stream stops after the same 2 events, without its end.
            body = {"id": "gs-cut", "PROMPT": "q", "MAX_TOKENS": 8, "DELAY_MS": 300}
            lines: list[str] = []
            with pytest.raises(httpx.RemoteProtocolError):
                with httpx.stream("POST", f"http://{url}/v2/models/tokens/generate_stream", json=body,
                                  timeout=WAIT_S) as resp:  # fmt: skip
                    lines.extend(line for line in resp.iter_lines() if line)
            assert lines == got["gs-cut"]
            served = proxy.stop()
    finally:
        loop.run(http.stop())
        loop.close()
    after = _causes(served)
    assert after["gs-full"] == ("ok", 3)
    assert after["gs-cut"] == ("upstream_disconnect", 2)  # here serve is the upstream that went away
    # `replay check` of the recording of serve says what it says of the original capture, request by request.
    outcomes: dict[Path, dict[str, tuple[str, int]]] = {}
    for capture in (path, served):
        check = _cli("replay", "check", str(capture), "--json")
        assert check.returncode in (0, 1), check.stderr
        outcomes[capture] = {
            r["request_id"]: (r["outcome"], r["responses"]) for r in json.loads(check.stdout)["requests"]
        }
    served_ids = ("bin-False", "bin-True", "gs-full", "gs-cut")
    assert {k: outcomes[served][k] for k in served_ids} == {k: outcomes[path][k] for k in served_ids}
    assert outcomes[served]["gs-full"] == ("completed", 3) and outcomes[served]["gs-cut"] == ("disconnected", 2)


def _fin_after_two_events(url: str) -> None:
    """A generate_stream read for 2 events, then the socket closed (a FIN): ``curl -m``, a client that timed out."""
    body = json.dumps({"id": "fin1", "PROMPT": "c", "MAX_TOKENS": 50, "DELAY_MS": 100}).encode()
    host, port = url.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as s:
        s.sendall(b"POST /v2/models/tokens/generate_stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip
        got = b""
        while got.count(b"data:") < 2:
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk


def _the_end(proxy: ProxyThread) -> dict[str, Any]:
    """The one call's end, once the proxy recorded it; the proxy stopped."""
    deadline = time.monotonic() + WAIT_S
    while _ended_calls(proxy.capture_path) < 1:
        assert time.monotonic() < deadline, "the call did not end"
        time.sleep(0.01)
    (end,) = of_kind(records(proxy.stop()), "call_end")
    return end


def test_serve_closes_as_triton_did_after_a_client_s_fin_mid_stream(triton: TritonServer, tmp_path: Path) -> None:
    """A client closes its socket after 2 events of a generate_stream: Triton closes ~2 ms after the FIN the proxy
    passes on (a call of ~110 ms, its end Triton's close after the FIN). serve, which did not read the client
    while it replayed the stream, never saw that FIN and held the connection to the captured end plus the 1 s
    grace of an end the client makes: through serve the call lasted ~1.1 s (``replay diff``: slower). Now serve
    sees the FIN and closes as Triton did."""
    http = triton.http_url.removeprefix("http://")
    with ProxyThread(triton.grpc_url, tmp_path / "live", payload="full", drain_timeout=5, http_listen="127.0.0.1:0",
                     http_upstream=http) as proxy:  # fmt: skip
        _fin_after_two_events(_http_url(proxy))
        live = _the_end(proxy)
    assert (live["cause"], live["details"], live["messages_s2c"]) == ("client_disconnect", HALF_CLOSE_DETAILS, 2)
    assert live["duration_ms"] < 600, live  # (Triton closes at once after the FIN)
    loop = LoopThread("serve")
    mock = MockTriton(load([proxy.capture_path]), speed=1.0)
    serve = HttpServe(mock.session, mock.other_used)
    port = loop.run(serve.start("127.0.0.1:0"))
    try:
        with ProxyThread(triton.grpc_url, tmp_path / "served", payload="full", drain_timeout=5,
                         http_listen="127.0.0.1:0", http_upstream=f"127.0.0.1:{port}") as proxy:  # fmt: skip
            _fin_after_two_events(_http_url(proxy))
            served = _the_end(proxy)
    finally:
        loop.run(serve.stop())
        loop.close()
    assert (served["cause"], served["details"], served["messages_s2c"]) == ("client_disconnect", HALF_CLOSE_DETAILS, 2)
    # Far below the captured end plus the grace (1 s), whatever the machine's load adds to both.
    assert served["duration_ms"] < live["duration_ms"] + 500, (live, served)


def _echo3(c: Any, data: list[int], rid: str, request: str | None, reply: str | None = None) -> tuple[str, list[int]]:
    """tritonclient.http echo of ``data`` (JSON), its body compressed with ``request``, the reply asked as ``reply``."""
    inp = httpclient.InferInput("INPUT", [3], "UINT8")
    inp.set_data_from_numpy(np.array(data, dtype=np.uint8), binary_data=False)
    r = c.infer("echo", [inp], request_id=rid, request_compression_algorithm=request,
                response_compression_algorithm=reply)  # fmt: skip
    return r.get_response()["id"], r.as_numpy("OUTPUT").tolist()


def test_serve_matches_compressed_http_requests_recorded_from_triton_by_id_and_by_payload(
    triton: TritonServer, tmp_path: Path
) -> None:
    """tritonclient.http requests sent gzip and deflate compressed (``Content-Encoding``), recorded in front of the
    real Triton, then served and sent in the other order: each gets its own answer, by id and, under new ids, by
    what it asks. serve read such a body as nothing (no id, no hash): the first request got the first captured
    answer whoever's it was, and the same script again got 404s. A reply Triton sent gzip (asked with
    ``Accept-Encoding``) is served as Triton sent it."""
    script = [("gzA", [1, 2, 3], "gzip", None), ("gzB", [7, 8, 9], "gzip", None),
              ("dfC", [4, 5, 6], "deflate", None), ("gzD", [2, 4, 6], "gzip", "gzip")]  # fmt: skip
    with ProxyThread(triton.grpc_url, tmp_path / "captures", payload="full", drain_timeout=5, http_listen="127.0.0.1:0",
                     http_upstream=triton.http_url.removeprefix("http://")) as proxy:  # fmt: skip
        with http_client(_http_url(proxy)) as c:
            live = {rid: _echo3(c, data, rid, request, reply) for rid, data, request, reply in script}
        assert live == {rid: (rid, data) for rid, data, _, _ in script}
        deadline = time.monotonic() + WAIT_S
        while _ended_calls(proxy.capture_path) < len(script):
            assert time.monotonic() < deadline, "the calls did not all end"
            time.sleep(0.05)
        path = proxy.stop()
    recs = records(path)
    asked = {m["call"]: m for m in of_kind(recs, "message") if m["dir"] == "c2s"}
    assert sorted(m["request_id"] for m in asked.values() if m["compressed"]) == ["dfC", "gzA", "gzB", "gzD"]
    replied = {asked[e["call"]]["request_id"]: dict(e["initial_metadata"]).get("content-encoding")
               for e in of_kind(recs, "call_end")}  # fmt: skip
    assert replied == {"gzA": None, "gzB": None, "dfC": None, "gzD": "gzip"}  # Triton compresses only when asked
    loop = LoopThread("serve")
    try:
        for strategies, tag in ((("id", "payload", "order"), ""), (("payload",), "new-")):
            mock = MockTriton(load([path]), speed=None, strategies=strategies)
            http = HttpServe(mock.session, mock.other_used)
            port = loop.run(http.start("127.0.0.1:0"))
            try:
                with http_client(f"127.0.0.1:{port}") as c:
                    for _ in range(2):  # the other order, twice
                        for rid, data, request, reply in reversed(script):
                            assert _echo3(c, data, tag + rid, request, reply) == (rid, data)
                assert mock.session.unmatched == []
            finally:
                loop.run(http.stop())
    finally:
        loop.close()

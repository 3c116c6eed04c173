"""`replay check` shows the connections the proxy closed for breaking HTTP/2 (`protocol_error` records):
in the table, the summary and `--json`. A client breaking it is shown and leaves the exit code alone;
the upstream breaking it is the server's failure (exit 1), like a violation (docs/outcomes.md)."""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from proxy.ops.server import ProxyConfig, RecordingProxy
from replay.cli.check import check
from tests.support.bad_upstream import bad_h2_upstream
from tests.support.fake_triton import start_fake
from tests.support.loop_thread import BackgroundLoop
from tests.support.proxy import stop_proxy


@pytest.fixture
def bg() -> Iterator[BackgroundLoop]:
    loop = BackgroundLoop()
    yield loop
    loop.close()


def _proxy(bg: BackgroundLoop, upstream: str, tmp_path: Path) -> RecordingProxy:
    proxy = RecordingProxy(ProxyConfig(listen="127.0.0.1:0", upstream=upstream, capture_dir=tmp_path / "captures",
                                       drain_timeout=2.0))  # fmt: skip
    bg.run(proxy.start())
    return proxy


def _check(path: Path, *, as_json: bool) -> tuple[int, str]:
    out = io.StringIO()
    code = check([str(path)], as_json=as_json, out=out, err=io.StringIO())
    return code, out.getvalue()


def test_a_client_speaking_http1_is_shown_and_not_a_failure(bg: BackgroundLoop, tmp_path: Path) -> None:
    """An HTTP/1.1 request sent to the proxy's port: one `protocol_error` (side client) in the table and
    the JSON, exit 0. The upstream (the fake Triton) plays no part: the proxy refuses the client's bytes."""
    server, port = bg.run(start_fake(0))
    try:
        proxy = _proxy(bg, f"127.0.0.1:{port}", tmp_path)
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
            s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: triton\r\n\r\n")
            while s.recv(65536):  # the proxy answers GOAWAY and closes
                pass
        stop_proxy(proxy)
    finally:
        bg.run(server.stop(None))
    code, out = _check(proxy.capture_path, as_json=False)
    assert code == 0, out
    assert "connections closed for breaking HTTP/2 or HTTP/1.x (protocol_error)" in out
    (row,) = [line for line in out.splitlines() if line.startswith("│ c1 ")]
    assert "client" in row and "not an HTTP/2 connection preface" in row
    assert out.splitlines()[-1].endswith("0 hole(s), 1 protocol error(s)")
    code, text = _check(proxy.capture_path, as_json=True)
    doc = json.loads(text)
    assert code == 0 and doc["summary"]["protocol_errors"] == 1
    (err,) = doc["protocol_errors"]
    assert (err["conn"], err["side"], err["error_code"], err["open_calls"]) == ("c1", "client", 1, [])
    assert "not an HTTP/2 connection preface" in err["error"] and isinstance(err["seq"], int)


def test_an_upstream_breaking_http2_makes_check_exit_1(bg: BackgroundLoop, tmp_path: Path) -> None:
    """The upstream answers with an invalid frame: `protocol_error` (side upstream), exit 1.

    A raw socket plays the upstream (tests/support/bad_upstream.py): no real server can be made to send invalid
    frames.
    """
    with bad_h2_upstream() as upstream:
        proxy = _proxy(bg, upstream, tmp_path)
        with grpc.insecure_channel(f"127.0.0.1:{proxy.port}") as ch:
            with pytest.raises(grpc.RpcError):
                pb_grpc.GRPCInferenceServiceStub(ch).ServerLive(pb.ServerLiveRequest(), timeout=10)
        stop_proxy(proxy)
    code, text = _check(proxy.capture_path, as_json=True)
    doc = json.loads(text)
    assert doc["protocol_errors"] and {e["side"] for e in doc["protocol_errors"]} == {"upstream"}
    assert doc["summary"]["violations"] == 0 and doc["summary"]["unattributable"] == 0
    assert code == 1
    code, out = _check(proxy.capture_path, as_json=False)
    assert code == 1 and "upstream" in out

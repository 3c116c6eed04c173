"""TLS on both sides of the proxy: real tritonclient (ssl=True) -> proxy -> a TLS fake Triton.

The fake upstream is used because the packaged CPU tritonserver is started without TLS here; the
client side against the real tritonserver is in tests/e2e/test_reliability_e2e.py. The CA and
certificates are generated per test session (tests/support/tls.py).
"""

from __future__ import annotations

import http.server
import queue
import socket
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc
from tritonclient.utils import InferenceServerException

from proxy.ops.server import RecordingProxy
from replay.errors import UpstreamError, UserError
from tests.support.capture import calls_by_method, of_kind, records
from tests.support.fake_triton import start_fake
from tests.support.loop_thread import BackgroundLoop
from tests.support.proxy import stop_proxy
from tests.support.tls import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A fresh CA with server and client certificates."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls_upstream(bg: BackgroundLoop, pki: Pki) -> Iterator[int]:
    """The fake Triton serving TLS and requiring a client certificate (mTLS); yields its port."""
    server, port = bg.run(start_fake(0, tls=pki, mtls=True))
    yield port
    bg.run(server.stop(None))


def _tls_client(port: int, pki: Pki) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(f"127.0.0.1:{port}", ssl=True, root_certificates=str(pki.ca))


def _echo(client: grpcclient.InferenceServerClient) -> np.ndarray:
    data = np.arange(16, dtype=np.uint8)
    inp = grpcclient.InferInput("INPUT", [data.size], "UINT8")
    inp.set_data_from_numpy(data)
    out = client.infer("echo", [inp], request_id="tls1", client_timeout=20).as_numpy("OUTPUT")
    assert np.array_equal(out, data)
    return out


def _mtls_kw(pki: Pki) -> dict[str, Any]:
    return dict(
        tls_cert=pki.server_cert, tls_key=pki.server_key, upstream_tls=True, upstream_ca=pki.ca,
        upstream_cert=pki.client_cert, upstream_key=pki.client_key,
    )  # fmt: skip


def test_tls_both_sides_with_mtls_upstream(
    tls_upstream: int, pki: Pki, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """ssl=True tritonclient through a TLS-listening proxy to an mTLS upstream: unary and stream work, recorded."""
    proxy = start_proxy(f"127.0.0.1:{tls_upstream}", **_mtls_kw(pki))
    client = _tls_client(proxy.port, pki)
    assert client.is_server_live()
    _echo(client)
    q: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: q.put((result, error)))
    inp = grpcclient.InferInput("PROMPT", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"p"], dtype=object))
    client.async_stream_infer("m", [inp], request_id="s1", parameters={"n": 3})
    got = [q.get(timeout=20) for _ in range(3)]
    assert all(e is None for _, e in got)
    client.stop_stream()
    client.close()
    stop_proxy(proxy)
    recs = records(proxy.capture_path)
    assert recs[0]["options"]["tls_listen"] is True and recs[0]["options"]["tls_upstream"] is True
    (call,) = calls_by_method(recs, "ModelStreamInfer")
    assert [r["request_id"] for r in of_kind(recs, "message", call) if r["dir"] == "s2c"] == ["s1"] * 3
    assert {e["cause"] for e in of_kind(recs, "call_end")} == {"ok"}


def test_upstream_server_name_overrides_sni_and_authority(
    tls_upstream: int, pki: Pki, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """--upstream-server-name: the certificate is checked against that name (which the IP cert also holds)."""
    proxy = start_proxy(f"127.0.0.1:{tls_upstream}", **_mtls_kw(pki), upstream_server_name="triton.staging.test")
    client = _tls_client(proxy.port, pki)
    _echo(client)
    client.close()
    with pytest.raises(UpstreamError, match="TLS certificate rejected: Hostname mismatch"):
        start_proxy(f"127.0.0.1:{tls_upstream}", **_mtls_kw(pki), upstream_server_name="not-in-the.cert")


def test_untrusted_upstream_certificate_fails_at_start(
    tls_upstream: int, pki: Pki, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """An upstream whose certificate the given CA did not sign: one UpstreamError naming TLS and what the check
    found (it said only CERTIFICATE_VERIFY_FAILED, whatever failed), no capture."""
    kw = _mtls_kw(pki) | {"upstream_ca": pki.other_ca}
    with pytest.raises(UpstreamError, match=r"TLS certificate rejected: unable to get local issuer certificate"):
        start_proxy(f"127.0.0.1:{tls_upstream}", **kw)


def test_mtls_upstream_without_client_certificate_fails_calls(
    tls_upstream: int, pki: Pki, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """No --upstream-cert against an mTLS upstream: the start check or the first call fails (UNAVAILABLE), never hangs."""
    kw = _mtls_kw(pki) | {"upstream_cert": None, "upstream_key": None}
    try:
        proxy = start_proxy(f"127.0.0.1:{tls_upstream}", **kw)
    except UpstreamError:
        return  # TLS 1.2 style: the server rejects the handshake itself
    client = _tls_client(proxy.port, pki)
    with pytest.raises(InferenceServerException) as info:
        _echo(client)
    client.close()
    assert "UNAVAILABLE" in str(info.value.status())


def test_plaintext_client_on_tls_listener_fails_and_tls_clients_go_on(
    tls_upstream: int, pki: Pki, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """An h2c client against the TLS port fails quickly; a TLS client right after is served."""
    proxy = start_proxy(f"127.0.0.1:{tls_upstream}", **_mtls_kw(pki))
    with grpc.insecure_channel(f"127.0.0.1:{proxy.port}") as ch:
        with pytest.raises(grpc.RpcError) as info:
            pb_grpc.GRPCInferenceServiceStub(ch).ServerLive(pb.ServerLiveRequest(), timeout=5)
    assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    client = _tls_client(proxy.port, pki)
    _echo(client)
    client.close()


def test_h2c_stays_the_default(fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]) -> None:
    """Without TLS flags the proxy speaks h2c on both sides (an insecure channel works), and records so."""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{proxy.port}")
    _echo(client)
    client.close()
    stop_proxy(proxy)
    opts = records(proxy.capture_path)[0]["options"]
    assert (opts["tls_listen"], opts["tls_upstream"]) == (False, False)


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"tls_cert": Path("/nonexistent/cert.pem"), "tls_key": Path("/nonexistent/key.pem")}, "cannot load --tls-cert"),
        ({"tls_cert": Path("/x.pem")}, "--tls-cert and --tls-key go together"),
        ({"upstream_ca": Path("/x.pem")}, "need --upstream-tls"),
        ({"upstream_tls": True, "upstream_ca": Path("/nonexistent/ca.pem")}, "cannot load --upstream-ca"),
    ],
)
def test_bad_tls_options_are_user_errors(
    kw: dict[str, Any], needle: str, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """Missing files or half-given TLS options: a UserError saying which flag, before anything binds."""
    with pytest.raises(UserError, match=needle):
        start_proxy(f"127.0.0.1:{fake_upstream.port}", **kw)


def test_upstream_context_verifies_names() -> None:
    """The upstream TLS context checks host names and certificates (never CERT_NONE)."""
    from proxy.ops.server import ProxyConfig
    from proxy.ops.tls import upstream_ssl

    ctx = upstream_ssl(ProxyConfig(upstream_tls=True))
    assert ctx is not None and ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED


def test_a_tls_upstream_reached_without_upstream_tls_fails_at_start_naming_tls(
    tls_upstream: int, pki: Pki, start_proxy: Callable[..., RecordingProxy], tmp_path: Path
) -> None:
    """No --upstream-tls in front of a TLS gRPC server: one UpstreamError at start saying it does not speak HTTP/2
    and hinting at TLS, nothing written. (The proxy started, and every call then failed "upstream closed the
    connection before speaking HTTP/2", nothing naming TLS; `replay send` counted each such call's made-up status
    as an outcome it observed and exited 0.)"""
    with pytest.raises(UpstreamError, match=r"does not speak HTTP/2: .* \(it speaks TLS\? give --upstream-tls\)"):
        start_proxy(f"127.0.0.1:{tls_upstream}", capture_dir=tmp_path / "caps")
    assert not (tmp_path / "caps").exists() or not list((tmp_path / "caps").iterdir())


def test_a_plaintext_h2_upstream_passes_the_start_check_and_a_silent_one_is_let_be(tmp_path: Path) -> None:
    """The check's other answers: an HTTP/2 server's SETTINGS pass; a listener that says nothing within the probe's
    wait is let be (a loaded server may be slow: only a wrong answer or a close fails the start); one that closes at
    once fails."""
    import socket
    import threading

    from proxy.ops.server import check_upstream
    from proxy.wire import frames as wire

    release = threading.Event()

    def serve(answer: bytes | None) -> tuple[socket.socket, threading.Thread]:
        lsock = socket.create_server(("127.0.0.1", 0))

        def run() -> None:
            conn, _ = lsock.accept()
            with conn:
                conn.recv(64)
                if answer is None:
                    return  # (closed at once)
                conn.sendall(answer)
                release.wait(30)  # (open until the check is done: silence is no close)

        t = threading.Thread(target=run, name="test-h2-probe-peer", daemon=True)
        t.start()
        return lsock, t

    for answer, fails in ((wire.frame(wire.SETTINGS, 0, 0, b""), False), (b"", False), (None, True),
                          (b"HTTP/1.1 400 Bad Request\r\n\r\n", True)):  # fmt: skip
        release.clear()
        lsock, t = serve(answer)
        try:
            port = lsock.getsockname()[1]
            if fails:
                with pytest.raises(UpstreamError, match="does not speak HTTP/2"):
                    check_upstream("127.0.0.1", port, 5.0, h2=True)
            else:
                check_upstream("127.0.0.1", port, 5.0, h2=True)
        finally:
            release.set()
            lsock.close()
            t.join(10)
            assert not t.is_alive()


class _Ready(http.server.BaseHTTPRequestHandler):
    """A plain HTTP/1.1 server answering /v2/health/ready (Triton's HTTP port has no TLS of its own)."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.parametrize("https", [False, True])
def test_the_http_upstream_has_its_own_tls(
    tls_upstream: int, pki: Pki, start_proxy: Callable[..., RecordingProxy], tmp_path: Path, https: bool
) -> None:
    """--upstream-tls is the gRPC upstream's: Triton serves TLS on its gRPC port only, so its plaintext HTTP port is
    recorded beside it (one flag for both failed the start: "TLS handshake failed" at the HTTP port).
    --http-upstream-tls is the HTTP upstream's (an HTTPS front), offering HTTP/1.1 in ALPN."""
    import threading

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ready)
    if https:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(pki.server_cert, pki.server_key)
        ctx.set_alpn_protocols(["http/1.1"])
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, name="test-http-upstream", daemon=True)
    thread.start()
    try:
        proxy = start_proxy(f"127.0.0.1:{tls_upstream}", **_mtls_kw(pki), http_listen="127.0.0.1:0",
                            http_upstream=f"127.0.0.1:{httpd.server_address[1]}",
                            **({"http_upstream_tls": True} if https else {}))  # fmt: skip
        client = ssl.create_default_context(cafile=pki.ca)
        with socket.create_connection(("127.0.0.1", proxy.http_port), timeout=10) as raw, \
                client.wrap_socket(raw, server_hostname="localhost") as sock:  # fmt: skip
            sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.1 200")
        _echo(_tls_client(proxy.port, pki))  # and the gRPC pair over TLS both ways
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)

"""Triton restarts: a client that met it down recovers on the same channel once it is back.

The fake Triton stands in for the server here because the test must stop and restart the upstream
on the same port within one test, quickly and repeatedly; the real tritonserver's restart in the
soak test (tests/e2e/test_unattended_soak.py, slow) shows the same with perf_analyzer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from proxy.ops.server import RecordingProxy
from tests.support.capture import of_kind, records
from tests.support.fake_triton import start_fake
from tests.support.loop_thread import BackgroundLoop
from tests.support.triton_client import wait_for


def _infer(client: grpcclient.InferenceServerClient) -> None:
    inp = grpcclient.InferInput("INPUT0", [1], "INT32")
    inp.set_data_from_numpy(np.array([1], dtype=np.int32))
    client.infer("echo", [inp], client_timeout=10)


def test_client_refused_while_triton_is_down_reconnects_when_it_is_back(
    bg: BackgroundLoop, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """Calls while the upstream is down get UNAVAILABLE with the reason; the same client then gets
    through once the upstream is back (the refused connection is told to go away, so the channel
    reconnects instead of being answered UNAVAILABLE forever)."""
    port = fake_upstream.port
    proxy = start_proxy(f"127.0.0.1:{port}")
    bg.run(fake_upstream.stop(None))
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{proxy.port}")
    try:
        for _ in range(3):
            try:
                _infer(client)
            except InferenceServerException as e:
                assert "unreachable" in str(e) or "UNAVAILABLE" in str(e).upper(), e
            else:
                raise AssertionError("a call succeeded while the upstream was down")
        server, _ = bg.run(start_fake(port))
        try:
            def through() -> bool:
                try:
                    _infer(client)
                except InferenceServerException:
                    return False
                return True

            wait_for(through, timeout=30, what="a call through the proxy after the upstream came back")
        finally:
            bg.run(server.stop(None))
    finally:
        client.close()
    bg.run(proxy.stop())
    ends = of_kind(records(proxy.writer.path), "call_end") if proxy.writer else []
    assert {e["cause"] for e in ends} >= {"upstream_disconnect", "ok"}
    assert grpc.StatusCode.UNAVAILABLE.name in {e["status"] for e in ends}


def _goaway_codes(data: bytes) -> list[int]:
    """The error codes of the GOAWAY frames in ``data`` (whole frames, as read from a socket)."""
    codes, i = [], 0
    while len(data) - i >= 9:
        length = int.from_bytes(data[i : i + 3], "big")
        if data[i + 3] == 7 and len(data) >= i + 9 + 8:
            codes.append(int.from_bytes(data[i + 13 : i + 17], "big"))
        i += 9 + length
    return codes


def test_frames_after_the_refusal_goaway_are_not_called_a_protocol_error(
    bg: BackgroundLoop, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """While Triton is down, a call is refused with UNAVAILABLE and the connection told to go away
    (NO_ERROR). A client may still send frames it had queued (a PING, a WINDOW_UPDATE): that is
    legal and must not earn it a GOAWAY(PROTOCOL_ERROR) (grpc clients logged "Got goaway [1]"
    during a Triton restart in the unattended soak)."""
    import socket

    import h2.config
    import h2.connection
    import hyperframe.frame

    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    bg.run(fake_upstream.stop(None))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
                            (":path", "/inference.GRPCInferenceService/ModelInfer"),
                            ("content-type", "application/grpc"), ("te", "trailers")])  # fmt: skip
    conn.send_data(sid, b"\x00\x00\x00\x00\x00", end_stream=True)
    got = b""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(conn.data_to_send())
        while not _goaway_codes(got):
            chunk = s.recv(65536)
            assert chunk, "the proxy closed the connection without a GOAWAY"
            got += chunk
        assert _goaway_codes(got) == [0]
        s.sendall(hyperframe.frame.PingFrame(0, opaque_data=b"12345678").serialize())
        s.sendall(hyperframe.frame.WindowUpdateFrame(0, window_increment=1024).serialize())
        while chunk := s.recv(65536):  # until the proxy closes the connection (it has no call left)
            got += chunk
    assert set(_goaway_codes(got)) == {0}, _goaway_codes(got)

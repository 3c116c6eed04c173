"""Security of what the proxy exposes and records: public-listen warning, tensor redaction, HTTP/2 violations.

Runs against the fake Triton: its stream responses never echo the prompt (the real `tokens` model
would), which lets the capture be searched for the prompt text.
"""

from __future__ import annotations

import hashlib
import hmac
import queue
import socket
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import hyperframe.frame
import numpy as np
import pytest
import structlog
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb

from proxy.ops.server import RecordingProxy
from proxy.triton.redact import MARK
from tests.support.capture import calls_by_method, of_kind, records, side_bytes, stored_payload
from tests.support.loop_thread import BackgroundLoop
from tests.support.proxy import stop_proxy
from tests.support.triton_client import wait_for

PROMPT = "tell me the launch code 0451-XYZZY"


@pytest.mark.parametrize(
    ("listen", "warned"),
    [("0.0.0.0:0", True), ("127.0.0.1:0", False)],
)
def test_public_listen_without_tls_warns(
    listen: str, warned: bool, fake_upstream: Any, bg: BackgroundLoop, tmp_path: Any
) -> None:
    """Binding a non-loopback address without TLS logs one `listening_without_tls` warning; loopback does not."""
    from proxy.ops.server import ProxyConfig

    p = RecordingProxy(ProxyConfig(listen=listen, upstream=f"127.0.0.1:{fake_upstream.port}", capture_dir=tmp_path))
    with structlog.testing.capture_logs() as logs:
        bg.run(p.start())
    bg.run(p.stop())
    warnings = [e for e in logs if e["event"] == "listening_without_tls"]
    assert len(warnings) == (1 if warned else 0), logs
    if warned:
        assert warnings[0]["log_level"] == "warning"


def test_public_listen_with_tls_does_not_warn(fake_upstream: Any, bg: BackgroundLoop, tmp_path: Any) -> None:
    """0.0.0.0 with --tls-cert/--tls-key is fine: no warning."""
    from proxy.ops.server import ProxyConfig
    from tests.support.tls import make_pki

    pki = make_pki(tmp_path / "pki")
    cfg = ProxyConfig(
        listen="0.0.0.0:0", upstream=f"127.0.0.1:{fake_upstream.port}", capture_dir=tmp_path / "c",
        tls_cert=pki.server_cert, tls_key=pki.server_key,
    )  # fmt: skip
    p = RecordingProxy(cfg)
    with structlog.testing.capture_logs() as logs:
        bg.run(p.start())
    bg.run(p.stop())
    assert not [e for e in logs if e["event"] == "listening_without_tls"]


def _stream_prompts(port: int, prompts: list[str]) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    q: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: q.put(error))
    for i, text in enumerate(prompts):
        prompt = grpcclient.InferInput("PROMPT", [1], "BYTES")
        prompt.set_data_from_numpy(np.array([text.encode()], dtype=object))
        n = grpcclient.InferInput("MAX_TOKENS", [1], "INT32")
        n.set_data_from_numpy(np.array([2], dtype=np.int32))
        client.async_stream_infer("tokens", [prompt, n], request_id=f"r{i}", parameters={"n": 2})
    assert [q.get(timeout=20) for _ in range(2 * len(prompts))] == [None] * (2 * len(prompts))
    client.stop_stream()
    client.close()


def _requests(path: Any) -> list[dict[str, Any]]:
    recs = records(path)
    (call,) = calls_by_method(recs, "ModelStreamInfer")
    return [r for r in of_kind(recs, "message", call) if r["dir"] == "c2s"]


def test_redact_input_keeps_shape_and_keyed_hash_never_the_data(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """--redact-input PROMPT with --payload full: no prompt bytes anywhere in the file; spec, size, HMAC kept."""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", payload="full", redact_inputs=("PROMPT",))
    _stream_prompts(proxy.port, [PROMPT, PROMPT, "another prompt"])
    stop_proxy(proxy)
    raw = proxy.capture_path.read_bytes() + side_bytes(proxy.capture_path)
    assert PROMPT.encode() not in raw and b"XYZZY" not in raw
    salt = records(proxy.capture_path)[0]["options"]["redact_salt"]
    assert isinstance(salt, str) and len(salt) == 32
    reqs = _requests(proxy.capture_path)
    assert len(reqs) == 3
    for r in reqs:
        stored = stored_payload(proxy.capture_path, r)
        assert b"XYZZY" not in stored and b"another" not in stored
        assert r["payload_sha256"] == hashlib.sha256(stored).hexdigest() and r["payload_truncated"] is False
        msg = pb.ModelInferRequest.FromString(stored)
        assert [(t.name, t.datatype, list(t.shape)) for t in msg.inputs] == [("PROMPT", "BYTES", [1]), ("MAX_TOKENS", "INT32", [1])]
        assert msg.raw_input_contents[0] == b"" and msg.raw_input_contents[1] == (2).to_bytes(4, "little")
        assert msg.inputs[0].parameters[MARK].string_param.startswith("hmac-sha256:")
        prompt_spec, n_spec = r["inputs"]
        assert n_spec["hmac_sha256"] is None and n_spec["size"] is None
        assert prompt_spec["size"] == 4 + len("another prompt" if r["request_id"] == "r2" else PROMPT)
    # The hash is HMAC(salt, tensor bytes as sent): recomputable from live traffic, equal for equal data.
    sent = len(PROMPT).to_bytes(4, "little") + PROMPT.encode()
    expected = hmac.new(salt.encode(), sent, hashlib.sha256).hexdigest()
    assert [r["inputs"][0]["hmac_sha256"] == expected for r in reqs] == [True, True, False]
    # What reached the upstream is untouched (the fake answered every request: checked in _stream_prompts).


def test_redact_salt_makes_hashes_comparable_across_captures(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy], tmp_path: Any
) -> None:
    """Two captures with the same --redact-salt give the same HMAC for the same prompt; the salt is not recorded."""
    hashes = []
    for i in range(2):
        proxy = start_proxy(
            f"127.0.0.1:{fake_upstream.port}", payload="full", redact_inputs=("PROMPT",), redact_salt="team-secret",
            capture_dir=tmp_path / f"cap{i}",
        )  # fmt: skip
        _stream_prompts(proxy.port, [PROMPT])
        stop_proxy(proxy)
        opts = records(proxy.capture_path)[0]["options"]
        assert opts["redact_salt"] is None and opts["redact_salt_given"] is True
        assert b"team-secret" not in proxy.capture_path.read_bytes()
        hashes.append(_requests(proxy.capture_path)[0]["inputs"][0]["hmac_sha256"])
    assert hashes[0] == hashes[1] is not None


def _h2_client() -> h2.connection.H2Connection:
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    c.initiate_connection()
    return c


STREAM_HEADERS = [
    (b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/inference.GRPCInferenceService/ModelStreamInfer"),
    (b":authority", b"x"), (b"content-type", b"application/grpc"), (b"te", b"trailers"),
]  # fmt: skip


def _grpc(msg: bytes, flag: int = 0) -> bytes:
    return bytes([flag]) + len(msg).to_bytes(4, "big") + msg


def test_compressed_request_payload_is_withheld_when_redacting(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """A request the proxy cannot decode (compressed flag) is stored without payload when redaction is on."""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", payload="full", redact_inputs=("PROMPT",))
    c = _h2_client()
    c.send_headers(1, STREAM_HEADERS)
    c.send_data(1, _grpc(PROMPT.encode() * 3, flag=1), end_stream=True)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(c.data_to_send())
        wait_for(lambda: bool(_live_messages(proxy)), timeout=10, what="the message record")
    stop_proxy(proxy)
    raw = proxy.capture_path.read_bytes()
    assert b"XYZZY" not in raw
    (m,) = of_kind(records(proxy.capture_path), "message")
    assert m["payload"] is None and m["payload_sha256"] is None and m["payload_truncated"] is True
    assert m["compressed"] is True and "compressed" in m["decode_error"]


def _live_messages(proxy: RecordingProxy) -> list[dict[str, Any]]:
    out = []
    for line in proxy.capture_path.read_bytes().splitlines():
        if b'"kind":"message"' in line:
            out.append(line)
    return out  # type: ignore[return-value]


def test_protocol_error_after_a_request_in_the_same_segment_keeps_the_request(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """HEADERS + a gRPC message + a bad frame in ONE write: the call and message are recorded, then the error."""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    c = _h2_client()
    c.send_headers(1, STREAM_HEADERS)
    req = pb.ModelInferRequest(model_name="m", id="before-the-error")
    c.send_data(1, _grpc(req.SerializeToString()))
    # DATA on stream 0 (hand-built: hyperframe refuses to): a connection error (RFC 9113 6.1).
    bad = (1).to_bytes(3, "big") + b"\x00\x00" + (0).to_bytes(4, "big") + b"x"
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(c.data_to_send() + bad)
        got = b""
        while chunk := s.recv(65536):  # the proxy sends GOAWAY and closes
            got += chunk
    goaway = [f for f in _frames(got) if isinstance(f, hyperframe.frame.GoAwayFrame)]
    assert goaway and goaway[-1].error_code == 1  # PROTOCOL_ERROR
    stop_proxy(proxy)
    recs = records(proxy.capture_path)
    (call,) = calls_by_method(recs, "ModelStreamInfer")
    (msg,) = of_kind(recs, "message", call)
    assert msg["request_id"] == "before-the-error"
    (err,) = of_kind(recs, "protocol_error")
    assert err["side"] == "client" and err["open_calls"] == [call] and err["error_code"] == 1
    (end,) = of_kind(recs, "call_end", call)
    assert end["cause"] == "client_disconnect"


def _frames(data: bytes) -> list[Any]:
    out = []
    i = 0
    while i + 9 <= len(data):
        frame, length = hyperframe.frame.Frame.parse_frame_header(memoryview(data[i : i + 9]))
        frame.parse_body(memoryview(data[i + 9 : i + 9 + length]))
        out.append(frame)
        i += 9 + length
    return out


def test_capture_directory_0700_files_0600_and_inside_it(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy], tmp_path: Any
) -> None:
    """A new capture directory is 0700, every capture file (rotated and gzipped too) 0600 and directly inside it."""
    import stat

    capdir = tmp_path / "new" / "captures"
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", capture_dir=capdir, rotate_mb=0.001, gzip_rotated=True)
    _stream_prompts(proxy.port, ["a", "b", "c"])
    stop_proxy(proxy)
    writer = proxy.writer
    assert writer is not None and len(writer.paths) > 1
    assert stat.S_IMODE(capdir.stat().st_mode) == 0o700
    for p in writer.paths:
        assert p.resolve().parent == capdir.resolve()
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert sorted(capdir.iterdir()) == sorted(writer.paths)

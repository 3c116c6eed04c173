"""HTTP/2 and gRPC framing fuzzed against a live proxy on loopback (hypothesis).

Each example is one raw TCP connection sending a valid preface followed by a random mix of valid
requests, gRPC messages with bad length prefixes or the compressed flag, RST_STREAM, GOAWAY,
oversized header blocks, random frames and garbage. Meanwhile one tritonclient connection stays
open and must keep working on the *same* HTTP/2 connection; the proxy must never fail a call as
its own error, every call it recorded must end, and every connection it closed with a protocol
error must have a `protocol_error` record. The upstream is the fake Triton (a fuzz run needs
hundreds of cheap calls).
"""

from __future__ import annotations

import functools
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import grpc
import h2.config
import h2.connection
import hpack
import hyperframe.frame
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from proxy.ops.server import RecordingProxy
from tests.support.bad_upstream import bad_h2_upstream
from tests.support.capture import of_kind, records
from tests.support.proxy import stop_proxy
from tests.support.triton_client import wait_for

PATHS = [b"/inference.GRPCInferenceService/ModelStreamInfer", b"/inference.GRPCInferenceService/ModelInfer", b"/x.Y/Z"]
PING = b"fuzzping"


def _frame(ftype: int, flags: int, sid: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + (sid & 0x7FFFFFFF).to_bytes(4, "big") + payload


@functools.lru_cache(maxsize=8)
def _headers_block(path: bytes, big: int = 0) -> bytes:
    hdrs = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path), (b":authority", b"fuzz"),
            (b"content-type", b"application/grpc"), (b"te", b"trailers")]  # fmt: skip
    if big:
        hdrs.append((b"x-big", b"a" * big))
    # No Huffman: pure-Python Huffman coding of megabytes takes minutes.
    return bytes(hpack.Encoder().encode(hdrs, huffman=False))


def _grpc_message(flag: int, declared: int, body: bytes) -> bytes:
    return bytes([flag]) + declared.to_bytes(4, "big") + body


sids = st.integers(0, 9).map(lambda n: 2 * n + 1)
framed = st.one_of(
    # a well-formed request HEADERS (END_HEADERS), maybe END_STREAM
    st.tuples(st.just("headers"), sids, st.sampled_from(PATHS), st.booleans()),
    # DATA carrying a gRPC message whose prefix may lie about its length, maybe compressed
    st.tuples(st.just("grpc"), sids, st.integers(0, 1), st.integers(0, 2**32 - 1) | st.integers(0, 64),
              st.binary(max_size=64), st.booleans()),
    st.tuples(st.just("rst"), st.integers(0, 21), st.integers(0, 15)),
    st.tuples(st.just("goaway"), st.integers(0, 21), st.integers(0, 15)),
    # a header block beyond the proxy's 1 MiB frame limit, or a header list beyond 16 MiB in CONTINUATIONs
    st.tuples(st.just("oversized"), sids, st.sampled_from([1024 * 1024 + 1, 17 * 1024 * 1024])),
    st.tuples(st.just("frame"), st.integers(0, 12), st.integers(0, 255), st.integers(0, 21), st.binary(max_size=40)),
)
# Misaligned bytes are the slow case (see _exchange): about one op in 19.
ops = st.one_of(framed, framed, framed, st.tuples(st.just("garbage"), st.binary(min_size=1, max_size=40)))


def _encode(op: tuple[Any, ...]) -> bytes:
    kind = op[0]
    if kind == "headers":
        _, sid, path, end = op
        return _frame(0x1, 0x4 | (0x1 if end else 0), sid, _headers_block(path))
    if kind == "grpc":
        _, sid, flag, declared, body, end = op
        return _frame(0x0, 0x1 if end else 0, sid, _grpc_message(flag, declared, body))
    if kind == "rst":
        return _frame(0x3, 0, op[1], op[2].to_bytes(4, "big"))
    if kind == "goaway":
        return _frame(0x7, 0, 0, op[1].to_bytes(4, "big") + op[2].to_bytes(4, "big"))
    if kind == "oversized":
        _, sid, size = op
        block = _headers_block(PATHS[0], size)
        if size < 2 * 1024 * 1024:
            return _frame(0x1, 0x4, sid, block)
        chunk = 1024 * 1024
        out = [_frame(0x1, 0, sid, block[:chunk])]
        for i in range(chunk, len(block), chunk):
            last = i + chunk >= len(block)
            out.append(_frame(0x9, 0x4 if last else 0, sid, block[i : i + chunk]))
        return b"".join(out)
    if kind == "frame":
        _, ftype, flags, sid, payload = op
        return _frame(ftype, flags, sid, payload)
    return bytes(op[1])


def _preface() -> bytes:
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    return c.data_to_send()


def _exchange(port: int, wire: bytes, timeout: float = 10.0, stall: float = 1.0) -> tuple[list[Any], bool]:
    """Send ``wire`` then a PING; read until the PING's ACK (connection alive) or EOF (closed).

    Garbage can leave the proxy waiting for the rest of a frame (a frame header announcing more
    bytes than follow), which is correct HTTP/2: after ``stall`` seconds of silence the connection
    counts as open, and closing it is the client going away.
    """
    frames: list[Any] = []
    buf = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(_preface() + wire + _frame(0x6, 0, 0, PING))
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed on us mid-send (an early protocol error): read what came back
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s.settimeout(stall)
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                return frames, True
            except TimeoutError:
                return frames, False
            if not chunk:
                return frames, True
            buf += chunk
            while len(buf) >= 9:
                length = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + length:
                    break
                f, _ = hyperframe.frame.Frame.parse_frame_header(memoryview(buf[:9]))
                f.parse_body(memoryview(buf[9 : 9 + length]))
                buf = buf[9 + length :]
                frames.append(f)
                if isinstance(f, hyperframe.frame.PingFrame) and "ACK" in f.flags and f.opaque_data == PING:
                    return frames, False
    raise AssertionError("proxy neither answered the PING nor closed the connection")


class _Healthy:
    """The bystander: one gRPC channel (one HTTP/2 connection) used between fuzz examples."""

    def __init__(self, port: int) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = pb_grpc.GRPCInferenceServiceStub(self.channel)
        self.calls = 0

    def check(self) -> None:
        req = pb.ModelInferRequest(model_name="echo", id=f"bystander-{self.calls}")
        req.inputs.add(name="INPUT", datatype="UINT8", shape=[1])
        req.raw_input_contents.append(b"\x07")
        resp = self.stub.ModelInfer(req, timeout=10)
        assert resp.raw_output_contents[0] == b"\x07"
        self.calls += 1


def test_fuzzed_connections_never_hurt_the_proxy_or_a_neighbour(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """Random HTTP/2/gRPC abuse: protocol errors recorded per connection; the neighbour's connection and calls unaffected."""
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", payload="meta")
    healthy = _Healthy(proxy.port)
    healthy.check()
    errors = {"goaway_error": 0, "examples": 0}

    @settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")), deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)
    @given(st.lists(ops, min_size=1, max_size=8))
    def run(example: list[tuple[Any, ...]]) -> None:
        frames, closed = _exchange(proxy.port, b"".join(_encode(op) for op in example))
        errors["examples"] += 1
        goaways = [f for f in frames if isinstance(f, hyperframe.frame.GoAwayFrame)]
        if any(f.error_code != 0 for f in goaways):
            errors["goaway_error"] += 1
            assert closed, "a connection-level protocol error must close the connection"
        healthy.check()

    run()
    healthy.check()
    relay = proxy.relay
    assert relay is not None
    # Every fuzz connection is gone; only the bystander's tunnel remains.
    wait_for(lambda: len(relay.tunnels) == 1, timeout=10, what="fuzz tunnels to close")
    healthy.channel.close()
    stop_proxy(proxy)
    recs = records(proxy.capture_path)
    starts = {r["call"]: r for r in of_kind(recs, "call_start")}
    ends = {r["call"]: r for r in of_kind(recs, "call_end")}
    assert set(starts) == set(ends), "every recorded call ends exactly once"
    assert len(of_kind(recs, "call_end")) == len(ends)
    assert not [e for e in ends.values() if e["cause"] == "proxy_error"], "a fuzz input hit a proxy bug"
    bystander = {starts[c]["conn"] for c in starts if starts[c]["method"].endswith("/ModelInfer")
                 and any(v.startswith("grpc-python") for k, v in starts[c]["metadata"] if k == "user-agent")}  # fmt: skip
    assert len(bystander) == 1, "the bystander kept one connection through the whole run"
    assert healthy.calls == errors["examples"] + 2
    violations = [r for r in of_kind(recs, "protocol_error") if r["side"] == "client"]
    assert len(violations) == errors["goaway_error"] > 0
    # The fake upstream never breaks HTTP/2: a client's error must not be blamed on it.
    assert not [r for r in of_kind(recs, "protocol_error") if r["side"] == "upstream"]
    assert [r["seq"] for r in recs] == list(range(len(recs)))


def test_upstream_breaking_http2_is_recorded_and_calls_fail_unavailable(
    start_proxy: Callable[..., RecordingProxy],
) -> None:
    """An upstream that answers garbage after its preface: protocol_error(side=upstream), the client gets UNAVAILABLE.

    A raw socket plays the upstream (tests/support/bad_upstream.py): no real server can be made to send invalid
    frames.
    """
    with bad_h2_upstream() as upstream:
        proxy = start_proxy(upstream)
        with grpc.insecure_channel(f"127.0.0.1:{proxy.port}") as ch:
            try:
                pb_grpc.GRPCInferenceServiceStub(ch).ServerLive(pb.ServerLiveRequest(), timeout=10)
                raise AssertionError("a call through a broken upstream succeeded")
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.UNAVAILABLE, e
        stop_proxy(proxy)
    recs = records(proxy.capture_path)
    errs = of_kind(recs, "protocol_error")
    assert errs and all(r["side"] == "upstream" for r in errs), errs
    assert {r["cause"] for r in of_kind(recs, "call_end")} <= {"upstream_disconnect"}

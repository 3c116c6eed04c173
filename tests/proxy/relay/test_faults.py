"""Upstream faults against the fake Triton: graceful shutdown (GOAWAY) and restarts, with leak counts.

The fake is used because these need exact control the real server does not give: a graceful
grpc shutdown with a second server already listening on the same port (SO_REUSEPORT), and many
cheap kill/restart rounds. The real tritonserver kill/restart is in tests/e2e.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from proxy.ops.server import RecordingProxy
from tests.support.capture import calls_by_method, of_kind, records
from tests.support.fake_triton import start_fake
from tests.support.loop_thread import BackgroundLoop
from tests.support.proxy import stop_proxy
from tests.support.triton_client import wait_for


def _stream_req(rid: str, n: int, gap_ms: int = 0) -> pb.ModelInferRequest:
    req = pb.ModelInferRequest(model_name="m", id=rid)
    req.parameters["n"].int64_param = n
    if gap_ms:
        req.parameters["gap_ms"].int64_param = gap_ms
    return req


class _Stream:
    """A raw grpc bidi ModelStreamInfer whose responses are read on a thread into a queue."""

    def __init__(self, stub: Any, reqs: list[pb.ModelInferRequest]) -> None:
        self.call = stub.ModelStreamInfer(iter(reqs), timeout=60)
        self.got: queue.Queue[Any] = queue.Queue()
        self._t = threading.Thread(target=self._read, name="test-stream-reader", daemon=True)
        self._t.start()

    def _read(self) -> None:
        try:
            for r in self.call:
                self.got.put(r.infer_response.id)
            self.got.put(("end", grpc.StatusCode.OK))
        except grpc.RpcError as e:
            self.got.put(("end", e.code()))

    def drain(self, timeout: float = 30.0) -> tuple[list[str], Any]:
        """Responses until the end, and the final status."""
        out: list[str] = []
        while True:
            item = self.got.get(timeout=timeout)
            if isinstance(item, tuple):
                self._t.join(timeout)
                return out, item[1]
            out.append(item)


def test_upstream_graceful_shutdown_drains_in_flight_and_moves_new_calls(
    bg: BackgroundLoop, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """Upstream GOAWAY: the in-flight stream gets all its responses and OK; the next call reaches the new server."""
    old, port, old_servicer = bg.run(start_fake(0, with_servicer=True))
    proxy = start_proxy(f"127.0.0.1:{port}")
    with grpc.insecure_channel(f"127.0.0.1:{proxy.port}") as ch:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        s = _Stream(stub, [_stream_req("in-flight", 10, gap_ms=100)])
        assert s.got.get(timeout=20) == "in-flight"
        # The replacement listens on the same port before the old one stops (grpc sets SO_REUSEPORT).
        new, new_port, new_servicer = bg.run(start_fake(port, with_servicer=True))
        assert new_port == port
        stopping = asyncio.run_coroutine_threadsafe(old.stop(30), bg.loop)  # graceful: GOAWAY, then drain
        rest, status = s.drain()
        assert status == grpc.StatusCode.OK and rest == ["in-flight"] * 9
        stopping.result(30)
        # New calls: the client got our GOAWAY, opens a new connection, which gets a new upstream connection.
        after = _Stream(stub, [_stream_req("after", 2)])
        assert after.drain() == (["after", "after"], grpc.StatusCode.OK)
    assert len(old_servicer.seen_metadata) == 1 and len(new_servicer.seen_metadata) == 1
    stop_proxy(proxy)
    bg.run(new.stop(None))
    recs = records(proxy.capture_path)
    first, second = calls_by_method(recs, "ModelStreamInfer")
    ends = {e["call"]: e for e in of_kind(recs, "call_end")}
    assert ends[first]["cause"] == "ok" and ends[first]["messages_s2c"] == 10
    assert ends[second]["cause"] == "ok"
    conn = {r["call"]: r["conn"] for r in of_kind(recs, "call_start")}
    assert conn[first] != conn[second]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _proxy_tasks(loop: asyncio.AbstractEventLoop) -> int:
    """Per-connection tasks of the proxy (the capture writer task lives as long as the proxy)."""
    return sum(1 for t in asyncio.all_tasks(loop) if t.get_name().startswith("triton-tap-upstream"))


def test_upstream_restarts_leak_no_connection_task_or_fd(
    bg: BackgroundLoop, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """5 rounds of: stream open, upstream stopped hard (client UNAVAILABLE), restarted, next call OK.

    Afterwards the proxy holds no tunnel, no open call, no task of its own, and the process no more fds.
    """
    server, port = bg.run(start_fake(0))
    proxy = start_proxy(f"127.0.0.1:{port}")
    relay = proxy.relay
    assert relay is not None
    baseline: int | None = None
    rounds = 5
    for i in range(rounds):
        with grpc.insecure_channel(f"127.0.0.1:{proxy.port}") as ch:
            stub = pb_grpc.GRPCInferenceServiceStub(ch)
            s = _Stream(stub, [_stream_req(f"r{i}", 1000, gap_ms=20)])
            assert s.got.get(timeout=20) == f"r{i}"
            bg.run(server.stop(None))  # hard: connections dropped
            _, status = s.drain()
            assert status == grpc.StatusCode.UNAVAILABLE
            server, _ = bg.run(start_fake(port))
            ok = _Stream(stub, [_stream_req(f"ok{i}", 2)])
            assert ok.drain() == ([f"ok{i}"] * 2, grpc.StatusCode.OK)
        wait_for(lambda: not relay.tunnels and relay.open_calls == 0, timeout=10, what="tunnels to close")
        wait_for(lambda: _proxy_tasks(bg.loop) == 0, timeout=10, what="proxy tasks to end")
        if i == 0:
            baseline = _fds()  # after one round: grpc's own lazily created fds exist by now
    assert baseline is not None
    # The fake server is re-created each round; allow its own bookkeeping a little slack.
    wait_for(lambda: _fds() <= baseline + 4, timeout=10, what=f"fds back near {baseline} (now {_fds()})")
    stop_proxy(proxy)
    bg.run(server.stop(None))
    recs = records(proxy.capture_path)
    ends = of_kind(recs, "call_end")
    # grpc's server.stop() answers open calls with UNAVAILABLE before dropping the connection (a
    # status the capture records as the upstream's); a SIGKILLed tritonserver is in tests/e2e.
    assert sorted(e["status"] for e in ends) == ["OK"] * rounds + ["UNAVAILABLE"] * rounds
    assert {e["cause"] for e in ends} <= {"ok", "error", "upstream_disconnect"}


def _echo_calls(port: int, n: int, tag: str) -> None:
    """n unary echo calls on one channel, each answered correctly within its gRPC deadline."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        for i in range(n):
            req = pb.ModelInferRequest(model_name="echo", id=f"{tag}{i}")
            req.inputs.add(name="INPUT", datatype="UINT8", shape=[2])
            req.raw_input_contents.append(bytes([i % 256, 7]))
            assert stub.ModelInfer(req, timeout=10).raw_output_contents[0] == bytes([i % 256, 7])


def test_disk_full_and_slow_disk_never_slow_traffic(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """Injected ENOSPC, then a disk stuck in a write: calls keep flowing; one gap record with counts, one log line.

    The fault is injected in the writer thread (WriterOptions.before_write). The stuck disk is an
    event, not a duration: the writer thread is held inside a write until every call of the "slow"
    phase has been answered, so a data plane that waited for the writer would hang those calls past
    their gRPC deadline (no wall-clock bound to flake on a loaded machine). A fake upstream: the
    fault is the proxy's, and the calls need only an answer (the real ``echo`` model would add a
    tritonserver to a loopback-tier test for nothing it could show).
    """
    import errno
    import threading

    import structlog

    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    writer = proxy.writer
    assert writer is not None
    _echo_calls(proxy.port, 5, "before")
    full = {"on": True, "failures": 0}
    stuck, release = threading.Event(), threading.Event()

    def fault(data: bytes) -> None:
        if full["on"]:
            full["failures"] += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        stuck.set()  # then a disk that does not come back until the test says so
        release.wait(timeout=60)

    with structlog.testing.capture_logs() as logs:
        writer._opt.before_write = fault
        _echo_calls(proxy.port, 40, "full")
        wait_for(lambda: full["failures"] > 0, timeout=10, what="a failed write")
        full["on"] = False
        _echo_calls(proxy.port, 1, "stall")
        wait_for(stuck.is_set, timeout=10, what="the writer stuck in a write")
        try:
            _echo_calls(proxy.port, 40, "slow")  # all answered while the writer is still stuck
        finally:
            release.set()
        wait_for(lambda: any(e["event"] == "capture_write_resumed" for e in logs), timeout=10, what="a resumed write")
        writer._opt.before_write = None
        _echo_calls(proxy.port, 3, "after")
    stop_proxy(proxy)
    failed = [e for e in logs if e["event"] == "capture_write_failed"]
    resumed = [e for e in logs if e["event"] == "capture_write_resumed"]
    assert len(failed) == 1 and len(resumed) == 1, logs
    recs = records(proxy.capture_path)  # every line parses: nothing written was corrupted
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    (gap,) = of_kind(recs, "gap")
    assert gap["dropped"] > 0 and "No space left" in gap["reason"]
    ends = of_kind(recs, "call_end")
    # Calls during the disk-full phase are (partly) missing, accounted for by the gap; all others are there.
    ids = {m["request_id"] for m in of_kind(recs, "message")}
    assert {f"slow{i}" for i in range(40)} | {"after0", "after1", "after2"} <= ids
    assert recs[-1]["kind"] == "capture_end" and recs[-1]["counts"]["dropped"] == gap["dropped"]
    assert all(e["cause"] == "ok" for e in ends)


def test_client_tcp_half_close_is_client_disconnect(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """A client that sends a request then shuts down its sending side (TCP FIN, half-open): client_disconnect, upstream reset."""
    import socket

    import h2.config
    import h2.connection

    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}")
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    c.initiate_connection()
    c.send_headers(1, [
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
        (b":authority", b"x"), (b"content-type", b"application/grpc"), (b"te", b"trailers"),
    ])  # fmt: skip
    req = pb.ModelInferRequest(model_name="echo", id="half-open")
    req.parameters["delay_ms"].int64_param = 5000
    body = req.SerializeToString()
    c.send_data(1, b"\x00" + len(body).to_bytes(4, "big") + body, end_stream=True)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(c.data_to_send())
        wait_for(lambda: proxy.relay is not None and proxy.relay.open_calls == 1, timeout=10, what="the call")
        s.shutdown(socket.SHUT_WR)
        wait_for(lambda: proxy.relay is not None and proxy.relay.open_calls == 0, timeout=10, what="the call to end")
    stop_proxy(proxy)
    recs = records(proxy.capture_path)
    (cancel,) = of_kind(recs, "cancel")
    assert cancel["cause"] == "client_disconnect" and cancel["in_flight"] == ["half-open"]
    assert cancel["forwarded_upstream"] is True

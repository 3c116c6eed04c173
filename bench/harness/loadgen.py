"""The benchmark's load generator: a long-lived worker process driven by JSON lines.

The harness (``bench/harness/run.py``) starts ``python -m bench.harness.loadgen`` once and writes one command per
line on its stdin; the worker answers one JSON line (``{"result": ...}`` or ``{"error": ...}``) on
stdout, possibly preceded by progress lines (``{"event": ...}``). Keeping one process for the whole
run avoids paying grpc/tritonclient imports per measurement and keeps its CPU apart from the
proxy's and the upstream's.

Every workload is bounded in count and in time (``timeout_s``), and talks to loopback only.
gRPC workloads use grpc.aio with tritonclient's ``service_pb2`` / ``service_pb2_grpc`` stubs; the
memory scenario uses a raw ``h2`` client, because it must *stop reading* (a grpc client always
drains its socket). The HTTP/1.1 workloads use ``h11`` over one keep-alive connection per
stream or caller, and count an event or a call only when h11 parsed it from a well-formed
message: a stream is *completed* when its chunked body ended with the terminator, every event was
a JSON ``data:`` line without ``"error"``, and their count is the one asked for.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events
import h2.settings
import h11
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    # one HTTP/2 connection per measurement, never shared with an earlier one
    ("grpc.use_local_subchannel_pool", 1),
]
STREAM_PATH = "/inference.GRPCInferenceService/ModelStreamInfer"


def _request(
    rid: str, n: int, *, size: int = 0, pace_us: int = 0, tensor: bytes = b"\x03\0\0\0abc"
) -> pb.ModelInferRequest:
    req = pb.ModelInferRequest(model_name="bench", id=rid)
    req.parameters["n"].int64_param = n
    if size:
        req.parameters["bytes"].int64_param = size
    if pace_us:
        req.parameters["pace_us"].int64_param = pace_us
    req.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
    req.raw_input_contents.append(tensor)
    return req


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[k]


async def _channel(target: str) -> grpc.aio.Channel:
    ch = grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
    await asyncio.wait_for(ch.channel_ready(), 10)
    return ch


# -- scenarios -------------------------------------------------------------------------------------


async def streaming(target: str, streams: int, requests: int, n: int) -> dict[str, Any]:
    """S concurrent ModelStreamInfer calls; each sends R requests, one after the other, and reads
    the N responses of each before sending the next."""
    ch = await _channel(target)
    stub = pb_grpc.GRPCInferenceServiceStub(ch)
    errors: list[str] = []
    got = 0

    async def one(s: int) -> None:
        nonlocal got
        call = stub.ModelStreamInfer()
        for r in range(requests):
            await call.write(_request(f"s{s}-r{r}", n))
            for _ in range(n):
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    errors.append(f"stream {s}: EOF after {got} responses")
                    return
                if resp.error_message:
                    errors.append(resp.error_message)
                got += 1
        await call.done_writing()
        if await call.read() is not grpc.aio.EOF:
            errors.append("unexpected extra response")
        code = await call.code()
        if code != grpc.StatusCode.OK:
            errors.append(f"status {code}")

    try:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one(s) for s in range(streams)), return_exceptions=True)
        wall = time.perf_counter() - t0
    finally:
        await ch.close()
    errors += [repr(r) for r in results if isinstance(r, BaseException)]
    return {
        "responses": got,
        "expected": streams * requests * n,
        "wall_s": wall,
        "errors": errors[:5],
        "n_errors": len(errors),
    }


async def unary(target: str, calls: int, warmup: int = 20) -> dict[str, Any]:
    """Sequential ModelInfer calls with a 64-byte tensor: per-call latency."""
    ch = await _channel(target)
    stub = pb_grpc.GRPCInferenceServiceStub(ch)
    req = pb.ModelInferRequest(model_name="bench", id="u")
    req.inputs.add(name="INPUT", datatype="INT32", shape=[1, 16])
    req.raw_input_contents.append(bytes(64))
    lat: list[float] = []
    try:
        for _ in range(warmup):
            await stub.ModelInfer(req)
        t0 = time.perf_counter()
        for _ in range(calls):
            a = time.perf_counter_ns()
            await stub.ModelInfer(req)
            lat.append((time.perf_counter_ns() - a) / 1e3)
        wall = time.perf_counter() - t0
    finally:
        await ch.close()
    return {"calls": calls, "wall_s": wall, "p50_us": _pct(lat, 0.5), "p99_us": _pct(lat, 0.99), "responses": calls}


async def large(target: str, calls: int, tensor_bytes: int) -> dict[str, Any]:
    """Sequential ModelInfer calls with one ``tensor_bytes`` tensor, echoed back."""
    ch = await _channel(target)
    stub = pb_grpc.GRPCInferenceServiceStub(ch)
    req = pb.ModelInferRequest(model_name="bench", id="big")
    req.inputs.add(name="INPUT", datatype="UINT8", shape=[tensor_bytes])
    req.raw_input_contents.append(b"\x5a" * tensor_bytes)
    errors: list[str] = []
    try:
        await stub.ModelInfer(pb.ModelInferRequest(model_name="bench", id="warm"))
        t0 = time.perf_counter()
        for _ in range(calls):
            resp = await stub.ModelInfer(req)
            if len(resp.raw_output_contents[0]) != tensor_bytes:
                errors.append("short echo")
        wall = time.perf_counter() - t0
    finally:
        await ch.close()
    return {
        "calls": calls, "wall_s": wall, "responses": calls, "errors": errors, "n_errors": len(errors),
        "mb_per_s": calls * tensor_bytes / 1e6 / wall,
    }  # fmt: skip


async def paced(target: str, streams: int, per_stream: int, pace_us: int) -> dict[str, Any]:
    """``streams`` calls, each one request whose ``per_stream`` responses the upstream paces
    ``pace_us`` apart (total rate = streams * 1e6 / pace_us); latency = client receive time minus
    the upstream's send stamp (both CLOCK_MONOTONIC)."""
    ch = await _channel(target)
    stub = pb_grpc.GRPCInferenceServiceStub(ch)
    lat: list[float] = []
    errors: list[str] = []

    async def one(s: int) -> None:
        call = stub.ModelStreamInfer()
        await call.write(_request(f"p{s}", per_stream, pace_us=pace_us))
        await call.done_writing()
        while True:
            resp = await call.read()
            now = time.monotonic_ns()
            if resp is grpc.aio.EOF:
                break
            lat.append((now - resp.infer_response.parameters["t_ns"].int64_param) / 1e3)

    try:
        # Stagger the streams over one pacing interval so the load is smooth, not bursty.
        async def staggered(s: int) -> None:
            await asyncio.sleep(s * pace_us / 1e6 / max(1, streams))
            await one(s)

        t0 = time.perf_counter()
        results = await asyncio.gather(*(staggered(s) for s in range(streams)), return_exceptions=True)
        wall = time.perf_counter() - t0
    finally:
        await ch.close()
    errors += [repr(r) for r in results if isinstance(r, BaseException)]
    # The first responses of each stream include connection warm-up: drop the first 5%.
    lat = lat[len(lat) // 20 :]
    return {
        "responses": len(lat), "wall_s": wall, "rate_per_s": streams * per_stream / wall,
        "p50_us": _pct(lat, 0.5), "p99_us": _pct(lat, 0.99), "errors": errors[:5], "n_errors": len(errors),
    }  # fmt: skip


def stall(
    target: str, streams: int, messages: int, msg_bytes: int, stall_s: float, drain: bool, timeout_s: float
) -> dict[str, Any]:
    """Raw h2 client: open ``streams`` ModelStreamInfer calls asking for ``messages`` responses of
    ``msg_bytes`` each, then read nothing for ``stall_s`` (the upstream keeps trying to stream),
    then (``drain``) read everything and count it. Emits ``{"event": "drain_start"}`` between."""
    host, port = target.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    cfg = h2.config.H2Configuration(client_side=True, header_encoding=None)
    conn = h2.connection.H2Connection(config=cfg)
    window = 1024 * 1024
    conn.local_settings = h2.settings.Settings(
        client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window}
    )
    conn.initiate_connection()
    conn.increment_flow_control_window(16 * window)
    body = _request("mem", messages, size=msg_bytes).SerializeToString()
    frame = b"\0" + len(body).to_bytes(4, "big") + body
    sids = []
    for _ in range(streams):
        sid = conn.get_next_available_stream_id()
        conn.send_headers(
            sid,
            [(b":method", b"POST"), (b":scheme", b"http"), (b":path", STREAM_PATH.encode()),
             (b":authority", target.encode()), (b"content-type", b"application/grpc"), (b"te", b"trailers")],
        )  # fmt: skip
        conn.send_data(sid, frame, end_stream=True)
        sids.append(sid)
    sock.sendall(conn.data_to_send())
    t_start = time.monotonic()
    time.sleep(stall_s)  # not reading: the proxy must stop pulling from the upstream
    received = 0
    open_ids = set(sids)
    statuses: list[str] = []
    t_drain = time.monotonic()
    print(json.dumps({"event": "drain_start"}), flush=True)
    if drain:
        deadline = t_drain + timeout_s
        while open_ids and time.monotonic() < deadline:
            data = sock.recv(4 * 1024 * 1024)
            if not data:
                break
            for e in conn.receive_data(data):
                if isinstance(e, h2.events.DataReceived):
                    received += len(e.data)
                    conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                elif isinstance(e, h2.events.TrailersReceived):
                    statuses += [v.decode() for k, v in e.headers if k == b"grpc-status"]
                elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)):
                    open_ids.discard(e.stream_id)
            out = conn.data_to_send()
            if out:
                sock.sendall(out)
    wall = time.monotonic() - t_drain
    sock.close()
    return {
        "streams": streams, "requested_bytes": streams * messages * msg_bytes, "received_bytes": received,
        "complete": not open_ids, "grpc_status": statuses, "stall_s": t_drain - t_start, "drain_s": wall,
        "drain_mb_per_s": received / 1e6 / wall if wall > 0 else None
    }  # fmt: skip


# -- HTTP/1.1 --------------------------------------------------------------------------------------


class _HttpConn:
    """One keep-alive HTTP/1.1 client connection, parsed by h11."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host
        self.h = h11.Connection(h11.CLIENT)

    @classmethod
    async def open(cls, target: str) -> _HttpConn:
        host, port = target.rsplit(":", 1)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 10)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer, target)

    async def post(self, path: str, body: bytes) -> None:
        headers = [("Host", self.host), ("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        self.writer.write(self.h.send(h11.Request(method="POST", target=path, headers=headers))
                          + self.h.send(h11.Data(data=body)) + self.h.send(h11.EndOfMessage()))  # fmt: skip
        await self.writer.drain()

    async def next(self) -> Any:
        """The next h11 event; a connection closed mid-message raises ``h11.RemoteProtocolError``."""
        while True:
            ev = self.h.next_event()
            if ev is not h11.NEED_DATA:
                return ev
            self.h.receive_data(await self.reader.read(262144))

    def again(self) -> str | None:
        """Ready the connection for the next request; why not (the server did not keep it alive)."""
        if self.h.our_state is h11.DONE and self.h.their_state is h11.DONE:
            self.h.start_next_cycle()
            return None
        return f"connection not kept alive (client {self.h.our_state}, server {self.h.their_state})"

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


async def _read_sse(c: _HttpConn, n: int | None, chunks: list[int]) -> tuple[int, str | None]:
    """Read one generate_stream reply: (events that were JSON ``data:`` lines without an error,
    why the stream is not a completed one or None); ``chunks[0]`` counts the body's pieces as h11
    hands them over (one per chunk, or less when a read ends inside one)."""
    resp = await c.next()
    if not isinstance(resp, h11.Response):
        return 0, f"no response: {resp!r}"
    if resp.status_code != 200:
        return 0, f"status {resp.status_code}"
    buf, got, why = b"", 0, None
    while True:
        ev = await c.next()
        if isinstance(ev, h11.Data):
            chunks[0] += 1
            buf += ev.data
            *events, buf = buf.split(b"\n\n")  # an event may span chunks: a relay is free to re-chunk
            for e in events:
                # A JSON object on one data line; the error check parses only suspects, so the load
                # generator's CPU per event stays small beside the paths it measures.
                if not (e.startswith(b"data: {") and e.endswith(b"}") and b"\n" not in e):
                    why = why or f"not an SSE data event holding a JSON object: {e[:60]!r}"
                    continue
                if b'"error"' in e:
                    try:
                        doc = json.loads(e[6:])
                    except ValueError:
                        doc = {"error": f"unparsable event {e[:60]!r}"}
                    if "error" in doc:
                        why = why or f"error event: {doc['error']}"
                        continue
                got += 1
        elif isinstance(ev, h11.EndOfMessage):
            break
        else:
            return got, f"stream ended without its terminator: {ev!r}"
    if buf.strip():
        why = why or f"partial event at the end: {buf[:60]!r}"
    if why is None and n is not None and got != n:
        why = f"{got} events of {n}"
    return got, why


async def http_stream(target: str, streams: int, requests: int, n: int,
                      path: str = "/v2/models/bench/generate_stream", body: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """S concurrent keep-alive connections; each POSTs R generate_stream requests one after the
    other, reading all N events of each before the next. ``responses`` counts the events of
    completed streams only. ``body``: the request's JSON (default: the fake upstream's ``{"n": N}``),
    its ``id`` set per request."""
    doc = body if body is not None else {"n": n}
    errors: list[str] = []
    events = completed = received = 0
    chunks = [0]

    async def one(s: int) -> None:
        nonlocal events, completed, received
        c = await _HttpConn.open(target)
        try:
            for r in range(requests):
                await c.post(path, json.dumps({**doc, "id": f"s{s}-r{r}"}).encode())
                try:
                    got, why = await _read_sse(c, n, chunks)
                except h11.RemoteProtocolError as e:
                    errors.append(f"stream {s}-{r} cut: {e}")
                    return
                received += got
                if why is not None:
                    errors.append(f"stream {s}-{r}: {why}")
                    return
                events += got
                completed += 1
                why = c.again()
                if why is not None:
                    errors.append(why)
                    return
        finally:
            await c.close()

    t0 = time.perf_counter()
    results = await asyncio.gather(*(one(s) for s in range(streams)), return_exceptions=True)
    wall = time.perf_counter() - t0
    errors += [repr(r) for r in results if isinstance(r, BaseException)]
    return {
        "responses": events, "events_received": received, "expected": streams * requests * n,
        "streams_completed": completed, "streams_expected": streams * requests, "wall_s": wall, "body_pieces": chunks[0],
        "errors": errors[:5], "n_errors": len(errors),
    }  # fmt: skip


async def http_unary(target: str, calls: int, warmup: int = 20, path: str = "/v2/models/bench/infer",
                     inputs: list[dict[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    """Sequential KServe v2 JSON infer calls on one keep-alive connection: per-call latency; a call
    counts only with status 200 and a JSON body holding ``outputs``."""
    inputs = inputs or [{"name": "INPUT", "datatype": "INT32", "shape": [1, 16], "data": [0] * 16}]
    body = json.dumps({"id": "u", "inputs": inputs}).encode()
    c = await _HttpConn.open(target)
    lat: list[float] = []
    errors: list[str] = []

    async def call() -> str | None:
        await c.post(path, body)
        resp = await c.next()
        if not isinstance(resp, h11.Response):
            return f"no response: {resp!r}"
        data = b""
        while True:
            ev = await c.next()
            if isinstance(ev, h11.Data):
                data += ev.data
            elif isinstance(ev, h11.EndOfMessage):
                break
            else:
                return f"reply ended early: {ev!r}"
        if resp.status_code != 200 or "outputs" not in json.loads(data):
            return f"status {resp.status_code}: {data[:80]!r}"
        return c.again()

    try:
        for _ in range(warmup):
            why = await call()
            if why:
                raise RuntimeError(f"warm-up call: {why}")
        t0 = time.perf_counter()
        for _ in range(calls):
            a = time.perf_counter_ns()
            why = await call()
            if why:
                errors.append(why)
                break
            lat.append((time.perf_counter_ns() - a) / 1e3)
        wall = time.perf_counter() - t0
    finally:
        await c.close()
    return {"calls": calls, "wall_s": wall, "p50_us": _pct(lat, 0.5), "p99_us": _pct(lat, 0.99),
            "responses": len(lat), "errors": errors[:5], "n_errors": len(errors)}  # fmt: skip


# -- worker loop -----------------------------------------------------------------------------------


async def run_command(cmd: dict[str, Any]) -> dict[str, Any]:
    op = cmd.pop("op")
    timeout = cmd.pop("timeout_s", 120.0)
    if op == "stream":
        coro = streaming(**cmd)
    elif op == "unary":
        coro = unary(**cmd)
    elif op == "large":
        coro = large(**cmd)
    elif op == "paced":
        coro = paced(**cmd)
    elif op == "http_stream":
        coro = http_stream(**cmd)
    elif op == "http_unary":
        coro = http_unary(**cmd)
    elif op == "stall":
        return await asyncio.get_running_loop().run_in_executor(None, lambda: stall(timeout_s=timeout, **cmd))
    elif op == "ping":
        return {"pong": True}
    else:
        raise ValueError(f"unknown op {op!r}")
    return await asyncio.wait_for(coro, timeout)


async def main_async() -> None:
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        cmd = json.loads(line)
        if cmd.get("op") == "quit":
            return
        try:
            out: dict[str, Any] = {"result": await run_command(cmd)}
        except Exception as e:
            out = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main_async())

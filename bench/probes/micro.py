"""In-process micro benchmark of the relay's per-message cost: no sockets, no other processes.

``python -m bench.micro`` drives a real relay connection (:class:`proxy.relay.shell.Connection` and its
protocol core) with in-memory transports (:mod:`bench.probes.transport`) between two real ``h2``
peers (a gRPC-like client and a Triton-like server) and times only the proxy's own ``data_received``
calls while the server streams
small ModelStreamInfer responses; then it times the pieces of the per-message path one by one
(assembler, labels, record construction, JSONL encoding, cutting one DATA frame out of the bytes
read). It answers "how many microseconds of Python does the proxy spend per streamed response, and
where" with far less noise than the end-to-end benchmark, so a change to proxy/relay/,
proxy/wire/, proxy/triton/labels.py or replay/capture/schema.py can be checked in seconds (run it
before and after).

It pokes at a few relay internals (``Connection.open``, ``client``/``upstream``); if those change,
adapt ``_Harness`` below.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
import orjson
from tritonclient.grpc import service_pb2 as pb

from bench.probes.transport import MemoryTransport
from proxy.relay.call import LABEL_KEEP
from proxy.relay.options import RelayOptions
from proxy.relay.records import make_message
from proxy.relay.relay import Relay
from proxy.relay.shell import Connection
from proxy.triton import labels
from proxy.triton.inflight import InFlight
from proxy.wire import frames as wire
from proxy.wire.messages import Assembler
from replay.capture import events as ev
from replay.capture.schema import Encoder, encode

STREAM_PATH = b"/inference.GRPCInferenceService/ModelStreamInfer"


def response_bytes(final: bool, rid: str = "s0-r0", text: bytes = b"tok") -> bytes:
    r = pb.ModelInferResponse(model_name="bench", model_version="1", id=rid)
    r.parameters["triton_final_response"].bool_param = final
    r.outputs.add(name="TEXT", datatype="BYTES", shape=[1])
    r.raw_output_contents.append(len(text).to_bytes(4, "little") + text)
    out: bytes = pb.ModelStreamInferResponse(infer_response=r).SerializeToString()
    return out


def request_bytes(rid: str = "s0-r0", n: int = 200) -> bytes:
    req = pb.ModelInferRequest(model_name="bench", id=rid)
    req.parameters["n"].int64_param = n
    req.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
    req.raw_input_contents.append(b"\x03\0\0\0abc")
    out: bytes = req.SerializeToString()
    return out


def grpc_frame(body: bytes) -> bytes:
    return b"\0" + len(body).to_bytes(4, "big") + body


#: ``--cold``: a buffer written before each proxy read (outside the timed part), or None.
_cold: bytearray | None = None


def _evict(buf: bytearray) -> None:
    """Write one byte per 64-byte cache line of ``buf``: evicts that much of what the caches held. In the
    real process model the client's and the upstream's work runs between two reads of the proxy, and the
    proxy's code and data are partly gone from the caches when it reads again (docs/benchmarks.md)."""
    buf[::64] = b"\x01" * len(range(0, len(buf), 64))


class _Harness:
    """client h2 <-> relay shell and core (in-memory transports) <-> server h2."""

    def __init__(self, payload: str, emit: Callable[[Any], None]) -> None:
        self.relay = Relay(("127.0.0.1", 1), emit, RelayOptions(payload=payload))
        self.conn = Connection(self.relay, "c1")
        self.dt, self.ut = MemoryTransport(), MemoryTransport()
        # The client side without its upstream connect (the upstream's transport is made here).
        self.conn.client.transport = self.dt
        self.conn.open(self.dt)
        self.conn.upstream.connection_made(self.ut)
        self.client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.client.initiate_connection()
        self.client.increment_flow_control_window(2**30)
        self.server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        self.server.initiate_connection()
        self.server.increment_flow_control_window(2**30)
        self.proxy_ns = 0
        self.pump()

    # CPU time of this thread, not wall time: other processes on a busy machine do not count.
    def _down(self, data: bytes) -> None:
        if _cold is not None:
            _evict(_cold)
        a = time.thread_time_ns()
        self.conn.client.data_received(data)
        self.proxy_ns += time.thread_time_ns() - a

    def _up(self, data: bytes) -> None:
        if _cold is not None:
            _evict(_cold)
        a = time.thread_time_ns()
        self.conn.upstream.data_received(data)
        self.proxy_ns += time.thread_time_ns() - a

    def pump(self) -> list[Any]:
        """Move bytes until quiet; returns the client's and server's h2 events."""
        events: list[Any] = []
        for _ in range(100):
            moved = False
            data = self.client.data_to_send()
            if data:
                self._down(data)
                moved = True
            data = self.server.data_to_send()
            if data:
                self._up(data)
                moved = True
            data = self.dt.take()
            if data:
                for e in self.client.receive_data(data):
                    if isinstance(e, h2.events.DataReceived):
                        self.client.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                    events.append(e)
                moved = True
            data = self.ut.take()
            if data:
                for e in self.server.receive_data(data):
                    if isinstance(e, h2.events.DataReceived):
                        self.server.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                    events.append(e)
                moved = True
            if not moved:
                return events
        raise RuntimeError("pump did not settle")

    def open_stream(self) -> int:
        sid = self.client.get_next_available_stream_id()
        self.client.send_headers(sid, [(b":method", b"POST"), (b":scheme", b"http"), (b":path", STREAM_PATH),
                                       (b":authority", b"bench"), (b"content-type", b"application/grpc"),
                                       (b"te", b"trailers")])  # fmt: skip
        self.client.send_data(sid, grpc_frame(request_bytes()))
        events = self.pump()
        up_sid = next(e.stream_id for e in events if isinstance(e, h2.events.RequestReceived))
        self.server.send_headers(up_sid, [(b":status", b"200"), (b"content-type", b"application/grpc")])
        self.pump()
        return up_sid

    def stream(self, up_sid: int, responses: int, per_write: int) -> float:
        """Server sends ``responses`` messages, ``per_write`` per proxy read; us of proxy time each."""
        more, last = grpc_frame(response_bytes(False)), grpc_frame(response_bytes(True))
        self.proxy_ns = 0
        sent = 0
        while sent < responses:
            k = min(per_write, responses - sent)
            for i in range(k):
                self.server.send_data(up_sid, last if sent + i == responses - 1 else more)
            sent += k
            self.pump()
        return self.proxy_ns / 1e3 / responses


INFER_PATH = b"/inference.GRPCInferenceService/ModelInfer"


def _unary_messages() -> tuple[bytes, bytes, list[tuple[bytes, bytes]]]:
    """A unary ModelInfer's request and response (gRPC-framed) and the client's headers."""
    req = pb.ModelInferRequest(model_name="bench", id="u")
    req.inputs.add(name="INPUT", datatype="INT32", shape=[1, 16])
    req.raw_input_contents.append(bytes(64))
    resp = pb.ModelInferResponse(model_name="bench", model_version="1", id="u")
    resp.outputs.add(name="OUTPUT", datatype="INT32", shape=[1, 16])
    resp.raw_output_contents.append(bytes(64))
    hdrs = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", INFER_PATH), (b":authority", b"bench"),
            (b"content-type", b"application/grpc"), (b"te", b"trailers"), (b"grpc-accept-encoding", b"identity,deflate,gzip"),
            (b"user-agent", b"grpc-python/1.85 grpc-c/50.0.0 (linux; chttp2)")]  # fmt: skip
    return grpc_frame(req.SerializeToString()), grpc_frame(resp.SerializeToString()), hdrs


def unary_call_reads(h: _Harness, calls: int) -> list[tuple[bytes, bytes]]:
    """The bytes of ``calls`` unary calls made by the harness's h2 peers without the proxy: per call the
    client's read (HEADERS+DATA, END_STREAM; flow-control credit of the call before) and the server's
    (HEADERS+DATA+trailers), in order, for the proxy to be fed afterwards (``bench.icount --unary``)."""
    req_frame, resp_frame, hdrs = _unary_messages()
    out = []
    for _ in range(calls):
        sid = h.client.get_next_available_stream_id()
        h.client.send_headers(sid, hdrs)
        h.client.send_data(sid, req_frame, end_stream=True)
        c2s = h.client.data_to_send()
        h.server.receive_data(c2s)
        h.server.send_headers(sid, [(b":status", b"200"), (b"content-type", b"application/grpc")])
        h.server.send_data(sid, resp_frame)
        h.server.send_headers(sid, [(b"grpc-status", b"0"), (b"grpc-message", b"")], end_stream=True)
        s2c = h.server.data_to_send()
        for e in h.client.receive_data(s2c):
            if isinstance(e, h2.events.DataReceived):
                h.client.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
        out.append((c2s, s2c))
    return out


def relay_per_unary_call(payload: str, calls: int) -> float:
    """A whole unary ModelInfer (request HEADERS+DATA+END, response HEADERS+DATA+trailers): us of
    proxy time per call."""
    h = _Harness(payload, lambda r: None)
    req_frame, resp_frame, hdrs = _unary_messages()
    total = 0
    for i in range(calls + 50):
        h.proxy_ns = 0
        sid = h.client.get_next_available_stream_id()
        h.client.send_headers(sid, hdrs)
        h.client.send_data(sid, req_frame, end_stream=True)
        events = h.pump()
        up_sid = next(e.stream_id for e in events if isinstance(e, h2.events.RequestReceived))
        h.server.send_headers(up_sid, [(b":status", b"200"), (b"content-type", b"application/grpc")])
        h.server.send_data(up_sid, resp_frame)
        h.server.send_headers(up_sid, [(b"grpc-status", b"0"), (b"grpc-message", b"")], end_stream=True)
        h.pump()
        if i >= 50:
            total += h.proxy_ns
    return total / 1e3 / calls


def relay_per_response(
    payload: str, responses: int, per_write: int, emit: Callable[[Any], None] | None = None
) -> float:
    sink: list[Any] = []
    h = _Harness(payload, emit or sink.append)
    sid = h.open_stream()
    h.stream(sid, 200, per_write)  # warm-up
    sink.clear()
    return h.stream(sid, responses, per_write)


def timeit(fn: Callable[[], Any], n: int) -> float:
    """Best-of-5 microseconds (thread CPU time) per call."""
    best = float("inf")
    for _ in range(5):
        a = time.thread_time_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.thread_time_ns() - a) / 1e3 / n)
    return best


def components(n: int) -> list[tuple[str, float]]:
    body = response_bytes(False)
    data = grpc_frame(body)
    fields = labels.stream_response_labels(body, False)
    rec = ev.MessageSeen(
        t_ns=time.time_ns(), call="c1.1", dir="s2c", index=7, size=len(body), compressed=False, **fields
    )

    # MessageSeen's fields, not frozen (built from the schema so a new field cannot break this)
    Unfrozen = dataclasses.make_dataclass(
        "Unfrozen",
        [(f.name, Any, f) for f in dataclasses.fields(ev.MessageSeen)],
        kw_only=True,
        slots=True,
    )

    asm = Assembler(LABEL_KEEP, False)
    inflight = InFlight(unary=False)
    inflight.sent("s0-r0")
    out = [
        ("Assembler.feed (one whole message)", timeit(lambda: asm.feed(data), n)),
        ("ModelStreamInferResponse.FromString only", timeit(lambda: pb.ModelStreamInferResponse.FromString(body), n)),
        ("labels.stream_response_labels (cached: same labels as the last response)", timeit(lambda: labels.stream_response_labels(body, False), n)),
        ("labels.decode_stream_response_labels (protobuf decode: a cache miss)", timeit(lambda: labels.decode_stream_response_labels(body, False), n)),
        ("InFlight.answered", timeit(lambda: inflight.answered("s0-r0", False), n)),
        ("MessageSeen(...) as replay.capture.events defines it", timeit(lambda: ev.MessageSeen(t_ns=1, call="c1.1", dir="s2c", index=7, size=40, compressed=False, **fields), n)),
        ("same fields, a non-frozen slots dataclass", timeit(lambda: Unfrozen(t_ns=1, call="c1.1", dir="s2c", index=7, size=40, compressed=False, **fields), n)),
        ("MessageSeen as the relay builds it (proxy.relay.records.make_message)", timeit(lambda: make_message(1, "c1.1", "s2c", 7, 40, False, fields), n)),
        ("schema.encode(MessageSeen) (writer thread)", timeit(lambda: encode(rec, 12345), n)),
        ("time.time_ns()", timeit(time.time_ns, n)),
    ]  # fmt: skip
    # Framing alone: one DATA frame cut out of a read (the relay's floor per frame).
    reader = wire.FrameReader(expect_preface=False)
    frame = wire.frame(wire.DATA, 0, 1, data)
    out.append(("proxy.wire.frames: cut one DATA frame from a read (no relay logic)", timeit(lambda: reader.feed(frame), n)))
    return out


def _dense_v2(record: Any, seq: int) -> bytes:
    # What schema 2 wrote (every field, nulls included): the "before" of the sparse encoding.
    return b'{"v":2,"seq":%d,"kind":"%s",%s\n' % (seq, record.kind.encode(), orjson.dumps(record)[1:])


def writer_per_record(compress: str, batch: int, n: int = 44_000) -> tuple[float, float, float]:
    """Writer-thread cost of the steady stream shape (:mod:`bench.captures`): (us per record, raw bytes, stored bytes per record)."""
    from bench.captures import steady_records
    from proxy.capture.sink import make_sink

    recs = list(steady_records(n))
    sink = make_sink(compress.removesuffix("-v2"))
    best, raw, stored = float("inf"), 0, 0
    for _ in range(3):
        enc = Encoder()
        encode_one = _dense_v2 if compress.endswith("-v2") else enc.encode
        raw = stored = 0
        t0 = time.perf_counter()
        for i in range(0, len(recs), batch):
            data = b"".join([encode_one(r, i + k) for k, r in enumerate(recs[i : i + batch])])
            raw += len(data)
            stored += len(sink.frame(data))
        best = min(best, time.perf_counter() - t0)
    return best / len(recs) * 1e6, raw / len(recs), stored / len(recs)


def print_writer_costs() -> None:
    """The capture writer's share of the proxy's CPU per record, by --compress and batch size."""
    print("### capture writer: CPU and bytes per record (steady stream shape; writer thread, best of 3)")
    print("| encoding / --compress | records per batch | us per record | bytes per record raw | on disk |")
    print("|---|---|---|---|---|")
    for compress in ("none-v2", "none", "zstd", "gzip"):
        for batch in (1, 100, 1000):
            us, raw, stored = writer_per_record(compress, batch)
            name = "dense schema 2, none" if compress == "none-v2" else f"sparse schema 3, {compress}"
            print(f"| {name} | {batch} | {us:.2f} | {raw:.0f} | {stored:.1f} |")


def print_cold(kibs: list[int], responses: int, reps: int) -> None:
    """The relay's cost per unary call and per streamed response (meta) with the caches warm and with
    ``kib`` of them evicted before each proxy read."""
    global _cold
    print("### relay: proxy Python time with the caches evicted before each read (--payload meta, medians of",
          reps, "runs)")  # fmt: skip
    print("| evicted before each read | us per unary call | us per streamed response (1 per read) |")
    print("|---|---|---|")
    for kib in [0, *kibs]:
        _cold = bytearray(kib * 1024) if kib else None
        try:
            unary = [relay_per_unary_call("meta", max(200, responses // 20)) for _ in range(reps)]
            stream = [relay_per_response("meta", responses, 1) for _ in range(reps)]
        finally:
            _cold = None
        label = f"{kib} KiB" if kib else "nothing (warm)"
        print(f"| {label} | {statistics.median(unary):.1f} | {statistics.median(stream):.1f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.micro", description=__doc__.split("\n\n")[0])
    p.add_argument("--responses", type=int, default=20_000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--writer-only", action="store_true", help="only the capture writer's cost per record")
    p.add_argument("--cold", type=int, action="append", metavar="KIB", default=[],
                   help="only the relay's cost with KIB of cache evicted before each proxy read (repeatable)")  # fmt: skip
    args = p.parse_args(argv)
    if args.cold:
        print_cold(args.cold, args.responses, args.reps)
        return 0
    print_writer_costs()
    print()
    if args.writer_only:
        return 0
    print("### relay: proxy Python time per streamed response (in-process, medians of", args.reps, "runs)")
    print("| payload | 1 response per read | 8 responses per read |")
    print("|---|---|---|")
    for payload in ("none", "meta", "full"):
        row = []
        for per_write in (1, 8):
            vals = [relay_per_response(payload, args.responses, per_write) for _ in range(args.reps)]
            row.append(f"{statistics.median(vals):.1f} us")
        print(f"| {payload} | {' | '.join(row)} |")
    vals = [relay_per_response("meta", args.responses, 1, emit=lambda r: None) for _ in range(args.reps)]
    print(f"| meta, records dropped at emit | {statistics.median(vals):.1f} us | |")
    print()
    print("### relay: proxy Python time per unary ModelInfer call (in-process)")
    print("| payload | us per call |")
    print("|---|---|")
    for payload in ("none", "meta"):
        vals = [relay_per_unary_call(payload, max(200, args.responses // 20)) for _ in range(args.reps)]
        print(f"| {payload} | {statistics.median(vals):.1f} us |")
    print()
    print("### pieces of the per-message path (best of 5, us per call)")
    print("| piece | us |")
    print("|---|---|")
    for name, us in components(min(args.responses, 20_000)):
        print(f"| {name} | {us:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

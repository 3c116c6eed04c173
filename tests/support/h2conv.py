"""Scripted HTTP/2 conversations through a relay, between a real ``h2`` client and a real ``h2`` server.

One definition of each conversation for the relay's equivalence test (the same conversations
through the Tunnel of before and the protocol core, alone and under its shell, compared record for
record and byte for byte) and for the core's own tests (:class:`CoreRig`: the core with no shell). A rig drives one
relay implementation; a conversation only calls the rig's methods, so the same script runs
through any of them. Timers never run by themselves: a conversation fires them with
``rig.fire_timers()``, so nothing waits.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
from tritonclient.grpc import service_pb2 as pb

from proxy.relay.contract import ArmTimer, CancelTimer, Close, Command, Log, Output
from proxy.relay.core import H2Core
from proxy.relay.lifecycle import CLIENT_LIVE
from proxy.relay.options import RelayOptions
from proxy.wire import frames as wire

INFER = b"/inference.GRPCInferenceService/ModelInfer"
STREAM = b"/inference.GRPCInferenceService/ModelStreamInfer"


def request_headers(path: bytes = INFER, *extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path), (b":authority", b"x"),
            (b"content-type", b"application/grpc"), (b"te", b"trailers"), *extra]  # fmt: skip


RESPONSE_HEADERS = [(b":status", b"200"), (b"content-type", b"application/grpc")]


def grpc(body: bytes) -> bytes:
    return b"\0" + len(body).to_bytes(4, "big") + body


def infer_request(rid: str, size: int = 64) -> bytes:
    req = pb.ModelInferRequest(model_name="m", id=rid)
    req.inputs.add(name="INPUT", datatype="INT32", shape=[1, size // 4])
    req.raw_input_contents.append(bytes(range(256)) * (size // 256) + bytes(size % 256))
    return grpc(req.SerializeToString())


def infer_response(rid: str, size: int = 64) -> bytes:
    r = pb.ModelInferResponse(model_name="m", model_version="1", id=rid)
    r.outputs.add(name="OUTPUT", datatype="INT32", shape=[1, size // 4])
    r.raw_output_contents.append(bytes(size))
    return grpc(r.SerializeToString())


def stream_response(rid: str, final: bool, text: bytes = b"tok") -> bytes:
    r = pb.ModelInferResponse(model_name="m", model_version="1", id=rid)
    r.parameters["triton_final_response"].bool_param = final
    r.outputs.add(name="TEXT", datatype="BYTES", shape=[1])
    r.raw_output_contents.append(len(text).to_bytes(4, "little") + text)
    return grpc(pb.ModelStreamInferResponse(infer_response=r).SerializeToString())


def h2peer(client: bool) -> h2.connection.H2Connection:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=client, header_encoding=None))
    conn.initiate_connection()
    return conn


class Rig:
    """A relay between an h2 client and an h2 server (``server=False``: no server speaks).

    Subclasses connect it to one relay implementation: :meth:`down` and :meth:`up` hand the relay
    one read of the client's or the upstream's bytes; ``dt``/``ut`` see what it writes. ``trace``
    is every write as (input number, side, bytes) and ``records`` every record."""

    def __init__(self, server: bool = True) -> None:
        self.records: list[Any] = []
        self.trace: list[tuple[int, str, bytes]] = []
        self.step = 0
        self.client = h2peer(True)
        self.server = h2peer(False) if server else None
        self.client_events: list[Any] = []
        self.server_events: list[Any] = []

    # --- what a relay implementation provides -----------------------------------------------------
    def _down(self, data: bytes) -> None:
        raise NotImplementedError

    def _up(self, data: bytes) -> None:
        raise NotImplementedError

    def _lose(self, side: str, exc: Exception | None) -> None:
        raise NotImplementedError

    def _fire_timers(self) -> None:
        raise NotImplementedError

    def _take(self, side: str) -> bytes:
        raise NotImplementedError

    def closed(self, side: str) -> bool:
        raise NotImplementedError

    def shutdown(self) -> None:
        raise NotImplementedError

    def abort(self, cause: str) -> None:
        raise NotImplementedError

    def connect_failed(self, reason: str) -> None:
        raise NotImplementedError

    # --- inputs, each numbered in the trace ---------------------------------------------------------
    def _input(self, fn: Callable[..., None], *args: Any) -> None:
        self.step += 1
        fn(*args)

    def down(self, data: bytes) -> None:
        self._input(self._down, data)

    def up(self, data: bytes) -> None:
        self._input(self._up, data)

    def lose(self, side: str, exc: Exception | None = None) -> None:
        self._input(self._lose, side, exc)

    def fire_timers(self) -> None:
        self._input(self._fire_timers)

    def take(self, side: str) -> bytes:
        data = self._take(side)
        if data:
            self.trace.append((self.step, side, data))
        return data

    def pump(self, client_reads: bool = True) -> None:
        """Move bytes until quiet (the client may be told not to read what it is sent)."""
        for _ in range(200):
            moved = False
            data = self.client.data_to_send()
            if data:
                self.down(data)
                moved = True
            if self.server is not None:
                data = self.server.data_to_send()
                if data:
                    self.up(data)
                    moved = True
            if client_reads:
                data = self.take("client")
                if data:
                    for e in self.client.receive_data(data):
                        if isinstance(e, h2.events.DataReceived):
                            self.client.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                        self.client_events.append(e)
                    moved = True
            data = self.take("upstream")
            if data and self.server is not None:
                for e in self.server.receive_data(data):
                    if isinstance(e, h2.events.DataReceived):
                        self.server.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                    self.server_events.append(e)
                moved = True
            if not moved:
                return
        raise AssertionError("bytes kept moving")

    def drain(self) -> None:
        """What the relay wrote and nobody read yet, into the trace."""
        self.take("client")
        self.take("upstream")

    def open_call(self, headers: list[tuple[bytes, bytes]] | None = None, end_stream: bool = False) -> int:
        sid: int = self.client.get_next_available_stream_id()
        self.client.send_headers(sid, headers or request_headers(), end_stream=end_stream)
        return sid

    # --- what is compared ---------------------------------------------------------------------------
    def outcome(self) -> dict[str, Any]:
        self.drain()
        return {
            "records": [normal(r) for r in self.records],
            "writes": [[step, side, _digest(data)] for step, side, data in _joined(self.trace)],
            "closed": [self.closed("client"), self.closed("upstream")],
        }


#: Record fields that are times (they differ from run to run).
TIMES = frozenset({"t_ns", "elapsed_ms", "duration_ms", "upstream_rst_us", "since_cancel_ms"})


def normal(record: Any) -> dict[str, Any]:
    """A record as compared: its fields, times left out, bytes as hex (JSON-able).

    A field equal to its default is left out, as a sparse capture line leaves it out: a field the schema
    gains later (with its default) changes no comparison, and a record that sets it does."""
    out: dict[str, Any] = {"kind": record.kind}
    for f in dataclasses.fields(record):
        if f.name in TIMES:
            continue
        value = getattr(record, f.name)
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        out[f.name] = _plain(value)
    return out


def _digest(data: bytes) -> str:
    """Bytes as compared: short ones as they are (hex), long ones by length and SHA-256."""
    return data.hex() if len(data) <= 512 else f"{len(data)}:{hashlib.sha256(data).hexdigest()}"


def _plain(v: Any) -> Any:
    if isinstance(v, bytes | bytearray | memoryview):
        return {"bytes": _digest(bytes(v))}
    if isinstance(v, str) and len(v) > 512:
        return {"str": _digest(v.encode())}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    return v


def _joined(trace: list[tuple[int, str, bytes]]) -> list[tuple[int, str, bytes]]:
    """Writes of one input to one side, joined: how a read's bytes were cut into writes is not compared."""
    out: list[tuple[int, str, bytes]] = []
    for step, side, data in trace:
        for i, (s2, side2, d2) in enumerate(out):
            if s2 == step and side2 == side:
                out[i] = (s2, side2, d2 + data)
                break
        else:
            out.append((step, side, data))
    return out


# --- the conversations ------------------------------------------------------------------------------


def unary_ok(rig: Rig) -> None:
    rig.pump()
    sid = rig.open_call()
    rig.client.send_data(sid, infer_request("u1"), end_stream=True)
    rig.pump()
    assert rig.server is not None
    rig.server.send_headers(sid, RESPONSE_HEADERS)
    rig.server.send_data(sid, infer_response("u1"))
    rig.server.send_headers(sid, [(b"grpc-status", b"0"), (b"grpc-message", b"")], end_stream=True)
    rig.pump()


def _send_all(rig: Rig, peer: h2.connection.H2Connection, sid: int, body: bytes, end_stream: bool) -> None:
    """``body`` from ``peer`` on ``sid`` as flow control lets it go, pumping between the pieces; an
    AssertionError (not a hang) when the peer's window stays shut (a WINDOW_UPDATE that never reached it)."""
    while body:
        n = min(peer.local_flow_control_window(sid), peer.max_outbound_frame_size, len(body))
        if n == 0:
            rig.pump()
            if peer.local_flow_control_window(sid) == 0:
                raise AssertionError(f"stream {sid}: the flow-control window stays shut with {len(body)} bytes to send")
            continue
        peer.send_data(sid, body[:n], end_stream=end_stream and n == len(body))
        body = body[n:]
        rig.pump()


def unary_large(rig: Rig) -> None:
    """A 300 kB request and response: many DATA frames, WINDOW_UPDATEs both ways."""
    rig.pump()
    sid = rig.open_call()
    _send_all(rig, rig.client, sid, infer_request("big", 300_000), end_stream=True)
    assert rig.server is not None
    rig.server.send_headers(sid, RESPONSE_HEADERS)
    _send_all(rig, rig.server, sid, infer_response("big", 300_000), end_stream=False)
    rig.server.send_headers(sid, [(b"grpc-status", b"0")], end_stream=True)
    rig.pump()


def stream_finals(rig: Rig) -> None:
    """A stream of two requests, responses one and three per read, finals, trailers."""
    rig.pump()
    sid = rig.open_call(request_headers(STREAM))
    rig.client.send_data(sid, infer_request("r0"))
    rig.client.send_data(sid, infer_request("r1"))
    rig.pump()
    assert rig.server is not None
    rig.server.send_headers(sid, RESPONSE_HEADERS)
    rig.server.send_data(sid, stream_response("r0", False))
    rig.pump()
    for rid, final in (("r0", False), ("r0", True), ("r1", False)):
        rig.server.send_data(sid, stream_response(rid, final))
    rig.pump()
    rig.server.send_data(sid, stream_response("r1", True))
    rig.client.end_stream(sid)
    rig.pump()
    rig.server.send_headers(sid, [(b"grpc-status", b"0")], end_stream=True)
    rig.pump()


def cancel_with_late_frames(rig: Rig) -> None:
    """The client resets a stream with one request answered (not final) and one final already
    passed; the upstream still sends a message and trailers on it (raw: h2 would not)."""
    rig.pump()
    sid = rig.open_call(request_headers(STREAM))
    for rid in ("done", "run", "wait"):
        rig.client.send_data(sid, infer_request(rid))
    rig.pump()
    assert rig.server is not None
    rig.server.send_headers(sid, RESPONSE_HEADERS)
    rig.server.send_data(sid, stream_response("done", True))
    rig.server.send_data(sid, stream_response("run", False))
    rig.pump()
    rig.client.reset_stream(sid, wire.CANCEL)
    rig.pump()
    late = wire.frame(wire.DATA, 0, sid, stream_response("run", False))
    trailers = wire.headers_frames(sid, wire.encode_block([(b"grpc-status", b"0"), (b"grpc-message", b"late-ok")]), True, 16384)
    rig.up(late + trailers)
    rig.pump()
    two = rig.open_call(request_headers(STREAM))
    rig.client.send_data(two, infer_request("two"))
    rig.pump()
    rig.client.reset_stream(two, wire.CANCEL)
    rig.pump()
    rig.up(wire.rst_stream(two, wire.CANCEL))
    rig.pump()


def cancel_mid_read(rig: Rig) -> None:
    """One client read holds DATA of a call, the reset of another, and a new call's HEADERS."""
    rig.pump()
    a = rig.open_call(request_headers(STREAM))
    b = rig.open_call(request_headers(STREAM))
    rig.pump()
    rig.client.send_data(a, infer_request("a0"))
    rig.client.reset_stream(b, wire.CANCEL)
    c = rig.open_call(end_stream=False)
    rig.client.send_data(c, infer_request("c0"), end_stream=True)
    rig.pump()


def deadlines(rig: Rig) -> None:
    """A reset after the call's grpc-timeout is a deadline; so is DEADLINE_EXCEEDED from upstream."""
    rig.pump()
    a = rig.open_call(request_headers(INFER, (b"grpc-timeout", b"1n")))
    rig.client.send_data(a, infer_request("d1"), end_stream=True)
    rig.pump()
    rig.client.reset_stream(a, wire.CANCEL)
    b = rig.open_call(request_headers(INFER, (b"grpc-timeout", b"1n")))
    rig.client.send_data(b, infer_request("d2"), end_stream=True)
    rig.pump()
    assert rig.server is not None
    rig.server.send_headers(b, [(b":status", b"200"), (b"content-type", b"application/grpc"),
                                (b"grpc-status", b"4"), (b"grpc-message", b"Deadline%20Exceeded")], end_stream=True)  # fmt: skip
    rig.pump()


def client_disconnects(rig: Rig) -> None:
    rig.pump()
    for rid in ("x", "y"):
        sid = rig.open_call(request_headers(STREAM))
        rig.client.send_data(sid, infer_request(rid))
    rig.pump()
    rig.lose("client")


def upstream_disconnects(rig: Rig) -> None:
    rig.pump()
    sid = rig.open_call(request_headers(STREAM))
    rig.client.send_data(sid, infer_request("x"))
    rig.pump()
    assert rig.server is not None
    rig.server.send_headers(sid, RESPONSE_HEADERS)
    rig.pump()
    rig.open_call(request_headers(STREAM))
    rig.pump()
    rig.lose("upstream", ConnectionResetError("reset by peer"))
    rig.pump()
    rig.fire_timers()
    rig.lose("client")


def upstream_goaway_drains(rig: Rig) -> None:
    """GOAWAY(NO_ERROR, last=1) from the upstream: call 3 refused, call 1 drains, then the linger."""
    rig.pump()
    one = rig.open_call()
    three = rig.open_call()
    rig.pump()
    rig.up(wire.goaway(one, wire.NO_ERROR))
    rig.pump(client_reads=False)  # (an h2 client that read the GOAWAY sends nothing more: raw frames below)
    rig.fire_timers()  # call 1 still open: nothing closes
    assert rig.server is not None
    rig.down(wire.frame(wire.DATA, wire.END_STREAM, one, infer_request("g")))
    rig.pump(client_reads=False)
    rig.server.send_headers(one, [*RESPONSE_HEADERS, (b"grpc-status", b"0")], end_stream=True)
    rig.pump(client_reads=False)
    rig.fire_timers()
    del three


def upstream_goaway_error(rig: Rig) -> None:
    """GOAWAY(INTERNAL_ERROR) from the upstream with a call open; the client goes before the upstream ends it."""
    rig.pump()
    sid = rig.open_call()
    rig.pump()
    rig.up(wire.goaway(sid, wire.INTERNAL_ERROR, b"server bug"))
    rig.pump()
    rig.lose("client")


def shutdown_keeps_back_new_streams(rig: Rig) -> None:
    """Shutdown GOAWAY; a stream opened after it is refused and kept back (its DATA's credit returned)."""
    rig.pump()
    one = rig.open_call()
    rig.pump()
    rig.shutdown()
    three = rig.open_call()
    rig.client.send_data(three, infer_request("kept"), end_stream=True)
    rig.down(rig.client.data_to_send())
    rig.drain()
    rig.client.send_data(one, infer_request("one"), end_stream=True)
    rig.pump(client_reads=False)
    assert rig.server is not None
    rig.server.send_headers(one, [*RESPONSE_HEADERS, (b"grpc-status", b"0")], end_stream=True)
    rig.pump(client_reads=False)
    rig.down(wire.frame(wire.PING, 0, 0, b"1234"))  # then a framing error: PING of 4 bytes
    rig.fire_timers()


def abort_ends_calls(rig: Rig) -> None:
    rig.pump()
    for rid in ("p", "q"):
        sid = rig.open_call(request_headers(STREAM))
        rig.client.send_data(sid, infer_request(rid))
    rig.pump()
    rig.abort("proxy_shutdown")
    rig.pump()


def refused_upstream(rig: Rig) -> None:
    """The upstream is unreachable: calls get UNAVAILABLE from the proxy, then GOAWAY; a PING after is fine."""
    rig.connect_failed("triton-tap: upstream 127.0.0.1:1 unreachable: Connection refused")
    rig.pump()
    sid = rig.open_call(end_stream=False)
    rig.client.send_data(sid, infer_request("r"), end_stream=True)
    rig.pump(client_reads=False)
    rig.shutdown()
    rig.down(wire.frame(wire.PING, 0, 0, b"12345678"))
    rig.pump(client_reads=False)
    rig.fire_timers()


def refused_upstream_then_shutdown(rig: Rig) -> None:
    """Unreachable upstream, shutdown before any call: a client PING afterwards is not a violation."""
    rig.connect_failed("triton-tap: upstream 127.0.0.1:1 unreachable: Connection refused")
    rig.pump()
    rig.shutdown()
    rig.drain()
    rig.down(wire.frame(wire.PING, 0, 0, b"12345678"))
    rig.fire_timers()


def upstream_closes_before_settings(rig: Rig) -> None:
    rig.down(rig.client.data_to_send())
    rig.drain()
    rig.lose("upstream")
    rig.pump()
    sid = rig.open_call(end_stream=True)
    rig.pump()
    del sid


def upstream_breaks_http2_after_settings(rig: Rig) -> None:
    assert rig.server is not None
    rig.down(rig.client.data_to_send())
    rig.server.receive_data(rig.take("upstream"))
    rig.up(rig.server.data_to_send() + wire.frame(wire.DATA, 0, 0, b"junk"))
    rig.lose("upstream")
    rig.pump()
    rig.open_call(end_stream=True)
    rig.pump()


def upstream_closes_cleanly_before_a_call(rig: Rig) -> None:
    rig.pump()
    rig.lose("upstream")
    rig.pump()
    rig.fire_timers()


def own_settings_first(rig: Rig) -> None:
    """Upstream lost before its SETTINGS with a call open: the proxy's own SETTINGS, status, GOAWAY;
    the client's ACK of that SETTINGS stays in the proxy."""
    sid = rig.open_call(end_stream=True)
    rig.down(rig.client.data_to_send())
    rig.drain()
    rig.lose("upstream", ConnectionResetError())
    rig.pump()
    del sid


def client_breaks_http2(rig: Rig) -> None:
    """A bad frame after good ones in the same read: the good ones count, then the error."""
    rig.pump()
    sid = rig.open_call(request_headers(STREAM))
    rig.client.send_data(sid, infer_request("z"))
    rig.down(rig.client.data_to_send() + wire.frame(wire.DATA, wire.PADDED, sid, b"\x09abc"))
    rig.drain()
    rig.lose("client")


def continuation_blocks(rig: Rig) -> None:
    """Header blocks of 40 kB: HEADERS + CONTINUATION each way, decoded whole."""
    rig.pump()
    sid = rig.open_call(request_headers(INFER, (b"x-big", b"v" * 40_000), (b"authorization", b"secret")))
    rig.client.send_data(sid, infer_request("h"), end_stream=True)
    rig.pump()
    assert rig.server is not None
    rig.server.send_headers(sid, [*RESPONSE_HEADERS, (b"x-meta", b"m" * 40_000)])
    rig.server.send_data(sid, infer_response("h"))
    rig.server.send_headers(sid, [(b"grpc-status", b"0"), (b"x-trailer", b"t" * 20_000)], end_stream=True)
    rig.pump()


def upstream_resets(rig: Rig) -> None:
    rig.pump()
    sid = rig.open_call()
    rig.pump()
    assert rig.server is not None
    rig.server.reset_stream(sid, 0xB)
    rig.pump()
    two = rig.open_call()
    rig.client.send_data(two, infer_request("e"), end_stream=True)
    rig.pump()
    rig.server.send_headers(two, RESPONSE_HEADERS)
    rig.server.send_data(two, infer_response("e"), end_stream=True)  # no trailers: INTERNAL
    rig.pump()


def padded_and_odd_frames(rig: Rig) -> None:
    """Padded DATA, PRIORITY, PING and an unknown frame type pass on; a status without digits is UNKNOWN."""
    rig.pump()
    sid = rig.open_call()
    rig.pump()
    body = infer_request("pad")
    rig.down(wire.frame(wire.DATA, wire.PADDED | wire.END_STREAM, sid, b"\x03" + body + b"\0\0\0"))
    rig.down(wire.frame(wire.PRIORITY, 0, sid, bytes(5)) + wire.frame(0xEE, 0, 0, b"ext"))
    rig.pump()
    assert rig.server is not None
    rig.server.ping(b"pingpong")
    rig.server.send_headers(sid, [*RESPONSE_HEADERS, (b"grpc-status", b"x")], end_stream=True)
    rig.pump()


def many_calls_one_block(rig: Rig) -> None:
    """Calls repeating one header block (the decoded-block cache), with and without a deadline."""
    rig.pump()
    secret = request_headers(INFER, (b"authorization", b"Bearer s3cret"))
    for headers in (secret, secret, [*secret, (b"grpc-timeout", b"250m")], secret):
        sid = rig.open_call(headers)
        rig.client.send_data(sid, infer_request("same"), end_stream=True)
        rig.pump()
        assert rig.server is not None
        rig.server.send_headers(sid, RESPONSE_HEADERS)
        rig.server.send_data(sid, infer_response("same"))
        rig.server.send_headers(sid, [(b"grpc-status", b"0")], end_stream=True)
        rig.pump()


#: Every conversation, by name.
CONVERSATIONS: dict[str, Callable[[Rig], None]] = {
    f.__name__: f
    for f in (
        unary_ok, unary_large, stream_finals, cancel_with_late_frames, cancel_mid_read, deadlines,
        client_disconnects, upstream_disconnects, upstream_goaway_drains, upstream_goaway_error,
        shutdown_keeps_back_new_streams, abort_ends_calls, refused_upstream, refused_upstream_then_shutdown,
        upstream_closes_before_settings,
        upstream_breaks_http2_after_settings, upstream_closes_cleanly_before_a_call, own_settings_first,
        client_breaks_http2, continuation_blocks, upstream_resets, padded_and_odd_frames, many_calls_one_block,
    )
}  # fmt: skip
#: Conversations in which no upstream speaks (it is unreachable, or gone before its SETTINGS).
NO_SERVER = frozenset({"refused_upstream", "refused_upstream_then_shutdown", "upstream_closes_before_settings", "own_settings_first"})


# --- the protocol core alone, no shell and no event loop --------------------------------------------


@dataclasses.dataclass
class Shared:
    """What the connections of one proxy share, as :class:`proxy.relay.contract.Shared` asks."""

    emit: Callable[[Any], None]
    options: RelayOptions = dataclasses.field(default_factory=RelayOptions)
    authority: bytes | None = None
    open_calls: int = 0
    before_cancel: Callable[[str], None] | None = None

    @property
    def emit_message(self) -> Callable[[Any], None]:
        return self.emit


class CoreRig(Rig):
    """The conversation through a bare :class:`proxy.relay.core.H2Core`: this rig is its shell.

    Every step of every input is kept in ``steps`` as (input number, what it wrote upstream, what it
    wrote to the client, its commands), so tests see exactly what one step asked for; ``armed`` is
    the timers armed and not yet fired or cancelled. Nothing runs by itself: no loop, no sleeps."""

    def __init__(self, setup: dict[str, Any] | None = None, server: bool = True, connect: bool = True) -> None:
        super().__init__(server)
        setup = setup or {}
        name = setup.get("upstream_server_name")
        self.shared = Shared(self.records.append, setup.get("options", RelayOptions()),
                             name.encode() if name else None)  # fmt: skip
        self.core = H2Core(self.shared, "c1", "127.0.0.1:40000", None, lambda: 0)
        self.steps: list[tuple[int, bytes, bytes, list[Command]]] = []
        self.out: dict[str, list[bytes]] = {"client": [], "upstream": []}
        self.closes: list[str] = []
        self.armed: dict[str, float] = {}
        self.logs: list[Log] = []
        if connect:
            self.run(self.core.connected())

    def run(self, out: Output | None) -> None:
        """Carry out each step as the shell would."""
        while out is not None:
            c2s = bytes(out.c2s) if out.c2s is not None else b""
            s2c = bytes(out.s2c) if out.s2c is not None else b""
            commands = list(out.commands)
            self.steps.append((self.step, c2s, s2c, commands))
            if c2s and "upstream" not in self.closes:
                self.out["upstream"].append(c2s)
            if s2c and "client" not in self.closes:
                self.out["client"].append(s2c)
            for c in commands:
                if isinstance(c, Close):
                    self.closes.append(c.side)
                elif isinstance(c, ArmTimer):
                    self.armed[c.name] = c.delay_s
                elif isinstance(c, CancelTimer):
                    self.armed.pop(c.name, None)
                elif isinstance(c, Log):
                    self.logs.append(c)
            out = self.core.resume() if out.more else None
        # the hot path's flag never disagrees with the state it stands for
        assert self.core.client_live == (self.core.client in CLIENT_LIVE)

    def _down(self, data: bytes) -> None:
        self.run(self.core.receive_c2s(data))

    def _up(self, data: bytes) -> None:
        self.run(self.core.receive_s2c(data))

    def _lose(self, side: str, exc: Exception | None) -> None:
        self.run(self.core.lost(side, exc))

    def _fire_timers(self) -> None:
        for name in list(self.armed):
            del self.armed[name]
            self.run(self.core.timer(name))

    def _take(self, side: str) -> bytes:
        data = b"".join(self.out[side])
        self.out[side].clear()
        return data

    def closed(self, side: str) -> bool:
        return side in self.closes

    def shutdown(self) -> None:
        self._input(lambda: self.run(self.core.goaway()))

    def abort(self, cause: str) -> None:
        self._input(lambda: self.run(self.core.abort(cause)))

    def connect_failed(self, reason: str) -> None:
        self._input(lambda: self.run(self.core.connect_failed(reason)))

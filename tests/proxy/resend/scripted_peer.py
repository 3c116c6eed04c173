"""A scripted HTTP/2 gRPC server for `replay send`'s tests of what no real server does on demand.

It answers each call as the test's ``act`` says: a normal answer (one message and a grpc-status),
nothing, frames after the stream is over, or a TCP reset of the whole connection. Parsing and the
normal answers go through ``h2`` (server side); the frames a well-behaved server never sends are
written raw (proxy.wire's builders; their header blocks are HPACK literals without indexing, so
they leave both sides' dynamic tables as they were).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import h2.config
import h2.connection
import h2.events
from tritonclient.grpc import service_pb2 as pb

from proxy.wire import frames as wire


def answer_message(rid: str = "") -> bytes:
    """A length-prefixed ModelInferResponse (uncompressed)."""
    body = bytes(pb.ModelInferResponse(model_name="m", model_version="1", id=rid).SerializeToString())
    return b"\x00" + len(body).to_bytes(4, "big") + body


@dataclass
class PeerConn:
    """One accepted connection; what ``act`` uses to answer."""

    h2: h2.connection.H2Connection
    transport: asyncio.Transport
    requests: int = 0  # calls opened on it so far
    resets: list[int] = field(default_factory=list)  # streams the client reset
    reset_codes: list[int] = field(default_factory=list)  # the error code of each of those resets

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.transport.is_closing():
            self.transport.write(data)

    def answer(self, sid: int, status: int = 0, message: str = "") -> None:
        """Response headers, one message, trailers with ``status``."""
        self.h2.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
        self.h2.send_data(sid, answer_message())
        trailers = [("grpc-status", str(status))] + ([("grpc-message", message)] if message else [])
        self.h2.send_headers(sid, trailers, end_stream=True)
        self.flush()

    def headers_only(self, sid: int) -> None:
        """Response headers, and nothing more (the call stays open)."""
        self.h2.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
        self.flush()

    def raw(self, data: bytes) -> None:
        """Bytes written as they are, after whatever h2 has queued."""
        self.flush()
        self.transport.write(data)

    def reset_tcp(self) -> None:
        """Close with SO_LINGER 0: the peer gets a TCP RST, no GOAWAY."""
        sock = cast(socket.socket, self.transport.get_extra_info("socket"))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()


def stray_data(sid: int) -> bytes:
    """A DATA frame carrying one gRPC message on ``sid``."""
    return wire.frame(wire.DATA, 0, sid, answer_message())


def stray_trailers(sid: int, status: int) -> bytes:
    """A trailers HEADERS frame (END_STREAM) on ``sid``."""
    block = wire.encode_block([(b"grpc-status", str(status).encode())])
    return wire.headers_frames(sid, block, end_stream=True, max_frame=wire.DEFAULT_MAX_FRAME)


#: ``act(conn, stream_id)`` when a call's request is complete (its END_STREAM arrived).
Act = Callable[[PeerConn, int], None]


class _Protocol(asyncio.Protocol):
    def __init__(self, peer: ScriptedPeer) -> None:
        self.peer = peer
        self.conn: PeerConn | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        h = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        h.initiate_connection()
        self.conn = PeerConn(h, cast(asyncio.Transport, transport))
        self.conn.flush()
        self.peer.conns.append(self.conn)

    def data_received(self, data: bytes) -> None:
        assert self.conn is not None
        c = self.conn
        for event in c.h2.receive_data(data):
            if isinstance(event, h2.events.DataReceived):
                c.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.RequestReceived):
                c.requests += 1
                self.peer.on_open(c, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.peer.act(c, event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                c.resets.append(event.stream_id)
                c.reset_codes.append(event.error_code)
                self.peer.on_reset(c, event.stream_id)
            if c.transport.is_closing():
                return
        c.flush()


class ScriptedPeer:
    """The server on ``127.0.0.1:port``; ``act`` answers calls, ``on_reset`` reacts to the client's RST_STREAM."""

    def __init__(self, act: Act, on_reset: Act = lambda c, sid: None, on_open: Act = lambda c, sid: None) -> None:
        self.act, self.on_reset, self.on_open = act, on_reset, on_open
        self.conns: list[PeerConn] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Protocol(self), "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for c in self.conns:
                c.transport.abort()
            await self._server.wait_closed()

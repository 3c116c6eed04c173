"""A raw HTTP/2 fake upstream that keeps answering after it received RST_STREAM.

A real tritonserver (and any grpc server) stops sending on a stream once it reads the client's
RST_STREAM, so the frames a proxy must record as ``late`` only occur in the window between the
cancel leaving the proxy and reaching the server. This fake makes that window as long as a test
needs: after the reset it still writes ``late_messages`` DATA frames and then trailers, as raw
frames (h2 itself refuses to send on a reset stream).

Requests whose Triton id starts with ``run`` get one response every ``interval`` seconds; ids
starting with ``wait`` get none (they stay "queued" as far as the wire shows).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import h2.config
import h2.connection
import h2.events
import hyperframe.frame
from tritonclient.grpc import service_pb2 as pb

from tests.support.fake_triton import stream_response


def _grpc_message(msg: Any) -> bytes:
    body: bytes = msg.SerializeToString()
    return b"\x00" + len(body).to_bytes(4, "big") + body


class StubbornUpstream(asyncio.Protocol):
    """One connection of the fake: see the module docstring."""

    def __init__(self, owner: Stubborn) -> None:
        self.owner = owner
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        self.transport: asyncio.Transport | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.reset: set[int] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        self.conn.initiate_connection()
        self._flush()

    def _flush(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        for e in self.conn.receive_data(data):
            if isinstance(e, h2.events.RequestReceived):
                self.conn.send_headers(e.stream_id, [(b":status", b"200"), (b"content-type", b"application/grpc")])
            elif isinstance(e, h2.events.DataReceived):
                self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                buf = e.data
                while len(buf) >= 5:
                    n = int.from_bytes(buf[1:5], "big")
                    req = pb.ModelInferRequest.FromString(buf[5 : 5 + n])
                    buf = buf[5 + n :]
                    self.owner.requests.append(req.id)
                    if req.id.startswith("run"):
                        task = asyncio.get_running_loop().create_task(
                            self._answer(e.stream_id, req.model_name, req.id), name=f"stubborn-answer-{req.id}"
                        )
                        self.tasks.append(task)
            elif isinstance(e, h2.events.StreamReset):
                self.reset.add(e.stream_id)
                self.owner.resets.append(e.stream_id)
        self._flush()

    async def _answer(self, sid: int, model: str, rid: str) -> None:
        i = 0
        late = 0
        while late < self.owner.late_messages:
            msg = _grpc_message(stream_response(model, rid, False, f"t{i}".encode()))
            if sid in self.reset:
                # Raw frame: what a server that ignores RST_STREAM would still put on the wire.
                assert self.transport is not None
                self.transport.write(hyperframe.frame.DataFrame(sid, data=msg).serialize())
                self.owner.late_texts.append(f"t{i}")
                late += 1
            else:
                self.conn.send_data(sid, msg)
                self._flush()
            i += 1
            await asyncio.sleep(self.owner.interval)
        trailers = self.conn.encoder.encode([(b"grpc-status", b"0"), (b"grpc-message", b"late-ok")])
        frame = hyperframe.frame.HeadersFrame(sid, data=trailers, flags=["END_HEADERS", "END_STREAM"])
        assert self.transport is not None
        self.transport.write(frame.serialize())

    def connection_lost(self, exc: Exception | None) -> None:
        for t in self.tasks:
            t.cancel()


class Stubborn:
    """The server: ``await start()``, ``.port``, ``await stop()``; ``requests`` and ``resets`` seen."""

    def __init__(self, late_messages: int = 3, interval: float = 0.01) -> None:
        self.late_messages = late_messages
        self.interval = interval
        self.requests: list[str] = []
        self.resets: list[int] = []
        #: the TEXT of every message written after a reset (raw frames a real server would not send)
        self.late_texts: list[str] = []
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._conns: list[StubbornUpstream] = []

    def _factory(self) -> StubbornUpstream:
        c = StubbornUpstream(self)
        self._conns.append(c)
        return c

    async def start(self) -> None:
        self._server = await asyncio.get_running_loop().create_server(self._factory, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for c in self._conns:
            for t in c.tasks:
                t.cancel()
            await asyncio.gather(*c.tasks, return_exceptions=True)
            if c.transport is not None:
                c.transport.abort()

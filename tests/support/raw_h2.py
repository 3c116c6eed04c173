"""A gRPC client over raw HTTP/2 for the end-to-end tests: it logs every frame it receives, also those a
strict h2 refuses, so a test can compare what a client gets from Triton directly and through the proxy."""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hpack
from tritonclient.grpc import service_pb2

#: Bounded waits for conditions (the machine is shared and slow at times).
WAIT_S = 30.0

DATA, HEADERS, RST_STREAM, GOAWAY = 0x0, 0x1, 0x3, 0x7
END_STREAM, _ENDHEADERS, PADDED, PRIORITY = 0x1, 0x4, 0x8, 0x20
NAMES = {0: "DATA", 1: "HEADERS", 2: "PRIORITY", 3: "RST_STREAM", 4: "SETTINGS", 6: "PING", 7: "GOAWAY",
          8: "WINDOW_UPDATE", 9: "CONTINUATION"}  # fmt: skip
CANCEL = 0x8


@dataclass(frozen=True)
class Frame:
    """A frame the client received: type, flags, stream, and what it said (headers, error code, size)."""

    type: int
    flags: int
    sid: int
    said: Any

    def __str__(self) -> str:
        end = " END_STREAM" if self.type in (DATA, HEADERS) and self.flags & END_STREAM else ""
        return f"{NAMES.get(self.type, self.type)}{end} {self.said}"


@dataclass
class RawClient:
    """A gRPC client over raw HTTP/2 that logs every frame it receives (h2 as strict as it ships)."""

    host: str
    port: int
    frames: list[Frame] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)
    #: Why h2 ended the connection (it sends GOAWAY then), or None.
    error: str | None = None
    closed: bool = False
    #: Gives the server credit for what it reads (WINDOW_UPDATE); without, a stream stalls once the server has
    #: sent its initial window (65,535 bytes), as a client that stopped reading does.
    ack: bool = True

    def __post_init__(self) -> None:
        self.sock = socket.create_connection((self.host, self.port), timeout=WAIT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.conn.increment_flow_control_window(2**30)
        # A decoder of its own that sees every header block the client gets, so frames h2 refuses are
        # still logged with what they said.
        self.decoder = hpack.Decoder()
        self._buf = b""
        self._block = b""
        self._write()

    def _write(self) -> None:
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def open(self, path: str, timeout: str | None = None) -> int:
        sid: int = self.conn.get_next_available_stream_id()
        headers = [(":method", "POST"), (":scheme", "http"), (":path", path),
                   (":authority", f"{self.host}:{self.port}"), ("content-type", "application/grpc"), ("te", "trailers")]  # fmt: skip
        if timeout is not None:
            headers.append(("grpc-timeout", timeout))
        self.conn.send_headers(sid, headers)
        self._write()
        return sid

    def send(self, sid: int, request: service_pb2.ModelInferRequest, end: bool) -> None:
        body = request.SerializeToString()
        self.conn.send_data(sid, b"\x00" + struct.pack(">I", len(body)) + body, end_stream=end)
        self._write()

    def send_bytes(self, sid: int, data: bytes) -> None:
        """``data`` on the stream as it is (a gRPC message's start, say), in frames of at most 16 KiB."""
        for i in range(0, len(data), 16384):
            self.conn.send_data(sid, data[i : i + 16384])
        self._write()

    def reset(self, sid: int) -> None:
        self.conn.reset_stream(sid, CANCEL)
        self._write()

    def wait(self, until: Callable[[], bool], timeout: float = WAIT_S) -> bool:
        """Read until ``until()`` holds (True), or the connection ends or ``timeout`` s pass (False)."""
        deadline = time.monotonic() + timeout
        while not until():
            left = deadline - time.monotonic()
            if self.closed or left <= 0:
                return False
            if not select.select([self.sock], [], [], left)[0]:
                continue
            data = self.sock.recv(65536)
            if not data:
                self.closed = True
                continue
            self._log(data)
            try:
                events = self.conn.receive_data(data)
            except h2.exceptions.ProtocolError as e:
                self.error = f"{type(e).__name__}: {e}"
                self.closed = True
                self._write()  # h2's GOAWAY
                continue
            for event in events:
                self.events.append(event)
                if isinstance(event, h2.events.DataReceived) and self.ack:
                    self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            self._write()
        return True

    def _log(self, data: bytes) -> None:
        self._buf += data
        while len(self._buf) >= 9:
            length = int.from_bytes(self._buf[:3], "big")
            if len(self._buf) < 9 + length:
                return
            ftype, flags = self._buf[3], self._buf[4]
            sid = int.from_bytes(self._buf[5:9], "big") & 0x7FFFFFFF
            payload, self._buf = self._buf[9 : 9 + length], self._buf[9 + length :]
            said: Any = length
            if ftype in (HEADERS, 0x9):
                if ftype == HEADERS:
                    if flags & PADDED:
                        payload = payload[1 : len(payload) - payload[0]]
                    if flags & PRIORITY:
                        payload = payload[5:]
                self._block += payload
                if not flags & _ENDHEADERS:
                    continue
                said, self._block = dict(self.decoder.decode(self._block)), b""
                ftype = HEADERS
            elif ftype == RST_STREAM:
                said = int.from_bytes(payload, "big")
            elif ftype == GOAWAY:
                said = (
                    int.from_bytes(payload[:4], "big") & 0x7FFFFFFF,
                    int.from_bytes(payload[4:8], "big"),
                    payload[8:],
                )
            self.frames.append(Frame(ftype, flags, sid, said))

    def ping(self) -> None:
        """A PING of its own, past h2 (which stops sending once it got a GOAWAY)."""
        self.sock.sendall(b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + bytes(8))

    def read_frames(self, until: Callable[[], bool], timeout: float = WAIT_S) -> bool:
        """As :meth:`wait`, logging the frames only (no h2: it refuses frames after a GOAWAY it got)."""
        deadline = time.monotonic() + timeout
        while not until():
            left = deadline - time.monotonic()
            if self.closed or left <= 0:
                return False
            if select.select([self.sock], [], [], left)[0]:
                data = self.sock.recv(65536)
                self.closed = not data
                self._log(data)
        return True

    def ended(self, sid: int) -> bool:
        return any(
            isinstance(e, h2.events.StreamEnded | h2.events.StreamReset) and e.stream_id == sid for e in self.events
        )

    def responses(self, sid: int) -> int:
        return sum(1 for e in self.events if isinstance(e, h2.events.DataReceived) and e.stream_id == sid)

    def status(self, sid: int) -> str | None:
        for e in self.events:
            if isinstance(e, h2.events.TrailersReceived) and e.stream_id == sid:
                # (header_encoding="utf-8": names and values are str, whatever h2's annotations say)
                status: str | None = dict(cast(list[tuple[str, str]], e.headers)).get("grpc-status")
                return status
        return None

    def on(self, sid: int) -> list[Frame]:
        return [f for f in self.frames if f.sid == sid]

    def close(self) -> None:
        self.sock.close()


def tokens_request(rid: str, prompt: str, max_tokens: int, delay_ms: int) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="tokens", id=rid)
    request.inputs.add(name="PROMPT", datatype="BYTES", shape=[1]).contents.bytes_contents.append(prompt.encode())
    request.inputs.add(name="MAX_TOKENS", datatype="INT32", shape=[1]).contents.int_contents.append(max_tokens)
    request.inputs.add(name="DELAY_MS", datatype="INT32", shape=[1]).contents.int_contents.append(delay_ms)
    return request

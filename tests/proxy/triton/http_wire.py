"""The HTTP exchanges of the real Triton 2.51 transcripts in tests/proxy/triton/data/http, parsed by h11.

Each fixture holds, per client connection, every byte the client sent (``c2s``) and every byte Triton
sent back (``s2c``), recorded by a relay in front of a real tritonserver 2.51.0 (see the README there).
h11 is a participant, not an observer: each parsed event is mirrored into the other role's
connection, as the relay core does.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path

import h11

DATA = Path(__file__).parent / "data" / "http"


@dataclass
class Exchange:
    """One request and what came back for it."""

    method: str  # the request line as call_start.method records it: "POST /v2/models/m/infer"
    headers: list[tuple[bytes, bytes]]
    body: bytes
    status: int | None = None
    reply_headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    reply: bytes = b""
    #: The reply's body ended as its framing says (Content-Length reached or chunked terminator).
    clean_end: bool = False
    #: The reply body's h11 Data pieces as they were cut (for feeding splitters piecewise).
    pieces: list[bytes] = field(default_factory=list)


def load(name: str) -> list[list[Exchange]]:
    """Every connection of fixture ``name`` (without .json), as its exchanges in order."""
    doc = json.loads((DATA / f"{name}.json").read_text())
    return [_exchanges(base64.b64decode(c["c2s"]), base64.b64decode(c["s2c"])) for c in doc["connections"]]


def exchanges(name: str) -> list[Exchange]:
    """Every exchange of fixture ``name``, connections one after another."""
    return [x for conn in load(name) for x in conn]


def _exchanges(c2s: bytes, s2c: bytes) -> list[Exchange]:
    server, client = h11.Connection(h11.SERVER), h11.Connection(h11.CLIENT)
    server.receive_data(c2s)
    server.receive_data(b"")
    client.receive_data(s2c)
    client.receive_data(b"")
    out: list[Exchange] = []
    while True:
        try:
            x = _request(server, client)
        except h11.RemoteProtocolError:
            return out  # not HTTP, or a body cut short: no exchange
        if x is None:
            return out
        out.append(x)
        try:
            done = _response(server, client, x)
        except h11.RemoteProtocolError:
            return out  # the reply was cut: x.clean_end stays False
        if not done or client.our_state is not h11.DONE or client.their_state is not h11.DONE:
            return out
        server.start_next_cycle()
        client.start_next_cycle()


def _request(server: h11.Connection, client: h11.Connection) -> Exchange | None:
    x: Exchange | None = None
    while True:
        e = server.next_event()
        if e is h11.NEED_DATA or e is h11.PAUSED or isinstance(e, h11.ConnectionClosed):
            return None
        client.send(e)  # type: ignore[arg-type]
        if isinstance(e, h11.Request):
            x = Exchange(method=f"{e.method.decode()} {e.target.decode()}", headers=list(e.headers), body=b"")
        elif isinstance(e, h11.Data) and x is not None:
            x.body += bytes(e.data)
        elif isinstance(e, h11.EndOfMessage):
            return x


def _response(server: h11.Connection, client: h11.Connection, x: Exchange) -> bool:
    while True:
        e = client.next_event()
        if e is h11.NEED_DATA or e is h11.PAUSED or isinstance(e, h11.ConnectionClosed):
            return False
        if isinstance(e, h11.InformationalResponse):
            continue
        server.send(e)  # type: ignore[arg-type]
        if isinstance(e, h11.Response):
            x.status, x.reply_headers = e.status_code, list(e.headers)
        elif isinstance(e, h11.Data):
            x.reply += bytes(e.data)
            x.pieces.append(bytes(e.data))
        elif isinstance(e, h11.EndOfMessage):
            x.clean_end = True
            return True

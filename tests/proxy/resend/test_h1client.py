"""send's HTTP/1.1 client against a scripted server, for replies no real Triton sends on demand.

The server here is a few lines of asyncio that answer any request with canned bytes: a real Triton's
``generate_stream`` writes neither SSE comments, nor blocks without data, nor CR-only line ends, yet a
server in front of it (or another implementation) may, and send must count those replies exactly as the
recorder does.
"""

from __future__ import annotations

import asyncio

from proxy.resend.h1client import BODY_END, HttpConnection
from proxy.triton.http_labels import SseSplitter

#: A comment, a block without data, blank lines between events, CR-only and CRLF line ends.
EVENTS = b': keep-alive\n\ndata: {"a":1}\n\n\n\nevent: x\n\ndata: {"a":2}\r\rdata: {"a":3}\r\n\r\n'


def _chunked(body: bytes, piece: int) -> bytes:
    out = b""
    for i in range(0, len(body), piece):
        part = body[i : i + piece]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


async def _exchange(reply: bytes) -> tuple[int, str | None, str | None]:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(reply)
        await writer.drain()
        await reader.read()  # until send closes
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = HttpConnection("127.0.0.1", port, "t")
    try:
        await conn.open()
        stream = await conn.request("POST /v2/models/m/generate_stream", [("host", "x"), ("content-length", "2")], b"{}")
        await asyncio.wait_for(stream.done.wait(), 10)
        conn.release(stream)
        return stream.responses, stream.outcome, stream.status
    finally:
        await conn.close()
        server.close()
        await server.wait_closed()


def test_send_counts_the_events_the_recorder_counts() -> None:
    """Comments and blocks without data are no event; a CR alone ends a line: send's count is the
    recorder's splitter's (3 here), whatever the pieces the body arrives in."""
    want = len(SseSplitter().feed(EVENTS))
    assert want == 3
    head = b"HTTP/1.1 200 OK\r\ncontent-type: Text/Event-Stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
    for piece in (1, 5, len(EVENTS)):
        assert asyncio.run(_exchange(head + _chunked(EVENTS, piece))) == (want, BODY_END, "200")


def test_a_plain_reply_is_one_response() -> None:
    reply = b'{"error":"unknown model"}'
    head = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(reply)
    assert asyncio.run(_exchange(head + reply)) == (1, BODY_END, "400")

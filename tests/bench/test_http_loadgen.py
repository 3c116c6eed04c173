"""The bench's HTTP load generator counts only what arrived whole.

The servers here are scripted: the harness's own client is under test, and it must see a stream cut
mid-body, an error event under 200 and a reply that closes the connection, which a healthy real
server produces only by chance. The fast fake upstream of the harness is the completed case.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from bench.harness import fake_http_upstream, loadgen

_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
_EVENT = b'data: {"text_output": "tok"}\n\n'
_CHUNK = b"%x\r\n%s\r\n" % (len(_EVENT), _EVENT)


async def _run(answer: bytes | None, op: Callable[[str], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """``op`` against a server that answers every request with ``answer`` and then closes (None: the fake upstream)."""

    async def scripted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        assert answer is not None
        writer.write(answer)
        await writer.drain()
        writer.close()

    if answer is None:
        server = await asyncio.get_running_loop().create_server(fake_http_upstream.Conn, "127.0.0.1", 0)
    else:
        server = await asyncio.start_server(scripted, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await asyncio.wait_for(op(f"127.0.0.1:{port}"), 20)
    finally:
        server.close()
        await server.wait_closed()


def _stream(target: str) -> Awaitable[dict[str, Any]]:
    return loadgen.http_stream(target, streams=2, requests=3, n=3)


def test_fake_upstream_streams_complete() -> None:
    res = asyncio.run(_run(None, _stream))
    assert (res["n_errors"], res["responses"], res["streams_completed"]) == (0, 18, 6), res


def test_cut_stream_is_an_error_and_counts_nothing() -> None:
    res = asyncio.run(_run(_HEAD + _CHUNK * 2, _stream))  # no terminator: the upstream went away mid-body
    assert res["n_errors"] == 2 and res["responses"] == 0 and res["streams_completed"] == 0, res
    assert "cut" in res["errors"][0], res


def test_error_event_under_200_is_not_a_completed_stream() -> None:
    err = b'data: {"error": "boom"}\n\n'
    res = asyncio.run(_run(_HEAD + _CHUNK * 2 + b"%x\r\n%s\r\n0\r\n\r\n" % (len(err), err), _stream))
    assert res["responses"] == 0 and res["streams_completed"] == 0 and "error event: boom" in res["errors"][0], res


def test_connection_not_kept_alive_is_an_error() -> None:
    res = asyncio.run(_run(_HEAD + _CHUNK * 3 + b"0\r\n\r\n", _stream))  # whole, then the server closes
    assert res["streams_completed"] == 2 and res["n_errors"] == 2, res  # the next request found no connection


def test_unary_counts_only_json_replies_with_outputs() -> None:
    ok = asyncio.run(_run(None, lambda t: loadgen.http_unary(t, calls=30, warmup=2)))
    assert (ok["n_errors"], ok["responses"]) == (0, 30), ok
    body = b'{"error": "x"}'
    bad = b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    res = asyncio.run(_run(bad, lambda t: loadgen.http_unary(t, calls=30, warmup=0)))
    assert res["n_errors"] == 1 and res["responses"] == 0, res

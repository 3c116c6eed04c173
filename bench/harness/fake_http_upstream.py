"""A fast fake of Triton's HTTP/1.1 port for the benchmark, in its own process.

Speaks what the HTTP scenarios need of Triton's KServe v2 HTTP endpoint, keep-alive, one request
at a time per connection (as Triton's libevhtp does; no pipelining):

``POST /v2/models/{m}/generate_stream``
    JSON body ``{"id": ..., "n": N, "pace_us": P}``: ``200 text/event-stream``, chunked, N events
    ``data: {json}\\n\\n`` (one chunk each, as Triton sends one chunk per model response), then the
    chunked terminator, which is the stream's only final signal. Without ``pace_us`` the whole
    response goes out in one write (the fastest an upstream can be); with it, each event is
    written ``pace_us`` apart on an absolute schedule and carries ``t_ns`` =
    ``time.monotonic_ns()`` at send time.
``POST /v2/models/{m}/infer``
    any body: a small KServe v2 JSON reply with ``Content-Length``.

Anything else is a 404. The request parsing is minimal on purpose (Content-Length bodies only):
the load generator is the strict side, and this process's CPU is charged to the upstream, not
to the path under test.

Run: ``python -m bench.harness.fake_http_upstream [--port P]``; prints the port on stdout, then
serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time

_SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
_TERMINATOR = b"0\r\n\r\n"
_NOT_FOUND = b'{"error":"unknown path"}'


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(rid: str, model: str, extra: str = "") -> bytes:
    body = json.dumps({"id": rid, "model_name": model, "model_version": "1", "text_output": "tok"})
    if extra:
        body = body[:-1] + ", " + extra + "}"
    return b"data: " + body.encode() + b"\n\n"


def _json_reply(status: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


class Conn(asyncio.Protocol):
    """One client connection: parse a request, answer it, then the next (keep-alive)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy: asyncio.Task[None] | None = None  # a paced response in flight: parse nothing meanwhile

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.busy is None:
            self._parse()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.busy is not None:
            self.busy.cancel()

    def _parse(self) -> None:
        while self.busy is None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            method, path, _ = head[0].split(" ", 2)
            self._answer(method, path, body)

    def _answer(self, method: str, path: str, body: bytes) -> None:
        assert self.transport is not None
        parts = path.split("/")
        model = parts[3] if len(parts) > 3 else "?"
        if method == "POST" and path.endswith("/generate_stream"):
            spec = json.loads(body or b"{}")
            rid, n, pace_us = str(spec.get("id", "")), int(spec.get("n", 3)), int(spec.get("pace_us", 0))
            if pace_us:
                self.busy = asyncio.get_running_loop().create_task(self._paced(rid, model, n, pace_us),
                                                                    name=f"paced-{rid}")  # fmt: skip
                return
            self.transport.write(_SSE_HEAD + _chunk(_event(rid, model)) * n + _TERMINATOR)
        elif method == "POST" and path.endswith("/infer"):
            reply = {"model_name": model, "model_version": "1",
                     "outputs": [{"name": "OUTPUT", "datatype": "INT32", "shape": [1, 16], "data": [0] * 16}]}  # fmt: skip
            self.transport.write(_json_reply("200 OK", json.dumps(reply).encode()))
        else:
            self.transport.write(_json_reply("404 Not Found", _NOT_FOUND))

    async def _paced(self, rid: str, model: str, n: int, pace_us: int) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.transport.write(_SSE_HEAD)
        t0 = loop.time()
        for i in range(n):
            delay = t0 + (i + 1) * pace_us / 1e6 - loop.time()  # absolute schedule: overshoot does not lower the rate
            await asyncio.sleep(delay if delay > 0 else 0)
            self.transport.write(_chunk(_event(rid, model, f'"t_ns": {time.monotonic_ns()}')))
        self.transport.write(_TERMINATOR)
        self.busy = None
        self._parse()


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Conn, "127.0.0.1", port, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.harness.fake_http_upstream")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args(argv)
    asyncio.run(serve(args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())

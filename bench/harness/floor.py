"""``python -m bench.harness.floor``: the floor under any relay written in Python, the benchmark's ``floor`` path.

A TCP relay on the proxy's event loop (uvloop) that does nothing but pass each read on: no HTTP/2
framing, no labels, no records, no writer thread. What it costs per call or response is the loop's
callbacks and the read and write syscalls, which the proxy pays too: the part of the proxy's CPU
that no change to its per-message Python can remove. The benchmark runs it beside the proxy and nginx
so that every table shows that floor measured in the same run (the targets are judged against
it: :mod:`bench.harness.summary`).

Takes the proxy's ``--listen`` and ``--upstream`` and ignores its other flags (the benchmark starts
every proxy path with the same ones). Runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import cast

from proxy.ops import eventloop
from replay.hostport import parse_hostport


class _Side(asyncio.Protocol):
    """One connection of a pair: every read goes to the other one's transport as it is."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.other: _Side | None = None
        self._early: list[bytes] = []  # read before the upstream connection existed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream transport, as in proxy/relay/shell.py
        if self._early:
            self.transport.write(b"".join(self._early))
            self._early = []

    def data_received(self, data: bytes) -> None:
        # The whole relay: the floor is what this costs.
        other = self.other
        if other is not None:
            if other.transport is None:
                other._early.append(data)
            else:
                other.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        other = self.other
        if other is not None and other.transport is not None:
            other.transport.close()


async def _serve(listen: tuple[str, int], upstream: tuple[str, int]) -> None:
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[object]] = set()

    def pair() -> _Side:
        down, up = _Side(), _Side()
        down.other, up.other = up, down
        task = loop.create_task(loop.create_connection(lambda: up, *upstream), name="floor-upstream-connect")
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return down

    server = await loop.create_server(pair, *listen)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
    for task in tasks:
        task.cancel()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.harness.floor", description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", required=True, help="HOST:PORT")
    p.add_argument("--upstream", required=True, help="HOST:PORT")
    args, _ = p.parse_known_args()
    eventloop.run(_serve(parse_hostport(args.listen, "--listen"), parse_hostport(args.upstream, "--upstream")), "auto")


if __name__ == "__main__":
    main()

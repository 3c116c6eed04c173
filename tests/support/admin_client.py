"""Admin-service test clients: a Tail stream read on a background loop, unary admin calls."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import grpc

from proxy.admin.hub import TailFilter
from proxy.admin.pb import admin_pb2 as pb
from proxy.admin.pb import admin_pb2_grpc as pb_grpc
from proxy.admin.tail import tail_request
from tests.support.loop_thread import BackgroundLoop


class TailClient:
    """A Tail stream read on the background loop into ``responses``; ``started`` is set on its first message."""

    def __init__(self, bg: BackgroundLoop, address: str, flt: TailFilter | None = None, *,
                 from_seq: int | None = None, max_queue: int = 0, read: bool = True) -> None:  # fmt: skip
        self.responses: list[Any] = []
        self.started = threading.Event()
        self.done = threading.Event()
        self.reading = asyncio.Event()
        self.error: BaseException | None = None
        self._bg = bg
        req = tail_request(flt or TailFilter(), from_seq, max_queue)

        async def run() -> None:
            if read:
                self.reading.set()
            try:
                async with grpc.aio.insecure_channel(address) as chan:
                    stream = pb_grpc.AdminServiceStub(chan).Tail(req)
                    async for resp in stream:
                        self.responses.append(resp)
                        self.started.set()
                        await self.reading.wait()  # a watcher that stops reading
            except BaseException as e:  # kept for the test to see
                self.error = e
            finally:
                self.started.set()
                self.done.set()

        self.task = asyncio.run_coroutine_threadsafe(run(), bg.loop)
        assert self.started.wait(30), "Tail stream did not start"

    def resume(self) -> None:
        """Start reading again."""
        self._bg.loop.call_soon_threadsafe(self.reading.set)

    def records(self) -> list[tuple[int, bytes]]:
        """(seq, json line) of the records received."""
        return [(r.record.seq, r.record.json) for r in self.responses if r.WhichOneof("event") == "record"]

    def dropped(self) -> list[Any]:
        """The TailDropped notices received."""
        return [r.dropped for r in self.responses if r.WhichOneof("event") == "dropped"]


def admin_call(bg: BackgroundLoop, address: str, method: str, request: Any) -> Any:
    """One unary admin call."""

    async def go() -> Any:
        async with grpc.aio.insecure_channel(address) as chan:
            return await getattr(pb_grpc.AdminServiceStub(chan), method)(request, timeout=30)

    return bg.run(go())


__all__ = ["TailClient", "admin_call", "pb"]

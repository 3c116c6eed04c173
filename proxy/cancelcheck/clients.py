"""The tritonclient drivers of ``check-cancel``: one per ``--method``, each cancelling the way that
client API does, and the :class:`Book` their callbacks fill (when each request was sent, answered, ended)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from proxy.admin.connect import ClientTls
from proxy.lab.background import LoopThread


@dataclass
class Seen:
    """What happened to one request, in monotonic seconds."""

    sent: float
    first: float | None = None
    responses: int = 0
    done: float | None = None  # final response / stream or call ended
    error: str | None = None  # status name of an error ending (e.g. CANCELLED)
    detail: str = ""


class Book:
    """Per request id: when it was sent, answered, finished (filled from client callbacks)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self.seen: dict[str, Seen] = {}

    def sent(self, rid: str) -> None:
        with self._cv:
            self.seen[rid] = Seen(sent=time.monotonic())

    def response(self, rid: str, final: bool) -> None:
        with self._cv:
            s = self.seen.get(rid)
            if s is None:
                return
            now = time.monotonic()
            if final:
                s.done = s.done or now
            else:
                s.responses += 1
                s.first = s.first or now
            self._cv.notify_all()

    def ended(self, rids: list[str], status: str | None, detail: str = "") -> None:
        with self._cv:
            now = time.monotonic()
            for rid in rids:
                s = self.seen.get(rid)
                if s is not None and s.done is None:
                    s.done = now
                    s.error = status
                    s.detail = detail
            self._cv.notify_all()

    def wait(self, cond: Callable[[], bool], timeout: float) -> bool:
        with self._cv:
            return self._cv.wait_for(cond, timeout)

    def get(self, rid: str) -> Seen:
        with self._cv:
            return self.seen[rid]


def _status_name(err: Any) -> str:
    status = err.status() if hasattr(err, "status") else None
    text = str(status or "")
    return text.removeprefix("StatusCode.") or "UNKNOWN"


class StreamClient:
    """tritonclient.grpc stream: ``stop_stream(cancel_requests=True)`` cancels the whole stream."""

    scope = "stream"

    def __init__(self, url: str, book: Book, **client_kw: Any) -> None:
        import tritonclient.grpc as grpcclient

        self.book = book
        self.rids: list[str] = []
        self.client = grpcclient.InferenceServerClient(url, **client_kw)
        self.client.start_stream(callback=self._callback)

    def _callback(self, result: Any, error: Any) -> None:
        if error is not None:
            self.book.ended(list(self.rids), _status_name(error), error.message() or "")
            return
        r = result.get_response()
        p = r.parameters.get("triton_final_response")
        final = bool(p.bool_param) if p is not None else False
        self.book.response(r.id, final and not r.outputs)
        if final and r.outputs:
            self.book.response(r.id, True)

    def send(self, model: str, inputs: list[Any], rid: str) -> None:
        self.rids.append(rid)
        self.book.sent(rid)
        self.client.async_stream_infer(model, inputs, request_id=rid, enable_empty_final_response=True)

    def done_sending(self) -> None:
        """No more requests on this client (the sync stream stays open until cancel/close)."""

    def cancel(self, rid: str) -> None:
        self.client.stop_stream(cancel_requests=True)
        # tritonclient calls back with CANCELLED from its stream thread; what it reports is the
        # client status (a missing callback stays "nothing", never an assumed CANCELLED).
        self.book.wait(lambda: self.book.get(rid).done is not None, 5.0)

    def close(self) -> None:
        try:
            self.client.stop_stream(cancel_requests=True)
        finally:
            self.client.close()


class FutureClient:
    """tritonclient.grpc ``async_infer``: ``CallContext.cancel()`` cancels one request."""

    scope = "request"

    def __init__(self, url: str, book: Book, **client_kw: Any) -> None:
        import tritonclient.grpc as grpcclient

        self.book = book
        self.client = grpcclient.InferenceServerClient(url, **client_kw)
        self.ctx: dict[str, Any] = {}

    def send(self, model: str, inputs: list[Any], rid: str) -> None:
        self.book.sent(rid)

        def done(result: Any, error: Any) -> None:
            if error is not None:
                self.book.ended([rid], _status_name(error), error.message() or "")
            else:
                self.book.response(rid, False)
                self.book.response(rid, True)

        self.ctx[rid] = self.client.async_infer(model, inputs, callback=done, request_id=rid)

    def done_sending(self) -> None:
        """No more requests on this client."""

    def cancel(self, rid: str) -> None:
        self.ctx[rid].cancel()

    def close(self) -> None:
        self.client.close()


class AioClient:
    """tritonclient.grpc.aio ``stream_infer``: the response iterator's ``cancel()`` ends the stream."""

    scope = "stream"

    def __init__(self, url: str, book: Book, **client_kw: Any) -> None:
        self.book = book
        self.url = url
        self.client_kw = client_kw
        self.rids: list[str] = []
        self.thread = LoopThread("check-cancel-aio")
        self.queue: asyncio.Queue[dict[str, Any] | None] | None = None
        self.task: asyncio.Future[None] | None = None
        self.iterator: Any = None
        self.client: Any = None

    def _run(self, coro: Any) -> Any:
        return self.thread.run(coro, 30)

    async def _requests(self) -> AsyncIterator[dict[str, Any]]:
        assert self.queue is not None
        while True:
            item = await self.queue.get()
            if item is None:
                return
            yield item

    async def _consume(self) -> None:
        try:
            async for result, error in self.iterator:
                if error is not None:
                    self.book.ended(list(self.rids), _status_name(error), str(error))
                    return
                r = result.get_response()
                self.book.response(r.id, False)
        except asyncio.CancelledError:
            self.book.ended(list(self.rids), "CANCELLED", "aio stream cancel()")
            raise
        except Exception as e:
            self.book.ended(list(self.rids), _status_name(e), str(e))
            return
        # The aio client drops enable_empty_final_response: the stream's OK end is the final.
        self.book.ended(list(self.rids), None)

    async def _start(self, model: str, inputs: list[Any], rid: str) -> None:
        import tritonclient.grpc.aio as aioclient

        self.client = aioclient.InferenceServerClient(self.url, **self.client_kw)
        self.queue = asyncio.Queue()
        await self.queue.put({"model_name": model, "inputs": inputs, "request_id": rid})
        self.iterator = self.client.stream_infer(self._requests())
        self.task = asyncio.get_running_loop().create_task(self._consume(), name="cancelcheck-aio-stream")

    def send(self, model: str, inputs: list[Any], rid: str) -> None:
        self.rids.append(rid)
        self.book.sent(rid)
        if self.queue is None:
            self._run(self._start(model, inputs, rid))
        else:
            item = {"model_name": model, "inputs": inputs, "request_id": rid}
            self.thread.call_soon(self.queue.put_nowait, item)

    def done_sending(self) -> None:
        """Half-close the stream: it then ends (OK) once the server finished every request."""
        if self.queue is not None:
            self.thread.call_soon(self.queue.put_nowait, None)

    def cancel(self, rid: str) -> None:
        async def _cancel() -> None:
            self.iterator.cancel()

        self._run(_cancel())

    def close(self) -> None:
        async def _close() -> None:
            if self.task is not None and not self.task.done():
                self.iterator.cancel()
                self.task.cancel()
                await asyncio.gather(self.task, return_exceptions=True)
            if self.client is not None:
                await self.client.close()

        try:
            self._run(_close())
        finally:
            self.thread.close(10)


Client = StreamClient | FutureClient | AioClient

#: ``--method`` -> the client that drives it.
CLIENTS: dict[str, type[StreamClient] | type[FutureClient] | type[AioClient]] = {
    "stream": StreamClient,
    "future": FutureClient,
    "aio": AioClient,
}


def open_client(method: str, url: str, book: Book, **client_kw: Any) -> Client:
    """A fresh client of ``method`` on ``url``, reporting into ``book`` (``client_kw``: :func:`tls_kw`)."""
    return CLIENTS[method](url, book, **client_kw)


def tls_kw(tls: ClientTls | None) -> dict[str, Any]:
    """tritonclient's keyword arguments (sync and aio alike) for a channel with ``tls``; none for h2c."""
    if tls is None:
        return {}
    kw: dict[str, Any] = {"creds": tls.credentials}
    if tls.options:
        # channel_args replaces tritonclient's own options (message size, keepalive): they are given
        # again as it builds them, with the certificate name to expect added.
        import tritonclient.grpc as grpcclient

        keep = grpcclient.KeepAliveOptions()
        kw["channel_args"] = [
            ("grpc.max_send_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
            ("grpc.max_receive_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
            ("grpc.keepalive_time_ms", keep.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", keep.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", keep.keepalive_permit_without_calls),
            ("grpc.http2.max_pings_without_data", keep.http2_max_pings_without_data),
            *tls.options,
        ]
    return kw

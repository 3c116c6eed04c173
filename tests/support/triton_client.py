"""Small tritonclient drivers shared by end-to-end tests (real tritonclient.grpc, sync), and tritonclient.http's
client made safe to leave to the garbage collector (:func:`http_client`)."""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from tests.support.user_client import TextAssembler


@contextlib.contextmanager
def http_client(url: str, **kwargs: Any) -> Iterator[Any]:
    """A ``tritonclient.http.InferenceServerClient``, closed once on leaving. Its ``__del__`` closes it again,
    which joins its gevent pool: run by a collection on another thread (a server's background thread, in a
    later test), that raised gevent's InvalidThreadUseError, which pytest reports as an unraisable exception.
    So once closed here, its close does nothing more."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url, **kwargs)
    try:
        yield client
    finally:
        client.close()
        client.close = _closed  # an instance attribute: what the class's __del__ calls


def _closed() -> None:
    """A tritonclient.http client's close, once it is closed."""


def bytes_input(name: str, value: bytes) -> grpcclient.InferInput:
    """A BYTES [1] input."""
    t = grpcclient.InferInput(name, [1], "BYTES")
    t.set_data_from_numpy(np.array([value], dtype=np.object_))
    return t


def int_input(name: str, value: int) -> grpcclient.InferInput:
    """An INT32 [1] input."""
    t = grpcclient.InferInput(name, [1], "INT32")
    t.set_data_from_numpy(np.array([value], dtype=np.int32))
    return t


def token_inputs(prompt: str, max_tokens: int | None = None, delay_ms: int | None = None) -> list[grpcclient.InferInput]:
    """Inputs of the `tokens`-style models (`silent` takes only PROMPT)."""
    out = [bytes_input("PROMPT", prompt.encode())]
    if max_tokens is not None:
        out.append(int_input("MAX_TOKENS", max_tokens))
    if delay_ms is not None:
        out.append(int_input("DELAY_MS", delay_ms))
    return out


def echo_inputs(data: np.ndarray, delay_ms: int | None = None) -> list[grpcclient.InferInput]:
    """Inputs of the `echo` model."""
    x = grpcclient.InferInput("INPUT", [data.size], "UINT8")
    x.set_data_from_numpy(data)
    return [x] if delay_ms is None else [x, int_input("DELAY_MS", delay_ms)]


def describe(result: Any, error: Any) -> tuple[Any, ...]:
    """What a stream callback got, as comparable data."""
    if error is not None:
        return ("error", str(error.status()), error.message())
    r = result.get_response()
    final = r.parameters["triton_final_response"].bool_param if "triton_final_response" in r.parameters else None
    texts = tuple(x.decode() for x in result.as_numpy("TEXT")) if any(o.name == "TEXT" for o in r.outputs) else ()
    return ("result", r.id, final, texts)


class StreamSession:
    """A tritonclient stream whose callback events land in a queue."""

    def __init__(self, url: str, **start_kw: Any) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.events: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.events.put(describe(result, error)), **start_kw)

    def send(self, model: str, inputs: Iterable[grpcclient.InferInput], rid: str, **kw: Any) -> None:
        """Send one request on the stream."""
        self.client.async_stream_infer(model, list(inputs), request_id=rid, **kw)

    def take(self, n: int, timeout: float = 30.0) -> list[tuple[Any, ...]]:
        """The next ``n`` callback events."""
        return [self.events.get(timeout=timeout) for _ in range(n)]

    def take_until(self, pred: Callable[[tuple[Any, ...]], bool], timeout: float = 30.0) -> list[tuple[Any, ...]]:
        """Events up to and including the first one matching ``pred``."""
        out = []
        deadline = time.monotonic() + timeout
        while True:
            e = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            out.append(e)
            if pred(e):
                return out

    def close(self, cancel_requests: bool = False) -> None:
        """Stop the stream and close the client."""
        self.client.stop_stream(cancel_requests=cancel_requests)
        self.client.close()


def per_request(events: list[tuple[Any, ...]]) -> dict[str, list[tuple[Any, ...]]]:
    """Events grouped by request id (interleaving differs run to run; per-request order does not)."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for e in events:
        out.setdefault(e[1] if e[0] == "result" else "<error>", []).append(e)
    return out


def wait_for(cond: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    """Poll ``cond`` until true, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def stream_to_its_end(url: str, rids: Iterable[str] = ("done", "a", "b"), timeout: float = 60.0) -> TextAssembler:
    """tritonclient.grpc's stream to ``url``: a `tokens` request of 100 tokens per id, read until the stream
    ends in error (the mock Triton's captured cancel), then closed; what the client saw."""
    got = TextAssembler()
    client = grpcclient.InferenceServerClient(url)
    try:
        client.start_stream(callback=got)
        for rid in rids:
            client.async_stream_infer("tokens", token_inputs(rid, 100), request_id=rid, enable_empty_final_response=True)
        got.wait_for(lambda c: c.stream_error is not None, timeout)
    finally:
        client.stop_stream()
        client.close()
    return got

"""An event loop in a thread, and the recording proxy on one, for synchronous callers (demo, tests).

tritonclient's sync API blocks, so the proxy cannot share the caller's thread: it gets a private
asyncio loop in a daemon thread (:class:`LoopThread`), and every start/stop is a bounded wait on
that loop. check-cancel's aio client and the tests' in-process servers use the same loop thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from proxy.ops.eventloop import loop_factory
from proxy.ops.server import ProxyConfig, RecordingProxy

T = TypeVar("T")


async def _cancel_leftovers() -> None:
    # Tasks of connections the clients already dropped: end them before the loop closes.
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class LoopThread:
    """One event loop running in a daemon thread (started here) until :meth:`close`.

    ``event_loop``: which loop (:mod:`proxy.ops.eventloop`); the proxy's own thread runs the one its
    config names, helper servers and clients asyncio's.
    """

    def __init__(self, name: str = "loop-thread", event_loop: str = "asyncio") -> None:
        self.loop = loop_factory(event_loop)()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._closed = False

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        """Run ``coro`` on the loop and wait (at most ``timeout`` s) for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call_soon(self, callback: Callable[..., object], *args: Any) -> None:
        """Schedule ``callback(*args)`` on the loop from any thread."""
        self.loop.call_soon_threadsafe(callback, *args)

    def close(self, timeout: float = 60.0) -> None:
        """Cancel what still runs on the loop, stop it and join the thread; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.run(_cancel_leftovers(), timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
            self.loop.close()


class ProxyThread:
    """A :class:`RecordingProxy` in front of ``upstream``, on ``127.0.0.1:<random port>``.

    Extra keyword arguments are :class:`ProxyConfig` fields (TLS, redaction, ...).
    """

    def __init__(
        self, upstream: str, capture_dir: Path, *, payload: str = "full", drain_timeout: float = 10.0, **config: Any
    ) -> None:
        self.config = ProxyConfig(
            listen="127.0.0.1:0",
            upstream=upstream,
            capture_dir=capture_dir,
            payload=payload,
            drain_timeout=drain_timeout,
            **config,
        )
        self.proxy = RecordingProxy(self.config)
        self._thread: LoopThread | None = None  # made by start(), so an unstarted proxy holds no thread
        self._started = False
        self._stopped = False

    def start(self, timeout: float = 60.0) -> ProxyThread:
        """Bind, open the capture and serve; returns self."""
        self._thread = LoopThread("e2e-proxy-loop", self.config.event_loop)
        try:
            self._thread.run(self.proxy.start(), timeout)
        except BaseException:
            # A proxy that could not start (busy port, unreachable upstream) leaves no thread behind.
            self._thread.close(timeout)
            raise
        self._started = True
        return self

    @property
    def url(self) -> str:
        """``host:port`` for tritonclient."""
        return f"127.0.0.1:{self.proxy.port}"

    @property
    def port(self) -> int:
        """The port the proxy listens on."""
        return self.proxy.port

    @property
    def capture_path(self) -> Path:
        """The (first) capture file."""
        return self.proxy.capture_path

    def stop(self, timeout: float = 60.0) -> Path:
        """Drain, close the capture, stop the loop; idempotent. Returns the capture path."""
        if self._started and not self._stopped and self._thread is not None:
            self._stopped = True
            try:
                self._thread.run(self.proxy.stop(), timeout)
            except TimeoutError:
                raise AssertionError(
                    f"RecordingProxy.stop() did not return within {timeout} s: {self._diagnose()}"
                ) from None
            finally:
                self._thread.close(timeout)
        return self.capture_path

    def _diagnose(self) -> str:
        """Where a hung stop() is stuck (read from the loop's thread, racy but only for a message)."""
        w, r = self.proxy.writer, self.proxy.relay
        facts: dict[str, object] = {}
        if w is not None:
            task = getattr(w, "_task", None)
            wake = getattr(w, "_wake", None)  # the writer task's Nap
            facts.update(
                writer_backlog=w.backlog,
                writer_closing=getattr(w, "_closing", None),
                writer_woken=wake.woken if wake is not None else None,
                writer_task_done=task.done() if task is not None else None,
            )
        if r is not None:
            facts.update(open_calls=r.open_calls, tunnels=len(r.tunnels))
        stacks = [t.get_stack(limit=3) for t in asyncio.all_tasks(self._thread.loop)] if self._thread else []
        facts["tasks"] = [f"{f.f_code.co_name}:{f.f_lineno}" for st in stacks for f in st]
        return ", ".join(f"{k}={v}" for k, v in facts.items())

    def __enter__(self) -> ProxyThread:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

"""Stopping a grpc.aio server with its handlers finished: :class:`Handlers` (serve's mock Triton and the
proxy's admin service).

grpc.aio's ``Server.stop(grace)`` returns once the C core has no call open, and the core counts a call
closed as soon as its status is sent (``context.abort``) or its client left, while the handler may
still be running its ``finally``. Whatever the handler then awaits is cut short when the program's
loop ends (``asyncio.run`` cancels what is left), and grpc 1.85's task around the handler logs that
cancellation as an ERROR with a traceback ("Exception not handled by _handle_exceptions"): on the
stderr of a clean stop. So a server's handlers say which task runs them, and stopping waits for those
tasks (up to the grace, then cancels and awaits them).
"""

from __future__ import annotations

import asyncio
from typing import Any

#: How long a cancelled handler is given before it is cancelled again (:meth:`Handlers.stop`).
CANCEL_AGAIN_S = 0.1


class Handlers:
    """The tasks running a grpc.aio server's handlers: :meth:`enter` in each handler, :meth:`stop` to stop."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()

    def enter(self) -> None:
        """Called first thing in a handler (in an async generator handler: before its first yield)."""
        task = asyncio.current_task()
        if task is not None and task not in self._running:
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    @property
    def running(self) -> int:
        """How many handler tasks have not ended."""
        return len(self._running)

    async def stop(self, server: Any, grace: float | None) -> None:
        """``server.stop(grace)``, then the handlers still running get as long again to end; those left are
        cancelled until they end (every :data:`CANCEL_AGAIN_S`), and awaited, and so is the server's stop.

        The server's stop is not awaited first: grpc's, once its grace is over, cancels each handler once and
        waits for it. A cancel can be spent before a handler's cleanup awaits: on grpc's own ``abort`` still
        running, or on one await of the cleanup (a ``finally`` that awaits). One cancel each, grpc's or this
        one, left such a handler, and the stop, waiting for ever (a test timed out now and then under load),
        so the cancel is repeated until the handler has ended."""
        stopping = asyncio.create_task(server.stop(grace), name="aioserver-stop")
        try:
            await asyncio.wait({stopping}, timeout=grace or 0.0)
            if self._running:
                _done, left = await asyncio.wait(set(self._running), timeout=grace or 0.0)
                while left:
                    for task in left:
                        task.cancel()
                    _done, left = await asyncio.wait(left, timeout=CANCEL_AGAIN_S)
        finally:
            await stopping

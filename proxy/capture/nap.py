"""A sleep that the event loop's thread can cut short: the capture writer task's tick."""

from __future__ import annotations

import asyncio


class Nap:
    """``await nap.sleep(s)`` ends after ``s`` seconds or at :meth:`wake`, whichever is first; a wake
    while nobody sleeps ends the next sleep at once. Loop thread only.

    What ``asyncio.wait_for(event.wait(), s)`` did, with a future and a timer instead: a tick's nap
    usually runs out, and wait_for's timeout cancels a task and waits for it, several loop turns a
    tick (~3 % of the proxy's samples under perf_analyzer; docs/benchmarks.md).
    """

    __slots__ = ("_sleeping", "_woken")

    def __init__(self) -> None:
        self._woken = False
        self._sleeping: asyncio.Future[None] | None = None

    @property
    def woken(self) -> bool:
        """A wake is pending (the next sleep ends at once)."""
        return self._woken

    def wake(self) -> None:
        """End the current sleep now, or the next one."""
        self._woken = True
        sleeping = self._sleeping
        if sleeping is not None and not sleeping.done():
            sleeping.set_result(None)

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` at most; a pending wake is consumed."""
        if not self._woken:
            loop = asyncio.get_running_loop()
            sleeping = self._sleeping = loop.create_future()
            timer = loop.call_later(seconds, _end, sleeping)
            try:
                await sleeping
            finally:
                timer.cancel()
                self._sleeping = None
        self._woken = False


def _end(sleeping: asyncio.Future[None]) -> None:
    if not sleeping.done():
        sleeping.set_result(None)

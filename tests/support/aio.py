"""Driving a coroutine under test as a task, and waiting on a condition, without bare sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any


@contextlib.asynccontextmanager
async def running(coro: Coroutine[Any, Any, None], name: str) -> AsyncIterator[asyncio.Task[None]]:
    """``coro`` as a task: the block drives it, then it must end by itself (30 s at most); stopped either way."""
    task = asyncio.create_task(coro, name=name)
    try:
        yield task
        await asyncio.wait_for(task, 30)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Return once ``cond()`` holds; an AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)

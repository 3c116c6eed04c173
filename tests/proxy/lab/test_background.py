"""LoopThread: the one event-loop-in-a-thread (ProxyThread, check-cancel's aio client and the tests use it)."""

from __future__ import annotations

import asyncio
import threading

from proxy.lab.background import LoopThread


def test_runs_coroutines_on_its_own_thread_and_closes_cleanly() -> None:
    """Coroutines run on the loop's thread; close cancels what still runs, joins the thread, and is idempotent."""
    lt = LoopThread("lt-test")

    async def where() -> str:
        return threading.current_thread().name

    async def forever() -> None:
        await asyncio.Event().wait()

    assert lt.run(where(), 10) == "lt-test"
    called = threading.Event()
    lt.call_soon(called.set)
    assert called.wait(10)
    task = lt.run(_spawn(forever), 10)
    lt.close(10)
    assert task.cancelled()
    assert lt.loop.is_closed()
    assert not any(t.name == "lt-test" for t in threading.enumerate())
    lt.close(10)  # a second close does nothing


async def _spawn(factory: object) -> asyncio.Task[None]:
    return asyncio.get_running_loop().create_task(factory())  # type: ignore[operator]

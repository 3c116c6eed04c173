"""LoopThread: the one event-loop-in-a-thread (ProxyThread, check-cancel's aio client and the tests use it)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from proxy.lab.background import LoopThread, ProxyThread


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


def test_a_hung_stop_is_told_by_the_writers_state(tmp_path: Path, fake_upstream: Any) -> None:
    """``ProxyThread._diagnose`` (the message of a stop() that hangs) reads the writer's live state: each fact
    has a value, none reads None because an attribute it looks for was renamed."""
    p = ProxyThread(f"127.0.0.1:{fake_upstream.port}", tmp_path, drain_timeout=2.0).start()
    try:
        facts = p._diagnose()
    finally:
        p.stop()
    for fact in ("writer_backlog=0", "writer_closing=False", "writer_woken=False", "writer_task_done=False"):
        assert fact in facts, facts

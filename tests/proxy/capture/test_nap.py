"""The writer task's tick (proxy/capture/nap.py): a sleep the loop thread can cut short."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.capture.nap import Nap


def test_a_sleep_runs_its_time_out() -> None:
    async def run() -> float:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.wait_for(Nap().sleep(0.05), 10)
        return loop.time() - t0

    assert asyncio.run(run()) >= 0.04  # the loop's clock granularity aside, not earlier


def test_a_wake_ends_the_sleep_under_way() -> None:
    async def run() -> None:
        nap = Nap()
        asyncio.get_running_loop().call_soon(nap.wake)
        await asyncio.wait_for(nap.sleep(3600), 10)
        assert not nap.woken  # consumed

    asyncio.run(run())


def test_a_cancelled_sleep_leaves_no_timer_and_the_next_wake_is_kept() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        nap = Nap()
        task = loop.create_task(nap.sleep(3600), name="test-nap")
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        assert not [h for h in getattr(loop, "_scheduled", []) if not h.cancelled()]  # asyncio's own loop
        nap.wake()
        await asyncio.wait_for(nap.sleep(3600), 10)

    asyncio.run(run())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["wake", "sleep"]), max_size=12))
def test_a_sleep_ends_at_once_exactly_when_a_wake_came_since_the_last_sleep(ops: list[str]) -> None:
    """Against a model (one pending flag): woken sleeps of an hour end at once; the others are still
    sleeping after 20 ms (and are cancelled, which must leave the nap usable)."""

    async def run() -> None:
        nap = Nap()
        pending = False
        for op in ops:
            if op == "wake":
                nap.wake()
                pending = True
                continue
            try:
                await asyncio.wait_for(nap.sleep(3600), 0.02 if not pending else 10)
                ended = True
            except TimeoutError:
                ended = False
            assert ended == pending
            pending = False
            assert nap.woken is False

    asyncio.run(run())

"""The event loop the proxy runs on: uvloop when it is installed (the default), else asyncio's own.

Why uvloop: the relay is a pair of ``asyncio.Protocol`` objects per connection, so every read and
write goes through the loop's transports; uvloop's are libuv in C: the proxy spends 14 % fewer
instructions per unary call on it than on asyncio's selector loop (docs/benchmarks.md, "Event loop").
Nothing in the relay depends on which loop runs it; the test suite runs the relay on both
(tests/proxy/relay/conftest.py).

``--event-loop asyncio`` is the escape hatch (a platform without uvloop wheels, or to rule the loop
out when debugging); ``auto`` falls back to it silently only when uvloop is not installed.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from replay.errors import UserError

T = TypeVar("T")

#: The choices of ``--event-loop``.
EVENT_LOOPS = ("auto", "uvloop", "asyncio")

#: What ``auto`` means when uvloop is importable (tests switch it to run the relay on asyncio).
PREFERRED = "uvloop"


def resolve(kind: str) -> str:
    """``uvloop`` or ``asyncio``: the loop ``kind`` (one of :data:`EVENT_LOOPS`) stands for here."""
    if kind not in EVENT_LOOPS:
        raise UserError(f"--event-loop {kind!r}: choose one of {', '.join(EVENT_LOOPS)}")
    available = importlib.util.find_spec("uvloop") is not None
    if kind == "uvloop" and not available:
        raise UserError("--event-loop uvloop: uvloop is not installed here (pip install uvloop, or --event-loop asyncio)")
    if kind == "auto":
        return PREFERRED if available else "asyncio"
    return kind


def loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """A function making a new loop of ``kind`` (resolved as :func:`resolve` does)."""
    if resolve(kind) == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def run(coro: Coroutine[Any, Any, T], kind: str) -> T:
    """``asyncio.run(coro)`` on a loop of ``kind``."""
    with asyncio.Runner(loop_factory=loop_factory(kind)) as runner:
        return runner.run(coro)


def running_loop_name() -> str:
    """``uvloop`` or ``asyncio``: the loop this coroutine runs on (recorded in ``capture_start``)."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"

"""Every loopback relay test runs twice: on uvloop (the proxy's default loop) and on asyncio's own.

The relay is plain ``asyncio.Protocol`` code and must not depend on the loop under it; the two
differ in when reads are delivered around ``pause_reading`` and in their transport classes, which
is where a relay bug would hide (one did: the reads held for "connect" in proxy/relay/shell.py).
The in-process servers of a test (fake Triton, stubs) share the proxy's loop (``bg``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxy.ops import eventloop
from tests.support.loop_thread import BackgroundLoop


@pytest.fixture(params=["uvloop", "asyncio"])
def relay_event_loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The loop of this run; also what ``--event-loop auto`` means for proxies started in it."""
    monkeypatch.setattr(eventloop, "PREFERRED", request.param)
    return str(request.param)


@pytest.fixture
def bg(relay_event_loop: str) -> Iterator[BackgroundLoop]:
    """The background loop of the in-process proxy and servers, of this run's kind."""
    loop = BackgroundLoop(relay_event_loop)
    yield loop
    loop.close()

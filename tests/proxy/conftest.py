"""Loopback fixtures: the proxy and a fake in-memory Triton on a background event loop."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.ops.server import ProxyConfig, RecordingProxy
from tests.support.fake_triton import start_fake
from tests.support.loop_thread import BackgroundLoop


@pytest.fixture
def listening() -> Iterator[int]:
    """A port something listens on: plays an upstream for the proxy's start-up check (it only connects), or a
    busy listen port."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


@pytest.fixture
def bg(loop: BackgroundLoop) -> BackgroundLoop:
    """A background event loop for in-process servers (tests/conftest.py's ``loop``, by the name these tests use)."""
    return loop


@pytest.fixture
def fake_upstream(bg: BackgroundLoop) -> Iterator[Any]:
    """The fake Triton (see tests/support/fake_triton.py); ``.port`` and ``.servicer``."""
    server, port, servicer = bg.run(start_fake(0, with_servicer=True))
    server.port = port
    server.servicer = servicer
    yield server
    bg.run(server.stop(None))


@pytest.fixture
def start_proxy(bg: BackgroundLoop, tmp_path: Path) -> Iterator[Callable[..., RecordingProxy]]:
    """Start a recording proxy in front of an upstream; stopped (and its capture closed) at teardown."""
    started: list[RecordingProxy] = []

    def _start(upstream: str, **kw: Any) -> RecordingProxy:
        kw.setdefault("capture_dir", tmp_path / "captures")
        kw.setdefault("drain_timeout", 2.0)
        p = RecordingProxy(ProxyConfig(listen="127.0.0.1:0", upstream=upstream, **kw))
        bg.run(p.start())
        started.append(p)
        return p

    yield _start
    for p in started:
        if p.relay is not None and not getattr(p, "_stopped", False):
            bg.run(p.stop())

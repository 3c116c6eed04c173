"""Fixtures every test tier shares."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
import structlog

from tests.support.loop_thread import BackgroundLoop


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """Each test starts with structlog's defaults and uncached module loggers.

    A test that runs a command in-process (``main(["record", ...])``) configures structlog with
    ``cache_logger_on_first_use`` (the production setting): every module logger used afterwards
    keeps that configuration for good, and a later test's ``structlog.testing.capture_logs()``
    would see nothing. Resetting after each test keeps tests independent of their order.
    """
    yield
    structlog.reset_defaults()
    for name, module in list(sys.modules.items()):
        if name.split(".", 1)[0] not in ("proxy", "replay") or module is None:
            continue
        for value in vars(module).values():
            if isinstance(value, structlog._config.BoundLoggerLazyProxy):
                vars(value).pop("bind", None)  # cached on first use: back to lazy


@pytest.fixture
def loop() -> Iterator[BackgroundLoop]:
    """An event loop thread (for in-process servers: a scripted peer, a MockTriton, the proxy); closed at teardown."""
    bg = BackgroundLoop()
    yield bg
    bg.close()

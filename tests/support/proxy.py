"""Helpers for a RecordingProxy living on a background event loop."""

from __future__ import annotations

import asyncio

from proxy.ops.server import RecordingProxy


def stop_proxy(proxy: RecordingProxy, timeout: float = 30.0) -> None:
    """Stop the proxy (drain, close the capture) from a test thread."""
    asyncio.run_coroutine_threadsafe(proxy.stop(), proxy.loop).result(timeout)

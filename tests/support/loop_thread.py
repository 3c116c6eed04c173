"""An event loop in a background thread, so sync tritonclient code can talk to in-process servers.

The one definition is :class:`proxy.lab.background.LoopThread`; tests name theirs ``test-loop``.
"""

from __future__ import annotations

from proxy.lab.background import LoopThread


class BackgroundLoop(LoopThread):
    """Owns one event loop running in a daemon thread until :meth:`close`."""

    def __init__(self, event_loop: str = "asyncio") -> None:
        super().__init__("test-loop", event_loop)

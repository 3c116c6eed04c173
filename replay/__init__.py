"""triton-tap's offline side: the capture format and everything that reads captures.

Public API (imported lazily, so that the proxy's ``import replay.capture.events`` stays light):

* :func:`track` - per-request outcomes of a capture (what ``triton-tap replay check`` reports);
* :func:`feed_stream` / :func:`feed_stream_aio` - deliver a captured stream to your own
  tritonclient-style callback or async loop, as ``tritonclient.grpc`` would;
* :func:`feed_events` / :func:`feed_events_aio` - deliver a captured HTTP ``generate_stream`` (SSE) call's
  events to your own ``callback(event, error)`` or async loop;
* :func:`read_capture` - stream ``(seq, record)`` from capture files and directories.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# First: which of our modules run compiled is decided before any of them is imported.
from replay import compiled as _compiled  # noqa: F401

if TYPE_CHECKING:
    from replay.capture.reader import read_capture
    from replay.machine.tracker import track
    from replay.tools.feed import feed_events, feed_events_aio, feed_stream, feed_stream_aio

__all__ = ["feed_events", "feed_events_aio", "feed_stream", "feed_stream_aio", "read_capture", "track"]

_WHERE = {
    "track": "replay.machine.tracker",
    "feed_stream": "replay.tools.feed",
    "feed_events": "replay.tools.feed",
    "feed_events_aio": "replay.tools.feed",
    "feed_stream_aio": "replay.tools.feed",
    "read_capture": "replay.capture.reader",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'replay' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

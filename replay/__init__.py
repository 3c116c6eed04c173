"""triton-tap's offline side: the capture format and everything that reads captures.

Public API (imported lazily, so that the proxy's ``import replay.events`` stays light):

* :func:`track` - per-request outcomes of a capture (what ``triton-tap replay check`` reports);
* :func:`feed_stream` / :func:`feed_stream_aio` - deliver a captured stream to your own
  tritonclient-style callback or async loop, as ``tritonclient.grpc`` would;
* :func:`read_capture` - stream ``(seq, record)`` from capture files and directories.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replay.feed import feed_stream, feed_stream_aio
    from replay.reader import read_capture
    from replay.requests import track

__all__ = ["feed_stream", "feed_stream_aio", "read_capture", "track"]

_WHERE = {
    "track": "replay.requests",
    "feed_stream": "replay.feed",
    "feed_stream_aio": "replay.feed",
    "read_capture": "replay.reader",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'replay' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

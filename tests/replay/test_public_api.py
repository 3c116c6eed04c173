"""The package's public API: names, and that they stay functions whatever was imported before."""

from __future__ import annotations

import importlib
import inspect


def test_public_names_are_the_documented_callables() -> None:
    """`replay.track/feed_stream/feed_stream_aio/feed_events/feed_events_aio/read_capture` are functions, even after every submodule is imported."""
    for sub in ("capture.reader", "machine.tracker", "tools.feed", "cli.check", "cli.main"):
        importlib.import_module(f"replay.{sub}")
    import replay

    assert sorted(replay.__all__) == [
        "feed_events", "feed_events_aio", "feed_stream", "feed_stream_aio", "read_capture", "track"]  # fmt: skip
    for name in replay.__all__:
        assert inspect.isfunction(getattr(replay, name)), name
    assert inspect.isasyncgenfunction(replay.feed_stream_aio)
    assert inspect.isasyncgenfunction(replay.feed_events_aio)


"""Driving a real capture writer (thread and all) in tests, one writer batch per list of records."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from proxy.capture.options import WriterOptions
from proxy.capture.writer import CaptureWriter
from replay.capture import events as ev


async def write_batches(opts: WriterOptions, start: ev.CaptureStarted, batches: list[list[Any]],
                        tap: Callable[[int, list[Any], list[bytes]], None] | None = None) -> CaptureWriter:  # fmt: skip
    """Open a writer, emit each list as one batch (the next list only once the writer took the last), close it.

    ``tap``: set as the writer's tap (``record --admin``'s Tail feed) before it opens.
    """
    w = CaptureWriter(opts, start)
    w.tap = tap
    w.open()
    for batch in batches:
        for r in batch:
            w.emit(r)
        while w.backlog:  # batch boundaries matter to these tests: let the writer task take this one whole
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
    await w.close()
    return w

"""Driving a real capture writer (thread and all) in tests, one writer batch per list of records."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.capture.options import WriterOptions
from proxy.capture.writer import CaptureWriter
from replay.capture import events as ev


async def write_batches(opts: WriterOptions, start: ev.CaptureStarted, batches: list[list[Any]]) -> CaptureWriter:
    """Open a writer, emit each list as one batch (the next list only once the writer took the last), close it."""
    w = CaptureWriter(opts, start)
    w.open()
    for batch in batches:
        for r in batch:
            w.emit(r)
        while w.backlog:  # batch boundaries matter to these tests: let the writer task take this one whole
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
    await w.close()
    return w

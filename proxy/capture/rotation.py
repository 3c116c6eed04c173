"""A requested rotation (admin ``Rotate``, SIGHUP) as an item of the capture writer's own queue.

Queued between records, it is done by the writer thread exactly where it stands: every record
emitted before the request is written to the file it closes, every record after it to the next.
The order is the queue's, so no flush has to race the rotation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from proxy.capture.gaps import Gap


class Rotation:
    """One requested rotation: made on the loop thread, done by the writer thread, settled on the loop thread."""

    __slots__ = ("done", "error", "queue_gap", "reopen", "result")

    def __init__(self, reopen: str | None, queue_gap: Gap, done: asyncio.Future[tuple[Path, Path]] | None) -> None:
        #: None: admin ``Rotate`` (``capture_end`` reason ``rotate``); else a reopen and why (``signal``).
        self.reopen = reopen
        #: Records the queue dropped before the request: their gap record belongs before the rotation.
        self.queue_gap = queue_gap
        self.done = done
        #: Set by the writer thread: (closed file, new file), or what went wrong.
        self.result: tuple[Path, Path] | None = None
        self.error: BaseException | None = None

    def settle(self) -> None:
        """Tell the requester (loop thread, once the writer thread is past this rotation or has failed)."""
        done = self.done
        if done is None or done.done():
            return
        if self.result is not None:
            done.set_result(self.result)
        else:
            done.set_exception(self.error or RuntimeError("the capture writer stopped before the rotation"))


def segments(items: list[Any]) -> Iterator[tuple[list[Any], Rotation | None]]:
    """``items`` cut at each rotation: (records before it, the rotation), ..., (records after the last, None)."""
    start = 0
    for i, item in enumerate(items):
        if type(item) is Rotation:
            yield items[start:i], item
            start = i + 1
    yield items[start:], None

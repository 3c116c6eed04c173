"""A rich progress line for long reads of captures (shown only when stderr is a terminal)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, TextIO, TypeVar

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")

#: Refresh every this many records: a rich update per record would cost more than decoding it.
EVERY = 5000


def with_progress(items: Iterable[T], err: TextIO, what: str = "reading captures") -> Iterator[T]:
    """Yield ``items`` unchanged while a transient ``N records`` counter runs on ``err`` (if a TTY)."""
    if not _maybe_terminal(err):
        return iter(items)  # (and rich, ~35 ms of start-up, is not even imported)
    from rich.console import Console

    console = Console(file=err)
    if not console.is_terminal:
        return iter(items)  # not wrapped: a generator layer costs per record on million-record reads
    return _counted(items, console, what)


def _maybe_terminal(err: TextIO) -> bool:
    """What rich could call a terminal: a TTY, or one of its environment overrides set."""
    isatty = getattr(err, "isatty", None)
    return bool(isatty is not None and isatty()) or any(k in os.environ for k in ("FORCE_TERMINAL", "TTY_COMPATIBLE"))


def _counted(items: Iterable[T], console: Console, what: str) -> Iterator[T]:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn  # (only on a terminal)

    with Progress(SpinnerColumn(), TextColumn(f"{what}: {{task.completed:,}} records"), TimeElapsedColumn(),
                  console=console, transient=True) as progress:  # fmt: skip
        task = progress.add_task(what, total=None)
        n = 0
        for item in items:
            yield item
            n += 1
            if n % EVERY == 0:
                progress.update(task, completed=n)

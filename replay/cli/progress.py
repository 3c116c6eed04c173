"""A rich progress line for long reads of captures (shown only when stderr is a terminal)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

T = TypeVar("T")

#: Refresh every this many records: a rich update per record would cost more than decoding it.
EVERY = 5000


def with_progress(items: Iterable[T], err: TextIO, what: str = "reading captures") -> Iterator[T]:
    """Yield ``items`` unchanged while a transient ``N records`` counter runs on ``err`` (if a TTY)."""
    console = Console(file=err)
    if not console.is_terminal:
        return iter(items)  # not wrapped: a generator layer costs per record on million-record reads
    return _counted(items, console, what)


def _counted(items: Iterable[T], console: Console, what: str) -> Iterator[T]:
    with Progress(SpinnerColumn(), TextColumn(f"{what}: {{task.completed:,}} records"), TimeElapsedColumn(),
                  console=console, transient=True) as progress:  # fmt: skip
        task = progress.add_task(what, total=None)
        n = 0
        for item in items:
            yield item
            n += 1
            if n % EVERY == 0:
                progress.update(task, completed=n)

"""The rich Console of the commands' tables (its own module: a command printing JSON never loads rich)."""

from __future__ import annotations

from rich.console import Console


class QuietConsole(Console):
    """A rich Console that reports a closed pipe as :class:`BrokenPipeError` instead of exiting 1."""

    def on_broken_pipe(self) -> None:
        """Stop printing and let :func:`replay.cli.output.write_result` decide the exit code."""
        self.quiet = True
        raise BrokenPipeError

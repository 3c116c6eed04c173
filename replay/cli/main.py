"""The replay subcommands of ``triton-tap`` (also ``python -m replay``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from replay.cli.commands import add_diff_command, add_serve_command
from replay.errors import CaptureError, TritonTapError, UserError
from replay.tools.check import add_check_command
from replay.tools.report.command import add_report_command

EXIT_USAGE = 2
EXIT_FAILURE = 1


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def add_replay_commands(sub: Any) -> None:
    """Register ``replay ...``, ``serve`` and ``diff`` under the ``triton-tap`` command tree."""
    rp = sub.add_parser("replay", help="offline commands on captures")
    rsub = rp.add_subparsers(dest="replay_command", required=True, parser_class=type(rp))
    add_check_command(rsub)
    add_serve_command(sub)
    add_diff_command(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m replay``: the same commands as ``triton-tap replay``."""
    parser = _Parser(prog="python -m replay", description="Offline commands on triton-tap captures.")
    sub = parser.add_subparsers(dest="replay_command", required=True, parser_class=_Parser)
    add_check_command(sub)
    add_report_command(sub)
    add_serve_command(sub)
    add_diff_command(sub)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except TritonTapError as e:
        # Unreadable input and impossible requests are the user's to fix: exit 2, like a bad flag.
        print(f"triton-tap: error: {e}", file=sys.stderr)
        return EXIT_USAGE if isinstance(e, CaptureError | UserError) else EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `check ... | head`: the reader went away; not an error of ours.
        return 0
    return code

"""The replay subcommands of ``triton-tap`` (also ``python -m replay``).

Registering a command imports only its arguments' module; the tool itself (and rich, grpc,
tritonclient) is imported when the command runs, so ``--help`` stays fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from replay.cli.base import Parser, run_command, run_guarded
from replay.cli.check import add_check_command
from replay.cli.diff import add_diff_command
from replay.cli.export import add_export_command
from replay.cli.report import add_report_command
from replay.cli.serve import add_serve_command
from replay.cli.upgrade import add_upgrade_command


def add_replay_commands(sub: Any) -> Any:
    """Register ``replay ...``, ``report``, ``serve``, ``diff`` and ``export`` under the ``triton-tap`` command tree.

    Returns the ``replay`` subparser set, so the live side can add commands that need the proxy
    (``replay send``) without replay importing it.
    """
    rp = sub.add_parser("replay", help="offline commands on captures")
    rsub = rp.add_subparsers(dest="replay_command", required=True, parser_class=type(rp))
    add_check_command(rsub)
    add_upgrade_command(rsub)
    add_report_command(sub)
    add_serve_command(sub)
    add_diff_command(sub)
    add_export_command(sub)
    return rsub


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m replay``: the same commands as ``triton-tap replay``."""
    parser = Parser(prog="python -m replay", description="Offline commands on triton-tap captures.")
    sub = parser.add_subparsers(dest="replay_command", required=True, parser_class=Parser)
    add_check_command(sub)
    add_upgrade_command(sub)
    add_report_command(sub)
    add_serve_command(sub)
    add_diff_command(sub)
    add_export_command(sub)
    args = parser.parse_args(argv)
    return run_guarded(lambda: run_command(args))

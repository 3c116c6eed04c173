"""``triton-tap replay check``: its arguments (the check itself is :mod:`replay.tools.check`)."""

from __future__ import annotations

import argparse
from typing import Any


def _rows(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0: {text!r}")
    return int(text)


def add_check_command(sub: Any) -> None:
    """Register ``check`` on a subparser set."""
    p = sub.add_parser(
        "check",
        help="per-request outcomes and protocol violations of a capture",
        description="Per-request outcomes and protocol violations of a capture. Exit 0: no violation; "
        "1: violations or unattributable responses; 2: unreadable capture.",
    )
    p.add_argument("capture", nargs="+", metavar="CAPTURE", help="capture files (.jsonl, .jsonl.gz) and/or directories")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    p.add_argument(
        "--rows",
        type=_rows,
        default=100,
        metavar="N",
        help="table: beyond N requests show only those needing attention (0: all; default %(default)s)",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from replay.tools.check import check

    return check(args.capture, as_json=args.json, rows=args.rows)

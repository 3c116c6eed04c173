"""``triton-tap report``: its arguments (the page is built by :mod:`replay.tools.report`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_report_command(sub: Any) -> None:
    """Register ``report`` on a subparser set."""
    p = sub.add_parser(
        "report",
        help="write a self-contained HTML timeline report of captures",
        description="One self-contained HTML file (no network needed to view it): a timeline with one lane per "
        "request, responses, half-closes, cancels with their in-flight sets, deadlines and errors; a per-request "
        "table and a per-model summary.",
    )
    p.add_argument("capture", nargs="+", metavar="CAPTURE", help="capture files (.jsonl, .jsonl.gz) and/or directories")
    p.add_argument("-o", "--output", type=Path, default=Path("report.html"), help="the HTML file to write (default %(default)s)")
    p.add_argument("--title", default=None, help="page title (default: the capture names)")

    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from replay.tools.report.command import build_report

    build_report(args.capture, args.output, title=args.title)
    return 0

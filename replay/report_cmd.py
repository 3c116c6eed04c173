"""``triton-tap report``: read captures (with progress), build the model, write the HTML page."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

import orjson

from replay.errors import UserError
from replay.progress import with_progress
from replay.reader import read_capture
from replay.report import ReportBuilder


def _template() -> str:
    return resources.files("replay").joinpath("report_template.html").read_text(encoding="utf-8")


def render_html(model: dict[str, Any]) -> bytes:
    """The self-contained page: the template with the model embedded as JSON (no network needed)."""
    data = orjson.dumps(model)
    # Inside <script> "</script" or "<!--" could end or confuse the element; "<" occurs in JSON only
    # inside strings, where its escaped form means the same.
    data = data.replace(b"<", b"\\u003c")
    page = _template().encode("utf-8")
    title = str(model.get("title", "triton-tap report")).replace("&", "&amp;").replace("<", "&lt;")
    return page.replace(b"__TITLE__", title.encode("utf-8")).replace(b"__REPORT_DATA__", data)


def build_report(paths: Sequence[str], output: Path, *, err: TextIO | None = None, title: str | None = None) -> dict[str, Any]:
    """Read ``paths``, write the page to ``output``; returns the model (raises CaptureError/UserError)."""
    err = err or sys.stderr
    reader = read_capture(list(paths))
    builder = ReportBuilder()
    for seq, record in with_progress(reader, err):
        builder.feed(seq, record)
    for w in reader.warnings:
        print(f"triton-tap: warning: {w}", file=err)
    model = builder.finish(files=[str(p) for p in reader.files], gaps=reader.gaps, warnings=reader.warnings,
                           title=title or f"triton-tap report: {', '.join(os.path.basename(p) for p in paths)}")  # fmt: skip
    page = render_html(model)
    try:
        output.write_bytes(page)
    except OSError as e:
        raise UserError(f"cannot write {str(output)!r}: {e.strerror or e}") from None
    size = f"{len(page) / 1e6:.1f} MB" if len(page) >= 1e6 else f"{len(page) / 1e3:.0f} kB"
    print(f"wrote {output} ({size}): {model['records']} records, "
          f"{len(model['lanes']['call'])} lanes, {len(model['ticks']['t'])} response ticks", file=err)  # fmt: skip
    return model


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

    def run(args: argparse.Namespace) -> int:
        build_report(args.capture, args.output, title=args.title)
        return 0

    p.set_defaults(func=run)

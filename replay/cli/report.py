"""``triton-tap report``: read captures (with progress), build the model, write the HTML page atomically."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from replay.capture import naming
from replay.cli.base import add_capture_argument, gc_paused, same_file
from replay.errors import UserError


def _default_title(paths: Sequence[str]) -> str:
    # `caps/meta-A/` names the directory meta-A, not "" (os.path.basename of a trailing slash).
    names = [Path(p).name or str(p) for p in paths]
    return f"triton-tap report: {', '.join(names)}"


def _check_output(paths: Sequence[str], output: Path) -> None:
    """Refuse to write the page over a capture (a typo in -o must not destroy evidence)."""
    if naming.holds_capture(output.name):
        raise UserError(f"-o {str(output)!r} looks like a capture file (*.jsonl, *.jsonl.gz, *.jsonl.zst, or a "
                        "--payload full side file *.payload): choose an .html name")  # fmt: skip
    for p in paths:
        if same_file(output, Path(p)):
            raise UserError(f"-o {str(output)!r} is one of the input captures: choose another output file")


def _write_atomically(output: Path, page: bytes) -> None:
    """Write ``page`` next to ``output`` and rename it over: a failed write leaves no half page."""
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(page)
        os.replace(tmp, output)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def build_report(paths: Sequence[str], output: Path, *, err: TextIO | None = None, title: str | None = None) -> dict[str, Any]:
    """Read ``paths``, write the page to ``output``; returns the model (raises CaptureError/UserError)."""
    err = err or sys.stderr
    _check_output(paths, output)
    # Imported here, not at the top: registering the command (every CLI start) must not load numpy.
    from replay.capture.reader import read_capture
    from replay.cli.progress import with_progress
    from replay.tools.report.model import ReportBuilder
    from replay.tools.report.overview import CUT
    from replay.tools.report.page import render_html

    reader = read_capture(list(paths), payload=False)  # (the message bytes of --payload full: not read here)
    builder = ReportBuilder()
    builder.tracker.watch(reader)
    feed = builder.feed
    with gc_paused():
        for seq, record in with_progress(reader, err):
            feed(seq, record)
    for w in reader.warnings:
        print(f"triton-tap: warning: {w}", file=err)
    # Paused here too: finish makes ~10 objects a request and the collector would walk all that the
    # builder holds each time (~0.3 s of a 1M-record report's ~1.8 s finish, issue 19).
    with gc_paused():
        model = builder.finish(files=[str(p) for p in reader.files], gaps=reader.gaps, warnings=reader.warnings,
                               title=title or _default_title(paths))  # fmt: skip
        page = render_html(model)
    try:
        _write_atomically(output, page)
    except OSError as e:
        raise UserError(f"cannot write {str(output)!r}: {e.strerror or e}") from None
    size = f"{len(page) / 1e6:.1f} MB" if len(page) >= 1e6 else f"{len(page) / 1e3:.0f} kB"
    cut = sum(1 for f in model["ticks"]["flags"] if f & CUT)
    print(f"wrote {output} ({size}): {model['records']} records, "
          f"{len(model['lanes']['call'])} lanes, {len(model['ticks']['t']) - cut} response ticks"
          + (f" (and {cut} of cut events, no responses)" if cut else ""), file=err)  # fmt: skip
    return model


def add_report_command(sub: Any) -> None:
    """Register ``report`` on a subparser set."""
    p = sub.add_parser(
        "report",
        help="write a self-contained HTML timeline report of captures",
        description="One self-contained HTML file (no network needed to view it): an overview first (requests, "
        "responses, errors and cancels over time, latency percentiles, in-flight requests and histograms, "
        "filterable by model/method/outcome); then, for the window chosen on it, a timeline with one lane per "
        "request, responses, half-closes, cancels with their in-flight sets, deadlines and errors; a per-request "
        "table and a per-model summary.",
    )
    add_capture_argument(p, skip_damaged=True)
    p.add_argument("-o", "--output", type=Path, default=Path("report.html"), help="the HTML file to write (default %(default)s)")
    p.add_argument("--title", default=None, help="page title (default: the capture names)")

    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    build_report(args.capture, args.output, title=args.title)
    return 0

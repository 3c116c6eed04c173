"""``replay check``: per-request outcomes and protocol violations of a capture, for people or machines.

Exit codes reflect the server, not the client's choice of ids (docs/outcomes.md): 0 the capture
is readable and shows no violation, 1 it shows violations (or responses that no request sent on
the call can explain), 2 it is unreadable (raised as :class:`~replay.errors.CaptureError`, which
the CLI prints as one line). Outcomes such as ``cancelled`` or ``error`` are facts about the
traffic, not violations; requests known only for their id group (several in flight with id ``""``)
are a warning in the summary; holes in the capture are reported but do not change the exit code
(they are the recorder's problem, not the client's), and requests open where records were lost are
``unknown``, their later violations listed and not counted (docs/outcomes.md). Connections the proxy closed for breaking
HTTP/2 (``protocol_error`` records) are listed; the upstream breaking it is the server's doing
(exit 1), a client breaking it (e.g. HTTP/1.1 sent to the port) is not.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from replay.cli.base import add_capture_argument, gc_paused
from replay.errors import EXIT_FINDINGS, EXIT_OK

if TYPE_CHECKING:
    from replay.capture.reader import CaptureReader
    from replay.cli.checkjson import SpillSink
    from replay.cli.checktable import TableSink


def render_marks(marks: list[dict[str, Any]], out: TextIO) -> None:
    """One line per `mark` record (seq, UTC time, note, labels)."""
    for m in marks:
        # Whole seconds in integers: t_ns / 1e9 is a float that can round up to the next second.
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(m["t_ns"] // 1_000_000_000))
        labels = "".join(f" {k}={v}" for k, v in sorted(m["labels"].items()))
        out.write(f"mark seq {m['seq']} at {when}Z: {m['note']}{labels}\n")


def check(paths: Sequence[str], *, as_json: bool = False, rows: int = 100,
          out: TextIO | None = None, err: TextIO | None = None) -> int:  # fmt: skip
    """Run ``replay check`` on ``paths``; returns the exit code (raises CaptureError when unreadable)."""
    # Imported here: registering the command (every start of the CLI, any command) stays light,
    # and --json does not load the table's rich.
    from replay.capture.reader import read_capture

    out = out or sys.stdout
    err = err or sys.stderr
    reader = read_capture(list(paths), payload=False)  # (the message bytes of --payload full: not read here)
    # Flat memory on any capture size: --json streams the requests through a temporary file, the
    # table keeps only the rows it shows (and counts the rest).
    if as_json:
        from replay.cli.checkjson import SpillSink

        spill = SpillSink()
        try:
            return _check(reader, spill, out, err)
        finally:
            spill.close()
    from replay.cli.checktable import TableSink

    return _check(reader, TableSink(rows), out, err)


def _check(reader: CaptureReader, sink: SpillSink | TableSink, out: TextIO, err: TextIO) -> int:
    from replay.capture import events as ev
    from replay.cli.checkjson import SpillSink, write_json
    from replay.cli.output import write_result
    from replay.cli.progress import with_progress
    from replay.machine.tracker import Tracker

    tracker = Tracker(sink=sink)
    tracker.watch(reader)  # what was open where records were lost is not judged as if whole
    marks: list[dict[str, Any]] = []
    feed = tracker.feed
    with gc_paused():
        for seq, record in with_progress(reader, err):
            if type(record) is ev.MarkRecorded:  # operators' marks (admin Mark) are shown, not tracked
                marks.append({"seq": seq, "t_ns": record.t_ns, "note": record.note, "labels": record.labels})
            feed(seq, record)
    result = tracker.finish(reader.gaps, reader.warnings)
    for w in result.warnings:
        print(f"triton-tap: warning: {w}", file=err)
    if isinstance(sink, SpillSink):
        write_result(out, lambda: write_json(out, sink, result, marks))
    else:
        from replay.cli.checktable import render_human

        def human() -> None:
            render_human(result, out, shown=sink.shown(), hidden=sink.hidden, tally=sink.tally)
            render_marks(marks, out)

        write_result(out, human)
    # What TrackResult.ok says of all requests (the sink has them); a reader that stopped early
    # (`| head`) changes nothing about what was found.
    return EXIT_OK if result.clean(sum(sink.tally.violations.values())) else EXIT_FINDINGS


def _rows(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0: {text!r}")
    return int(text)


def add_check_command(sub: Any) -> None:
    """Register ``check`` on a subparser set."""
    p = sub.add_parser(
        "check",
        help="per-request outcomes and protocol violations of a capture",
        description="Per-request outcomes and protocol violations of a capture, and the connections closed "
        "for breaking HTTP/2 or HTTP/1.x. Exit 0: no violation (requests known only for their id group are a "
        "warning, a client that broke HTTP is listed); 1: violations, unattributable responses or an upstream "
        "that broke HTTP; 2: unreadable capture (a damaged line or compressed frame: see --skip-damaged).",
    )
    add_capture_argument(p, skip_damaged=True)
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    p.add_argument(
        "--rows",
        type=_rows,
        default=100,
        metavar="N",
        help="table: beyond N requests show only those needing attention, the first N in capture order "
        "(0: all, every one held in memory; default %(default)s)",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    return check(args.capture, as_json=args.json, rows=args.rows)

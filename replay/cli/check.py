"""``replay check``: per-request outcomes and protocol violations of a capture, for people or machines.

Exit codes reflect the server, not the client's choice of ids (docs/outcomes.md): 0 the capture
is readable and shows no violation, 1 it shows violations (or responses that no request sent on
the call can explain), 2 it is unreadable (raised as :class:`~replay.errors.CaptureError`, which
the CLI prints as one line). Outcomes such as ``cancelled`` or ``error`` are facts about the
traffic, not violations; requests known only for their id group (several in flight with id ``""``)
are a warning in the summary; holes in the capture are reported but do not change the exit code
(they are the recorder's problem, not the client's).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from rich.table import Table

from replay.capture import events as ev
from replay.capture.reader import CaptureReader, read_capture
from replay.cli.base import add_capture_argument
from replay.cli.checkjson import SpillSink, write_json
from replay.cli.output import QuietConsole, write_result
from replay.cli.progress import with_progress
from replay.errors import EXIT_FINDINGS, EXIT_OK
from replay.machine.outcomes import RequestOutcome, TrackResult
from replay.machine.tracker import Tracker

_STYLE = {
    "completed": "green",
    "cancelled": "yellow",
    "deadline": "yellow",
    "disconnected": "red",
    "interrupted": "red",
    "error": "red",
    "unconfirmed": "cyan",
    "incomplete": "magenta",
    "group": "cyan",
}


def exit_code(result: TrackResult) -> int:
    """0 when the capture shows no violation, else 1."""
    return EXIT_OK if result.ok else EXIT_FINDINGS


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _interesting(r: RequestOutcome) -> bool:
    return bool(r.violations) or r.outcome != "completed"


def render_human(result: TrackResult, out: TextIO, *, rows: int) -> None:
    """The rich table of requests, unattributable responses, holes and a summary."""
    console = QuietConsole(file=out, width=None if out.isatty() else 160, highlight=False)
    shown: Sequence[RequestOutcome] = result.requests
    hidden = 0
    if rows and len(shown) > rows:
        # Too many to read: keep what needs attention, in capture order.
        picked = [r for r in shown if _interesting(r)][:rows]
        hidden = len(shown) - len(picked)
        shown = picked
    table = Table(title="requests", title_justify="left")
    for col, justify in (
        ("call", "left"), ("request id", "left"), ("model", "left"), ("outcome", "left"),
        ("responses (text)", "right"), ("final", "left"), ("first ms", "right"), ("ms", "right"),
        ("violations", "left"),
    ):  # fmt: skip
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in shown:
        rid = "(none)" if r.request_id is None else repr(r.request_id) if r.request_id == "" else r.request_id
        if r.occurrence:
            rid += f" #{r.occurrence + 1}"
        style = _STYLE.get(r.outcome, "")
        outcome = f"[{style}]{r.outcome}[/]" if style else r.outcome
        if r.error and r.outcome != "completed":
            outcome += f" ({r.error})"
        if r.notes:
            outcome += " (note: " + ", ".join(r.notes) + ")"  # not [..]: rich markup
        if r.group is not None:
            outcome += " " + ("" if r.group.per_request else "known only for the ") + r.group.describe()
        table.add_row(
            r.call, rid, r.model or "", outcome, f"{r.responses} ({r.text_responses})",
            "" if r.final is None else str(r.final).lower(), _ms(r.first_response_ms), _ms(r.duration_ms),
            "[bold red]" + ", ".join(v.name for v in r.violations) + "[/]" if r.violations else "",
        )  # fmt: skip
    console.print(table)
    if hidden:
        console.print(f"{hidden} request(s) not shown (--rows 0 shows all; --json gives everything)")
    if result.unattributable:
        un = Table(title="unattributable responses", title_justify="left")
        for col in ("call", "seq", "request id", "reason", "final", "error"):
            un.add_column(col)
        for u in result.unattributable:
            un.add_row(u.call, str(u.seq), repr(u.request_id), u.reason, str(u.final), u.error or "")
        console.print(un)
    for g in result.gaps:
        where = f"{g.file}:{g.line}" if g.line is not None else g.file
        console.print(f"[yellow]hole[/] {g.kind} at {where}: {g.detail}")
    s = result.summary()
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(s["outcomes"].items())) or "none"
    console.print(
        f"{s['requests']} request(s) on {s['calls']} call(s) in {s['records']} record(s): {outcomes}; "
        f"{s['violations']} violation(s), {s['unattributable']} unattributable response(s), {s['gaps']} hole(s)"
        + ("" if s["complete"] else "; capture incomplete")
    )
    if s["known_only_for_group"]:
        console.print(
            f"[yellow]warning[/]: {s['known_only_for_group']} request(s) sent together with the same id ended in "
            "different ways: each one's outcome is known only for its group (give requests distinct ids to "
            "know each one's; not a failure)"
        )
    if s["violations_by_name"]:
        console.print("violations: " + ", ".join(f"{k} {v}" for k, v in sorted(s["violations_by_name"].items())))


def render_marks(marks: list[dict[str, Any]], out: TextIO) -> None:
    """One line per `mark` record (seq, UTC time, note, labels)."""
    for m in marks:
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(m["t_ns"] / 1e9))
        labels = "".join(f" {k}={v}" for k, v in sorted(m["labels"].items()))
        out.write(f"mark seq {m['seq']} at {when}Z: {m['note']}{labels}\n")


def check(paths: Sequence[str], *, as_json: bool = False, rows: int = 100,
          out: TextIO | None = None, err: TextIO | None = None) -> int:  # fmt: skip
    """Run ``replay check`` on ``paths``; returns the exit code (raises CaptureError when unreadable)."""
    out = out or sys.stdout
    err = err or sys.stderr
    reader = read_capture(list(paths))
    # --json streams the requests through a temporary file (flat memory on any capture size); the
    # table is for people and needs them all at hand.
    sink = SpillSink() if as_json else None
    try:
        return _check(reader, sink, rows, out, err)
    finally:
        if sink is not None:
            sink.close()


def _check(reader: CaptureReader, sink: SpillSink | None, rows: int, out: TextIO, err: TextIO) -> int:
    tracker = Tracker(sink=sink)
    marks: list[dict[str, Any]] = []
    feed = tracker.feed
    # The read allocates millions of records and frees them again, none in a reference cycle: the
    # cyclic collector would only walk the tracker's live objects over and over (~20% of the time).
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        for seq, record in with_progress(reader, err):
            if type(record) is ev.MarkRecorded:  # operators' marks (admin Mark) are shown, not tracked
                marks.append({"seq": seq, "t_ns": record.t_ns, "note": record.note, "labels": record.labels})
            feed(seq, record)
    finally:
        if gc_was_on:
            gc.enable()
    result = tracker.finish(reader.gaps, reader.warnings)
    for w in result.warnings:
        print(f"triton-tap: warning: {w}", file=err)
    if sink is not None:
        write_result(out, lambda: write_json(out, sink, result, marks))
        violations = sum(sink.tally.violations.values())
        return EXIT_OK if not violations and not result.unattributable else EXIT_FINDINGS

    def human() -> None:
        render_human(result, out, rows=rows)
        render_marks(marks, out)

    write_result(out, human)
    # A reader that stopped early (`| head`) changes nothing about what was found.
    return exit_code(result)


def _rows(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0: {text!r}")
    return int(text)


def add_check_command(sub: Any) -> None:
    """Register ``check`` on a subparser set."""
    p = sub.add_parser(
        "check",
        help="per-request outcomes and protocol violations of a capture",
        description="Per-request outcomes and protocol violations of a capture. Exit 0: no violation "
        "(requests known only for their id group are a warning); 1: violations or unattributable "
        "responses; 2: unreadable capture.",
    )
    add_capture_argument(p)
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
    return check(args.capture, as_json=args.json, rows=args.rows)

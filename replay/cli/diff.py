"""``triton-tap diff A B``: argument parsing and the rendered report (the comparison is :mod:`replay.tools.diff`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from replay.cli.matching import MATCH_HELP, payload_hint, strategies_type
from replay.errors import EXIT_FINDINGS, EXIT_OK
from replay.tools.diff import DEFAULT_THRESHOLD_MS
from replay.tools.match import STRATEGIES

if TYPE_CHECKING:
    from replay.machine.outcomes import RequestOutcome
    from replay.tools.diff import DiffResult


def _threshold(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number of milliseconds >= 0: {text!r}")
    return value


def _rid(r: RequestOutcome) -> str:
    rid = "(none)" if r.request_id is None else repr(r.request_id) if r.request_id == "" else r.request_id
    return f"{r.model or '?'}/{rid}"


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f} ms"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "none"
    return str(value)


def render_diff(result: DiffResult, out: TextIO) -> None:
    """The rich report: changed requests field by field, unpaired requests, a verdict."""
    from rich.markup import escape
    from rich.table import Table

    from replay.cli.output import QuietConsole

    console = QuietConsole(file=out, width=None if out.isatty() else 160, highlight=False)
    if result.changed:
        table = Table(title="changed requests", title_justify="left")
        for col in ("request (A call -> B call)", "matched by", "field", "A", "B"):
            table.add_column(col)
        for p in result.changed:
            first = True
            for c in p.changes:
                ids = _rid(p.a) if p.a.request_id == p.b.request_id else f"{_rid(p.a)} -> {_rid(p.b)}"
                who = f"{ids} ({p.a.call} -> {p.b.call})" if first else ""
                table.add_row(escape(who), p.by if first else "", f"[bold]{c.field}[/]",
                              f"[red]{escape(_text(c.a))}[/]", f"[green]{escape(_text(c.b))}[/]")  # fmt: skip
                first = False
        console.print(table)
    for label, rows, style in (("only in A", result.only_a, "red"), ("only in B", result.only_b, "green")):
        for r in rows:
            console.print(f"[{style}]{label}[/]: {escape(_rid(r))} (call {r.call}, seq {r.seq}, {r.outcome})")
    if result.calls:
        calls = Table(title="other calls", title_justify="left")
        for col in ("method status", "A", "B"):
            calls.add_column(col)
        for c in result.calls:
            calls.add_row(escape(c.field), f"[red]{c.a}[/]", f"[green]{c.b}[/]")
        console.print(calls)
    for side, side_holes in (("A", result.holes_a), ("B", result.holes_b)):
        for g in side_holes:
            where = f"{g.file}:{g.line}" if g.line is not None else g.file
            console.print(f"[bold yellow]hole in {side}[/] {g.kind} at {escape(where)}: {escape(g.detail)}")
    s = result.to_json()["summary"]
    verdict = "[bold green]equivalent[/]" if result.equivalent else "[bold red]different[/]"
    holes = ""
    if result.holes_a or result.holes_b:
        holes = (f"; [bold yellow]A has {len(result.holes_a)} hole(s), B {len(result.holes_b)}[/]: "
                 "the comparison covers only the records captured")  # fmt: skip
    console.print(
        f"{verdict}: {s['paired']} request(s) paired, {s['changed']} changed, {s['only_a']} only in A, "
        f"{s['only_b']} only in B, {s['calls_changed']} other call count(s) changed "
        f"(timing threshold {result.threshold_ms:g} ms){holes}"
    )


def run_diff(paths_a: Sequence[str], paths_b: Sequence[str], *, as_json: bool = False,
             strategies: Sequence[str] = STRATEGIES, threshold_ms: float = DEFAULT_THRESHOLD_MS,
             out: TextIO | None = None, err: TextIO | None = None) -> int:  # fmt: skip
    """Run ``diff``; returns the exit code (raises CaptureError when a capture is unreadable)."""
    import orjson

    from replay.cli.output import write_result
    from replay.tools.captured import load
    from replay.tools.diff import diff

    out = out or sys.stdout
    err = err or sys.stderr
    a, b = load(list(paths_a)), load(list(paths_b))
    for side, cap in (("A", a), ("B", b)):
        for w in cap.outcomes.warnings:
            print(f"triton-tap: warning: {side}: {w}", file=err)
        payload_hint(cap, strategies, f"capture {side}", err)
    result = diff(a, b, strategies=strategies, threshold_ms=threshold_ms)
    if as_json:
        write_result(out, lambda: out.write(orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2).decode() + "\n"))
    else:
        write_result(out, lambda: render_diff(result, out))
    return EXIT_OK if result.equivalent else EXIT_FINDINGS


def add_diff_command(sub: Any) -> None:
    """Register ``diff`` on a subparser set."""
    p = sub.add_parser(
        "diff",
        help="what changed between two captures, request by request",
        description="Compare two captures semantically: requests of B are matched to A's as `serve` matches them; "
        "per request: outcome, responses (text), final flag, error text, status, cause, violations, and timing "
        "changes beyond a threshold; requests only in A or only in B. Holes of either capture (dropped or "
        "repeated records, a missing capture_end) are listed (JSON: `holes`) but do not change the verdict. "
        "Exit 0: equivalent; 1: different; 2: unreadable capture, or --match payload alone on captures without "
        "payload bytes.",
    )
    p.add_argument("a", metavar="A", help="the reference capture (file or directory)")
    p.add_argument("b", metavar="B", help="the capture to compare with it")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the report")
    p.add_argument("--match", type=strategies_type, default=STRATEGIES, metavar="STRATEGIES", help=MATCH_HELP)
    p.add_argument(
        "--timing-threshold",
        type=_threshold,
        default=DEFAULT_THRESHOLD_MS,
        metavar="MS",
        help="report first-response and total times that moved by more than MS (default %(default)g)",
    )
    p.set_defaults(func=lambda args: run_diff([args.a], [args.b], as_json=args.json, strategies=args.match,
                                              threshold_ms=args.timing_threshold))  # fmt: skip

"""``triton-tap diff A B``: argument parsing and the rendered report (the comparison is :mod:`replay.tools.diff`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from replay.cli.base import add_skip_damaged, parse_pairs
from replay.cli.matching import MATCH_HELP, payload_hint, strategies_type
from replay.errors import EXIT_FINDINGS, EXIT_OK
from replay.tools.diff import DEFAULT_THRESHOLD_MS
from replay.tools.match import STRATEGIES

if TYPE_CHECKING:
    from replay.machine.outcomes import RequestOutcome
    from replay.tools.diff import DiffResult, Pair
    from replay.tools.regression import ModelRegression, Tolerance


def _tolerance(text: str) -> Tolerance:
    from replay.tools.regression import parse_tolerance

    try:
        return parse_tolerance(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MS, PCT% or MS,PCT% (numbers >= 0): {text!r}") from None


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


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _cut(p: Pair) -> str:
    """``tokens/a (c1.1 -> c1.1): responses 3 -> 2, ...: B ended 1.5 ms after A had its 3rd ...``."""
    ids = _rid(p.a) if p.a.request_id == p.b.request_id else f"{_rid(p.a)} -> {_rid(p.b)}"
    raced = bool(p.raced)
    counts = ", ".join(f"{c.field} {c.a} -> {c.b}" for c in p.raced) if raced else (
        f"responses {p.a.responses} -> {p.b.responses}")
    more, fewer = ("A", "B") if p.a.responses > p.b.responses else ("B", "A")
    late = p.cut_ms or 0.0
    when = f"{late:.1f} ms after" if late >= 0 else f"{-late:.1f} ms before"
    nth = _ordinal(min(p.a.responses, p.b.responses) + 1)
    verdict = ("not a change" if late <= 0 else "within the tolerance: not a change") if raced else (
        "beyond the tolerance: a change")
    return (f"{ids} ({p.a.call} -> {p.b.call}): {counts}, ended alike by the client: {fewer} ended {when} {more} "
            f"had its {nth} (at {more}'s pace), {verdict}")


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _models_table(models: Sequence[ModelRegression]) -> Any:
    """Per model: counts of what moved, and timing percentiles A -> B (beyond tolerance: red slower, green faster)."""
    from rich.markup import escape
    from rich.table import Table

    from replay.tools.regression import FASTER, SLOWER

    table = Table(title="per model (times in ms, A -> B)", title_justify="left")
    for col in ("model", "requests A/B", "outcome changes", "responses", "final", "error",
                "first response p50", "p95", "duration p50", "p95"):  # fmt: skip
        table.add_column(col)
    for m in models:
        t = {x.name: x for x in m.timings}
        cells = []
        for name in ("first_response_ms p50", "first_response_ms p95", "duration_ms p50", "duration_ms p95"):
            x = t[name]
            text = f"{_ms(x.a)} -> {_ms(x.b)}"
            style = {SLOWER: "bold red", FASTER: "bold green"}.get(x.direction or "")
            cells.append(f"[{style}]{text}[/]" if style else text)
        outcomes = ", ".join(f"{k} x{v}" for k, v in sorted(m.outcomes.items())) or "-"
        name = f"[bold red]{escape(m.model)}[/]" if m.changed else escape(m.model)
        counts = f"{m.requests_a}/{m.requests_b}"
        table.add_row(name, counts, escape(outcomes), *(str(n or "-") for n in (m.responses_changed, m.final_changed,
                      m.error_changed)), *cells)  # fmt: skip
    return table


def render_diff(result: DiffResult, out: TextIO) -> None:
    """The rich report: changed requests field by field, unpaired requests, a verdict."""
    from rich.markup import escape
    from rich.table import Table

    from replay.cli.console import QuietConsole

    # The width is the tables'; a line outside them is never wrapped, on a terminal or not (one line each, as
    # check's: a script reads the verdict with `tail -1`, a hole's file name whole).
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
    for p in result.pairs:
        if p.cut_ms is not None:
            console.print(f"[yellow]raced[/]: {escape(_cut(p))}" if p.raced else f"[red]paced[/]: {escape(_cut(p))}",
                          soft_wrap=True)  # fmt: skip
    for label, rows, style in (("only in A", result.only_a, "red"), ("only in B", result.only_b, "green")):
        for r in rows:
            console.print(f"[{style}]{label}[/]: {escape(_rid(r))} (call {r.call}, seq {r.seq}, {r.outcome})",
                          soft_wrap=True)  # fmt: skip
    for title, what, counts in (("other calls", "method status", result.calls),
                                ("unattributable responses", "reason", result.unattributable)):  # fmt: skip
        if counts:
            table = Table(title=title, title_justify="left")
            for col in (what, "A", "B"):
                table.add_column(col)
            for c in counts:
                table.add_row(escape(c.field), f"[red]{c.a}[/]", f"[green]{c.b}[/]")
            console.print(table)
    if result.models:
        console.print(_models_table(result.models))
    for side, side_holes in (("A", result.holes_a), ("B", result.holes_b)):
        for g in side_holes:
            where = f"{g.file}:{g.line}" if g.line is not None else g.file
            console.print(f"[bold yellow]hole in {side}[/] {g.kind} at {escape(where)}: {escape(g.detail)}",
                          soft_wrap=True)  # fmt: skip
    s = result.to_json()["summary"]
    moved = "".join(f", {len(models)} model(s) {word} beyond tolerance"
                    for word, models in (("slower", result.slower), ("faster", result.faster)) if models)  # fmt: skip
    tol = f"{result.threshold_ms:g} ms" + (f" or {result.tolerance_pct:g} %" if result.tolerance_pct else "")
    verdict = "[bold green]equivalent[/]" if result.equivalent else "[bold red]different[/]"
    holes = ""
    if result.holes_a or result.holes_b:
        holes = (f"; [bold yellow]A has {len(result.holes_a)} hole(s), B {len(result.holes_b)}[/]: "
                 "the comparison covers only the records captured")  # fmt: skip
    lost = f", {s['unattributable_changed']} unattributable count(s) changed" if s["unattributable_changed"] else ""
    if s["raced"]:
        lost += f", {s['raced']} count(s) raced their client's end (not changes)"
    if s["refused_a"] or s["refused_b"]:
        lost += (f", refused unprocessed (crossed a GOAWAY; left out): {s['refused_a']} call(s) in A, "
                 f"{s['refused_b']} in B")  # fmt: skip
    console.print(
        f"{verdict}: {s['paired']} request(s) paired, {s['changed']} changed, {s['only_a']} only in A, "
        f"{s['only_b']} only in B, {s['calls_changed']} other call count(s) changed{lost}{moved} "
        f"(timing tolerance {tol}){holes}",
        soft_wrap=True,
    )


def run_diff(paths_a: Sequence[str], paths_b: Sequence[str], *, as_json: bool = False,
             strategies: Sequence[str] = STRATEGIES, threshold_ms: float = DEFAULT_THRESHOLD_MS,
             out: TextIO | None = None, err: TextIO | None = None, tolerance_pct: float = 0.0,
             model_map: dict[str, str] | None = None) -> int:  # fmt: skip
    """Run ``diff``; returns the exit code (raises CaptureError when a capture is unreadable)."""
    import orjson

    from replay.cli.output import write_result
    from replay.tools.captured import summarize
    from replay.tools.diff import diff

    out = out or sys.stdout
    err = err or sys.stderr
    a, b = summarize(list(paths_a)), summarize(list(paths_b))
    for side, cap in (("A", a), ("B", b)):
        for w in cap.outcomes.warnings:
            print(f"triton-tap: warning: {side}: {w}", file=err)
        payload_hint(cap, strategies, f"capture {side}", err)
    result = diff(a, b, strategies=strategies, threshold_ms=threshold_ms, tolerance_pct=tolerance_pct,
                  model_map=model_map)  # fmt: skip
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
        "changes beyond a tolerance; requests only in A or only in B; per model: outcome, response-count, final-flag "
        "and error changes and time-to-first-response/duration percentiles side by side, each beyond the tolerance "
        "named slower or faster (either makes the captures different). Holes of either capture (dropped or "
        "repeated records, a missing capture_end) are listed (JSON: `holes`) but do not change the verdict. "
        "Exit 0: equivalent; 1: different; 2: unreadable capture, or --match payload alone on captures without "
        "payload bytes.",
    )
    p.add_argument("a", metavar="A", help="the reference capture (file or directory)")
    p.add_argument("b", metavar="B", help="the capture to compare with it")
    add_skip_damaged(p)
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the report")
    p.add_argument("--match", type=strategies_type, default=STRATEGIES, metavar="STRATEGIES", help=MATCH_HELP)
    # The older spelling of `--tolerance MS`, kept for the scripts that use it; one word in the help.
    p.add_argument("--timing-threshold", type=_threshold, default=DEFAULT_THRESHOLD_MS, metavar="MS",
                   help=argparse.SUPPRESS)
    p.add_argument("--tolerance", type=_tolerance, default=None, metavar="MS|PCT%|MS,PCT%",
                   help="timing tolerance of requests and per-model percentiles: a time is a change when it moved by "
                   "more than MS and more than PCT %% of A's, slower or faster (default 100)")
    p.add_argument("--model-map", action="append", default=[], metavar="OLD=NEW",
                   help="pair A's requests for model OLD with B's for NEW (as sent with `replay send --model-map`)")
    p.set_defaults(func=_run)


def _run(args: Any) -> int:
    tol = args.tolerance
    model_map = parse_pairs(args.model_map, "--model-map")
    return run_diff([args.a], [args.b], as_json=args.json, strategies=args.match,
                    threshold_ms=tol.ms if tol is not None else args.timing_threshold,
                    tolerance_pct=tol.pct if tol is not None else 0.0, model_map=model_map)  # fmt: skip

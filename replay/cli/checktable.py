"""``replay check``'s table in flat memory: only the requests it will show are kept, the others counted.

The table lists every request when there are at most ``--rows`` of them; beyond, the first
``rows`` of those needing attention (a violation, or an outcome other than ``completed``) in
capture order, and how many it does not show. :class:`TableSink` takes the outcomes from the
tracker as they settle (:class:`~replay.machine.outcomes.RequestSink`) and keeps at most
``rows + 1`` of them plus the summary's counts (:class:`~replay.machine.outcomes.Tally`): memory
does not grow with the capture, except with ``--rows 0`` (show every request), which keeps them
all. The output is byte for byte what the table built from every request in memory printed
(tests/replay/cli/test_check_table_stream.py).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence
from typing import TextIO

from rich.markup import escape
from rich.table import Table

from replay.capture.methods import protocol, short_method
from replay.cli.console import QuietConsole
from replay.machine.outcomes import RequestOutcome, Tally, TrackResult

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
    "unknown": "italic",
}


def needs_attention(r: RequestOutcome) -> bool:
    """What the table keeps when there are more requests than rows: a violation (counted or after records
    were lost) or not ``completed``."""
    return bool(r.violations) or bool(r.violations_after_loss) or r.outcome != "completed"


class TableSink:
    """Keeps the requests the table will show (at most ``rows``; all with ``rows`` 0) and counts every one."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.tally = Tally()
        # (-call position, -arrival, outcome): negated so that the heap's top is the last in capture
        # order, the one to drop. Calls end in any order, but a call's requests arrive in its order
        # (RequestSink), so (call position, arrival) is capture order; the pair is unique, so the
        # outcomes themselves are never compared.
        self._kept: list[tuple[int, int, RequestOutcome]] = []
        self._arrived = 0
        self._cut = False  # more requests than rows: only those needing attention are shown
        self._status: dict[int, str] = {}  # call position -> its status, once the call is over (see settled)

    def settled(self, call_pos: int, outcome: RequestOutcome) -> None:
        """A request's outcome, final but for its call's status (see RequestSink): the status column of a
        capture with HTTP calls shows it, so the row takes it from :meth:`call_over` when shown."""
        self._add(call_pos, outcome)

    def call_over(self, call_pos: int, status: str | None, outcomes: list[RequestOutcome]) -> None:
        """A call's status and its remaining requests."""
        if status is not None:
            self._status[call_pos] = status
        for outcome in outcomes:
            self._add(call_pos, outcome)

    def _add(self, call_pos: int, outcome: RequestOutcome) -> None:
        self.tally.add(outcome)
        self._arrived += 1
        if self._cut and not needs_attention(outcome):
            return
        entry = (-call_pos, -self._arrived, outcome)
        kept = self._kept
        if self._cut:
            if len(kept) < self.rows:
                heapq.heappush(kept, entry)
            else:
                heapq.heappushpop(kept, entry)  # drops whichever of them comes last in capture order
            return
        kept.append(entry)
        if self.rows and self.tally.requests > self.rows:
            self._cut = True
            kept[:] = [e for e in kept if needs_attention(e[2])]
            heapq.heapify(kept)
            while len(kept) > self.rows:
                heapq.heappop(kept)

    def shown(self) -> list[RequestOutcome]:
        """The table's requests, in capture order, each with its call's status."""
        status = self._status
        return [
            dataclasses.replace(o, status=status[-pos]) if o.status is None and -pos in status else o
            for pos, _, o in sorted(self._kept, reverse=True)
        ]

    @property
    def hidden(self) -> int:
        """Requests the table does not show."""
        return self.tally.requests - len(self._kept) if self._cut else 0


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _counts(r: RequestOutcome) -> tuple[str, str, str]:
    """The row's ``responses (text)``, ``first ms`` and ``ms`` cells.

    A request of a shared id group has the responses known to be its own (often none) and the
    group's, which the wire cannot place: those are shown as the group's, from its GroupOutcome,
    never as the request's. So is its duration: which of the group's finals was its own the wire
    does not say, so it runs to the group's last (``group 97.6``).
    """
    own, first, ms = f"{r.responses} ({r.text_responses})", _ms(r.first_response_ms), _ms(r.duration_ms)
    g = r.group
    if g is None or not g.responses:
        return own, first, ms
    shared = f"group {g.responses} ({g.text_responses})"
    if r.first_response_ms is None and g.first_response_ms is not None:
        first = f"group {_ms(g.first_response_ms)}"
    if r.duration_ms is not None:
        ms = f"group {ms}"
    return (f"{own} + {shared}" if r.responses else shared), first, ms


def _outcome(r: RequestOutcome) -> str:
    """The row's ``outcome`` cell: the outcome and what qualifies it (what was recorded, error, notes, group)."""
    style = _STYLE.get(r.outcome, "")
    outcome = f"[{style}]{r.outcome}[/]" if style else r.outcome
    if r.recorded_as is not None:
        outcome += f" (records were lost on its call; recorded as {r.recorded_as})"
    if r.error and r.outcome != "completed":
        outcome += f" ({escape(r.error)})"
    if r.notes:
        outcome += " (note: " + ", ".join(r.notes) + ")"  # not [..]: rich markup
    if r.group is not None:
        outcome += " " + ("" if r.group.per_request else "known only for the ") + r.group.describe()
    return outcome


def _violations(r: RequestOutcome) -> str:
    """The row's ``violations`` cell: those counted, then those after records were lost (not counted)."""
    cells = ["[bold red]" + ", ".join(v.name for v in r.violations) + "[/]"] if r.violations else []
    if r.violations_after_loss:
        cells.append("[yellow]" + ", ".join(v.name for v in r.violations_after_loss) + " (after records were lost)[/]")
    return "; ".join(cells)


def _line(console: QuietConsole, text: str) -> None:
    """A line of text, never wrapped: a path or a number in it stays whole whatever the width."""
    console.print(text, soft_wrap=True)


def render_human(
    result: TrackResult, out: TextIO, *, shown: Sequence[RequestOutcome], hidden: int, tally: Tally | None = None
) -> None:
    """The rich table of ``shown`` requests, unattributable responses, holes and a summary (``tally``: see summary)."""
    console = QuietConsole(file=out, width=None if out.isatty() else 160, highlight=False)
    table = Table(title="requests", title_justify="left")
    # With HTTP calls in the capture a row must say which port and endpoint it was, and its status is an
    # HTTP code (a 200 can still carry an error): shown then, so a gRPC-only table stays as it was.
    http = any(protocol(c.method) == "http" for c in result.calls)
    for col, justify in (
        ("call", "left"), *((("method", "left"), ("status", "left")) if http else ()), ("request id", "left"),
        ("model", "left"), ("outcome", "left"), ("responses (text)", "right"), ("final", "left"),
        ("first ms", "right"), ("ms", "right"), ("violations", "left"),
    ):  # fmt: skip
        table.add_column(col, justify=justify)
    for r in shown:
        rid = "(none)" if r.request_id is None else repr(r.request_id) if r.request_id == "" else r.request_id
        if r.occurrence:
            rid += f" #{r.occurrence + 1}"
        responses, first, ms = _counts(r)
        table.add_row(
            escape(r.call), *((escape(short_method(r.method)), escape(r.status or "")) if http else ()), escape(rid), escape(r.model or ""), _outcome(r), responses,
            "" if r.final is None else str(r.final).lower(), first, ms, _violations(r),
        )  # fmt: skip
    console.print(table)
    if hidden:
        _line(console, f"{hidden} request(s) not shown (--rows 0 shows all; --json gives everything)")
    if result.unattributable:
        un = Table(title="unattributable responses", title_justify="left")
        for col in ("call", "seq", "request id", "reason", "final", "error"):
            un.add_column(col)
        for u in result.unattributable:
            reason = u.reason + (" (after records of its call were lost)" if u.after_loss else "")
            un.add_row(
                escape(u.call), str(u.seq), escape(repr(u.request_id)), reason, str(u.final), escape(u.error or "")
            )
        console.print(un)
    if result.protocol_errors:
        pe = Table(title="connections closed for breaking HTTP/2 or HTTP/1.x (protocol_error)", title_justify="left")
        for col in ("conn", "seq", "side", "error", "open calls"):
            pe.add_column(col)
        for p in result.protocol_errors:
            pe.add_row(escape(p.conn), str(p.seq), p.side, escape(p.error), escape(", ".join(p.open_calls)))
        console.print(pe)
    for g in result.gaps:
        where = f"{g.file}:{g.line}" if g.line is not None else g.file
        _line(console, f"[yellow]hole[/] {g.kind} at {escape(where)}: {escape(g.detail)}")
    s = result.summary(tally)
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(s["outcomes"].items())) or "none"
    _line(
        console,
        f"{s['requests']} request(s) on {s['calls']} call(s) in {s['records']} record(s): {outcomes}; "
        f"{s['violations']} violation(s), {s['unattributable']} unattributable response(s), {s['gaps']} hole(s)"
        + (
            f"; not counted, as records of their calls were lost before them: {s['violations_after_loss']} "
            f"violation(s), {s['unattributable_after_loss']} unattributable response(s)"
            if s["violations_after_loss"] or s["unattributable_after_loss"]
            else ""
        )
        + (f", {s['protocol_errors']} protocol error(s)" if s["protocol_errors"] else "")
        + (f", {s['late_after_end']} frame(s) the upstream sent after a call had ended" if s["late_after_end"] else "")
        + ("" if s["complete"] else "; capture incomplete"),
    )
    if s["outcomes"].get("unknown"):
        _line(
            console,
            f"[yellow]warning[/]: {s['outcomes']['unknown']} request(s) have the outcome unknown: records of their "
            "calls were lost (the holes above) while they were open, so how they ended is not on record "
            "(`recorded as` says what the records kept show)",
        )
    if s["known_only_for_group"]:
        _line(
            console,
            f"[yellow]warning[/]: {s['known_only_for_group']} request(s) sent together with the same id are known "
            "only for their group: they ended in different ways, or got errors the wire cannot place (see each "
            "group's `ended`; give requests distinct ids to know each one's; not a failure)",
        )
    if s["violations_by_name"]:
        _line(console, "violations: " + ", ".join(f"{k} {v}" for k, v in sorted(s["violations_by_name"].items())))

"""Did the work stop after a cancel? Evidence in, verdict out (pure: no I/O, no clock).

"No more responses arrived" proves nothing about the server: the gRPC layer drops what a backend
still produces after a cancel, and a backend that never polls ``is_cancelled()`` keeps computing.
So a verdict needs server-side evidence, and this module says which observation supports what:

- **queue-service probe** (backend-agnostic): a probe request to the same model, sent while the
  cancelled work was running. If the probe got no response before the cancel, the model serves one
  request at a time and the probe can see the instance: a first response within
  ``baseline + allowance`` after the cancel means the instance was freed; a later one means it
  stayed busy. If the probe was answered *before* the cancel, the model serves requests
  concurrently and the probe says nothing.
- **Triton's verbose log** (``--log-verbose=1``): the ``[request id: X] ... to RELEASED`` line
  shows when the backend let go of the request; ``skipping response generation`` lines (one per
  response produced after the cancel, no request id) show responses still being computed.
  Times are the server's own clock, measured from its ``Cancellation notification received`` line.
- **metrics** (``nv_inference_*``) and the proxy's view (RST latency, late frames) are reported
  but never decide: the counters do not move for every backend, and a proxy seeing no more frames
  is exactly the "client stopped reading" illusion.

Conflicting evidence resolves to "continued": a report must never claim more than was shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

#: Version of the report document (JSON and Markdown); bump when a field changes meaning.
REPORT_VERSION = 1

Case = Literal["executing", "queued"]

NO_PREEMPTION_NOTE = (
    "work_stopped: true means the evidence above shows the work ended within the observation-delay "
    "allowance after the cancel, on this server, model and client method. It is not a promise that "
    "work is preempted at once: a backend stops only where it checks for cancellation."
)

_LOG_TIME = re.compile(r"^[IWEF](\d{4}) (\d\d):(\d\d):(\d\d(?:\.\d+)?) ")
NOTIFIED = "Cancellation notification received"
SKIPPED = "skipping response generation as grpc transaction was cancelled"


def parse_metrics(text: str) -> dict[str, float]:
    """``name{labels}`` -> value for the ``nv_inference_*`` lines of a Prometheus text page."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("nv_inference_"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            continue
    return out


def log_time_s(line: str) -> float | None:
    """Seconds since midnight of a Triton log line (server clock), or None for other lines."""
    m = _LOG_TIME.match(line)
    if m is None:
        return None
    return int(m.group(2)) * 3600 + int(m.group(3)) * 60 + float(m.group(4))


@dataclass(frozen=True, kw_only=True, slots=True)
class LogObservation:
    """What Triton's verbose log showed after one cancel.

    Times are the server's clock, in ms from the reference point: for an executing request its
    ``Cancellation notification received`` line, for a queued one the moment it reached the backend
    (its ``to EXECUTING`` line) or, when it never did, the notification.
    """

    notified: bool
    reached_backend: bool | None  # queued case: the request still went from the queue to the backend
    released_after_ms: float | None
    skipped_total: int
    skipped_after_allowance: int
    last_skipped_ms: float | None
    window_ms: float
    lines: tuple[str, ...] = ()


def scan_log(
    lines: list[str], request_id: str, allowance_ms: float, window_ms: float, *, case: Case = "executing"
) -> LogObservation:
    """Read the log lines appended after a cancel of ``request_id`` (the first notification is ours)."""
    t0: float | None = None
    start: float | None = None  # reference point (see LogObservation)
    reached: bool | None = False if case == "queued" else None
    released: float | None = None
    skipped: list[float] = []
    kept: list[str] = []
    tag = f"[request id: {request_id}]"
    for line in lines:
        t = log_time_s(line)
        if t is None:
            continue
        if t0 is not None and t < t0 - 43200:
            t += 86400  # the log crossed midnight
        if NOTIFIED in line:
            if t0 is None:
                t0 = start = t
            kept.append(line)
            continue
        if t0 is None or start is None:
            continue
        if (t - t0) * 1000.0 > window_ms:
            break
        if SKIPPED in line:
            skipped.append(t)
            kept.append(line)
        elif tag in line and "to EXECUTING" in line and case == "queued":
            reached = True
            start = t
            # Responses dropped before the request even ran belong to someone else.
            skipped = []
            kept.append(line)
        elif tag in line and "to RELEASED" in line and released is None:
            released = max(0.0, (t - start) * 1000.0)
            kept.append(line)
    since = [(t - start) * 1000.0 for t in skipped] if start is not None else []
    return LogObservation(
        notified=t0 is not None,
        reached_backend=reached,
        released_after_ms=released,
        skipped_total=len(since),
        skipped_after_allowance=sum(1 for x in since if x > allowance_ms),
        last_skipped_ms=max(since) if since else None,
        window_ms=window_ms,
        lines=tuple(kept[:50]),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbeObservation:
    """The queue-service probe of one case."""

    baseline_ms: float  # time to first response of the same probe on the idle model
    blocked_before_cancel: bool  # the probe had no response while the cancelled work ran
    after_cancel_ms: float | None  # reference -> probe's first response; None: none within the window
    window_ms: float
    reference: str = "the cancel"  # what after_cancel_ms is measured from


@dataclass(frozen=True, kw_only=True, slots=True)
class CaseObservation:
    """Everything observed about one cancelled request (one case of the protocol)."""

    case: Case
    request_id: str
    allowance_ms: float
    skipped: str | None = None  # the case could not be exercised: why
    client_status: str | None = None  # what the client got for the cancelled request
    responses_before_cancel: int = 0
    unary: bool = False  # a unary call: no partial responses, so "executing" is not visible on the wire
    rate_per_s: float | None = None  # responses per second the request streamed before the cancel
    remaining: int | None = None  # responses it still had to produce, when known (built-in recipe)
    probe: ProbeObservation | None = None
    log: LogObservation | None = None
    metrics: dict[str, float] | None = None  # nv_inference_* deltas over the window (None: not sampled)
    upstream_rst_us: float | None = None  # through the proxy: client RST -> proxy RST upstream
    late_frames: int | None = None  # through the proxy: frames Triton still sent after the RST
    proxy_in_flight: tuple[str, ...] | None = None  # through the proxy: the cancel record's view
    proxy_responded: tuple[str, ...] | None = None  # those of proxy_in_flight that had responded
    neighbour_ok: bool | None = None
    neighbour_detail: str = ""
    casualties: tuple[str, ...] = ()  # other requests the same cancel ended (stream scope)
    not_covered: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """``work_stopped`` and the evidence lines behind it (each tagged stopped/continued/info)."""

    work_stopped: bool | None
    evidence: tuple[str, ...]


def decide(obs: CaseObservation) -> Verdict:
    """The verdict for one case: True only on positive evidence, False on any sign of ongoing work."""
    if obs.skipped is not None:
        return Verdict(work_stopped=None, evidence=(f"[info] not exercised: {obs.skipped}",))
    out: list[str] = []
    stopped = continued = False
    allowance = obs.allowance_ms
    if obs.unary:
        where = "a unary call: no partial responses, so the wire cannot show whether it was executing"
    else:
        where = "executing" if obs.responses_before_cancel else "queued (no response yet)"
    if obs.client_status != "CANCELLED":
        out.append(f"[info] the client got {obs.client_status or 'nothing'} instead of CANCELLED: the cancel did not act")
        return Verdict(work_stopped=None, evidence=tuple(out))
    out.append(
        f"[info] client status CANCELLED after {obs.responses_before_cancel} response(s): {where} as the wire shows"
    )
    p = obs.probe
    if p is not None:
        if not p.blocked_before_cancel:
            out.append(
                "[info] probe: answered while the cancelled request was still running, so the model serves "
                "requests concurrently and instance occupancy cannot show whether the work went on"
            )
        elif p.after_cancel_ms is None:
            continued = True
            out.append(f"[continued] probe: no response within {p.window_ms:.0f} ms after {p.reference}")
        elif p.after_cancel_ms <= p.baseline_ms + allowance:
            stopped = True
            out.append(
                f"[stopped] probe: first response {p.after_cancel_ms:.0f} ms after {p.reference} "
                f"(idle baseline {p.baseline_ms:.0f} ms + allowance {allowance:.0f} ms): the instance was freed"
            )
        else:
            continued = True
            out.append(
                f"[continued] probe: first response only {p.after_cancel_ms:.0f} ms after {p.reference} "
                f"(idle baseline {p.baseline_ms:.0f} ms + allowance {allowance:.0f} ms): the instance stayed busy"
            )
    lg = obs.log
    if lg is not None:
        if not lg.notified:
            out.append(
                f"[info] log: no '{NOTIFIED}' line within the window (not --log-verbose=1, or another file?)"
            )
        else:
            if lg.reached_backend is False:
                stopped = True
                out.append(
                    f"[stopped] log: request {obs.request_id!r} never left the queue for the backend within "
                    f"{lg.window_ms:.0f} ms"
                )
            ref = "it reached the backend" if lg.reached_backend else "Triton's cancellation notification"
            if lg.reached_backend:
                out.append(f"[info] log: the cancelled queued request {obs.request_id!r} was still handed to the backend")
            if lg.released_after_ms is not None:
                if lg.released_after_ms <= allowance:
                    stopped = True
                    out.append(
                        f"[stopped] log: request {obs.request_id!r} released by the backend "
                        f"{lg.released_after_ms:.0f} ms after {ref}"
                    )
                else:
                    continued = True
                    out.append(
                        f"[continued] log: request {obs.request_id!r} released only {lg.released_after_ms:.0f} ms "
                        f"after {ref}"
                    )
            elif lg.reached_backend is not False:
                out.append(
                    f"[info] log: no RELEASED line for {obs.request_id!r} within {lg.window_ms:.0f} ms of the notification"
                )
            quiet = lg.window_ms - allowance
            expected = obs.rate_per_s * quiet / 1000.0 if obs.rate_per_s else 0.0
            if obs.remaining is not None:
                expected = min(expected, float(obs.remaining))
            if lg.skipped_after_allowance:
                continued = True
                out.append(
                    f"[continued] log: {lg.skipped_after_allowance} response(s) still produced later than "
                    f"{allowance:.0f} ms after {ref} (last at {lg.last_skipped_ms:.0f} ms; "
                    "'skipping response generation' lines carry no request id)"
                )
            else:
                out.append(
                    f"[info] log: {lg.skipped_total} response(s) produced and dropped within the allowance"
                )
                if obs.case == "executing" and expected >= 3:
                    stopped = True
                    out.append(
                        f"[stopped] log: no response produced from {allowance:.0f} to {lg.window_ms:.0f} ms after the "
                        f"notification, where the request, streaming {obs.rate_per_s:.0f}/s before the cancel, would "
                        f"have produced about {expected:.0f} (Triton logs each as 'skipping response generation')"
                    )
    if obs.metrics is not None:
        if obs.metrics:
            moved = ", ".join(f"{k} {v:+g}" for k, v in sorted(obs.metrics.items()))
            out.append(f"[info] metrics moved over the window: {moved}")
        else:
            out.append("[info] metrics: no nv_inference_* counter moved (they do not for every backend)")
    if obs.upstream_rst_us is not None or obs.late_frames is not None:
        rst = f"{obs.upstream_rst_us:.0f} µs" if obs.upstream_rst_us is not None else "not forwarded"
        out.append(
            f"[info] proxy: cancel forwarded upstream {rst} after the client's RST_STREAM; "
            f"{obs.late_frames or 0} late frame(s) from Triton after it (no frames is not proof the work stopped)"
        )
    if obs.proxy_in_flight is not None:
        # The wire shows responses, not execution: "no response yet" may be queued or executing.
        responded = set(obs.proxy_responded or ())
        ids = ", ".join(f"{r} ({'responded' if r in responded else 'no response yet'})" for r in obs.proxy_in_flight)
        out.append(f"[info] proxy: the cancel ended {len(obs.proxy_in_flight)} request(s) in flight on the call: {ids}")
    if stopped is False and continued is False:
        out.append("[info] no server-side evidence either way: give --log (verbose) or use a single-instance model")
    return Verdict(work_stopped=False if continued else (True if stopped else None), evidence=tuple(out))


@dataclass(frozen=True, kw_only=True, slots=True)
class Report:
    """The versioned guarantee report of one ``check-cancel`` run."""

    tool_version: str
    client_version: str
    protocol: str
    method: str
    scope: str
    server_version: str | None
    model: str
    backend: str | None
    via: str  # "proxy" or "direct"
    allowance_ms: float
    cases: tuple[tuple[CaseObservation, Verdict], ...]
    not_covered: tuple[str, ...] = field(default=())


def exit_code(report: Report) -> int:
    """0: every case stopped; 1: some work went on or a neighbour was hurt; 2: not established."""
    verdicts = [v.work_stopped for _, v in report.cases]
    if any(v is False for v in verdicts) or any(o.neighbour_ok is False for o, _ in report.cases):
        return 1
    if verdicts and all(v is True for v in verdicts):
        return 0
    return 2


def to_json(report: Report) -> dict[str, Any]:
    """The report as one JSON document."""
    return {
        "report_version": REPORT_VERSION,
        "tool_version": report.tool_version,
        "client_version": report.client_version,
        "protocol": report.protocol,
        "server_version": report.server_version,
        "model": report.model,
        "backend": report.backend,
        "method": report.method,
        "scope": report.scope,
        "via": report.via,
        "allowance_ms": report.allowance_ms,
        "cases": [
            {
                "case": o.case,
                "request_id": o.request_id,
                "work_stopped": v.work_stopped,
                "evidence": list(v.evidence),
                "neighbour_ok": o.neighbour_ok,
                "neighbour": o.neighbour_detail or None,
                "casualties": list(o.casualties),
                "not_covered": list(o.not_covered),
            }
            for o, v in report.cases
        ],
        "not_covered": list(report.not_covered),
        "exit_code": exit_code(report),
        "note": NO_PREEMPTION_NOTE,
    }


def _word(v: bool | None) -> str:
    return "null" if v is None else str(v).lower()


def to_markdown(report: Report) -> str:
    """The report as Markdown (what ``check-cancel`` prints and ``--report`` writes)."""
    r = report
    lines = [
        f"# Cancellation guarantee report (report v{REPORT_VERSION})",
        "",
        "| | |",
        "|---|---|",
        f"| model | `{r.model}` (backend `{r.backend or 'unknown'}`) |",
        f"| Triton server | {r.server_version or 'unknown'} |",
        f"| client | tritonclient {r.client_version}, protocol {r.protocol} |",
        f"| client method | `{r.method}` |",
        f"| cancel scope | {r.scope} |",
        f"| path | {r.via} |",
        f"| observation-delay allowance | {r.allowance_ms:.0f} ms |",
        f"| triton-tap | {r.tool_version} |",
        "",
    ]
    for o, v in r.cases:
        lines.append(f"## {o.case} case: `work_stopped: {_word(v.work_stopped)}`")
        lines.append("")
        lines.append(f"Cancelled request `{o.request_id}`.")
        lines.append("")
        lines += [f"- {e}" for e in v.evidence]
        if o.neighbour_ok is not None:
            lines.append(f"- neighbour: {'ok' if o.neighbour_ok else 'HURT'}{' - ' + o.neighbour_detail if o.neighbour_detail else ''}")
        if o.casualties:
            lines.append(
                f"- expected casualties of the {r.scope} cancel (not a fault): {', '.join(o.casualties)}"
            )
        lines += [f"- not covered: {n}" for n in o.not_covered]
        lines.append("")
    if r.not_covered:
        lines.append("## Not covered")
        lines.append("")
        lines += [f"- {n}" for n in r.not_covered]
        lines.append("")
    lines.append(f"_{NO_PREEMPTION_NOTE}_")
    lines.append("")
    return "\n".join(lines)

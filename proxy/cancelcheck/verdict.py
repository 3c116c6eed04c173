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

from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.triton.server_evidence import NOTIFIED, LogObservation

#: Version of the report document (JSON and Markdown); bump when a field changes meaning.
REPORT_VERSION = 1

Case = Literal["executing", "queued"]

NO_PREEMPTION_NOTE = (
    "work_stopped: true means the evidence above shows the work ended within the observation-delay "
    "allowance after the cancel, on this server, model and client method. It is not a promise that "
    "work is preempted at once: a backend stops only where it checks for cancellation."
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
    ahead_ended: bool | None = None  # queued case: the work it queued behind ended within the wait
    not_covered: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """``work_stopped`` and the evidence lines behind it (each tagged stopped/continued/info)."""

    work_stopped: bool | None
    evidence: tuple[str, ...]


@dataclass
class _Tally:
    """The evidence lines of one case so far, and whether any supports "stopped" or "continued"."""

    lines: list[str] = field(default_factory=list)
    stopped: bool = False
    continued: bool = False

    def info(self, text: str) -> None:
        self.lines.append(f"[info] {text}")

    def stop(self, text: str) -> None:
        self.stopped = True
        self.lines.append(f"[stopped] {text}")

    def went_on(self, text: str) -> None:
        self.continued = True
        self.lines.append(f"[continued] {text}")


def decide(obs: CaseObservation) -> Verdict:
    """The verdict for one case: True only on positive evidence, False on any sign of ongoing work."""
    if obs.skipped is not None:
        return Verdict(work_stopped=None, evidence=(f"[info] not exercised: {obs.skipped}",))
    if obs.client_status != "CANCELLED":
        return Verdict(work_stopped=None, evidence=(
            f"[info] the client got {obs.client_status or 'nothing'} instead of CANCELLED: the cancel did not act",
        ))  # fmt: skip
    t = _Tally()
    t.info(f"client status CANCELLED after {obs.responses_before_cancel} response(s): {_wire_state(obs)} as the wire shows")
    if obs.probe is not None:
        _probe_rule(obs.probe, obs.allowance_ms, t)
    if obs.log is not None:
        _log_rule(obs, obs.log, t)
    _metrics_info(obs.metrics, t)
    _proxy_info(obs, t)
    if not t.stopped and not t.continued:
        t.info("no server-side evidence either way: give --log (verbose) or use a single-instance model")
    return Verdict(work_stopped=False if t.continued else (True if t.stopped else None), evidence=tuple(t.lines))


def _wire_state(obs: CaseObservation) -> str:
    """Where the request was when cancelled, as far as the wire shows."""
    if obs.unary:
        return "a unary call: no partial responses, so the wire cannot show whether it was executing"
    return "executing" if obs.responses_before_cancel else "queued (no response yet)"


def _probe_rule(p: ProbeObservation, allowance: float, t: _Tally) -> None:
    """A probe blocked by the cancelled work and served within baseline + allowance: the instance was freed."""
    if not p.blocked_before_cancel:
        t.info("probe: answered while the cancelled request was still running, so the model serves "
               "requests concurrently and instance occupancy cannot show whether the work went on")  # fmt: skip
    elif p.after_cancel_ms is None:
        t.went_on(f"probe: no response within {p.window_ms:.0f} ms after {p.reference}")
    elif p.after_cancel_ms <= p.baseline_ms + allowance:
        t.stop(f"probe: first response {p.after_cancel_ms:.0f} ms after {p.reference} "
               f"(idle baseline {p.baseline_ms:.0f} ms + allowance {allowance:.0f} ms): the instance was freed")  # fmt: skip
    else:
        t.went_on(f"probe: first response only {p.after_cancel_ms:.0f} ms after {p.reference} "
                  f"(idle baseline {p.baseline_ms:.0f} ms + allowance {allowance:.0f} ms): the instance stayed busy")  # fmt: skip


def _log_rule(obs: CaseObservation, lg: LogObservation, t: _Tally) -> None:
    """Triton's verbose log: a queued request that never reached the backend, its release, late responses."""
    if not lg.notified:
        t.info(f"log: no '{NOTIFIED}' line within the window (not --log-verbose=1, or another file?)")
        return
    if lg.reached_backend is False and obs.ahead_ended is False:
        # Still behind work that had not ended: its staying queued is no sign the cancel took it out.
        t.info(f"log: request {obs.request_id!r} never left the queue, but the work ahead of it had not ended "
               "either: the log cannot tell")  # fmt: skip
    elif lg.reached_backend is False:
        t.stop(f"log: request {obs.request_id!r} never left the queue for the backend within {lg.window_ms:.0f} ms")
    ref = "it reached the backend" if lg.reached_backend else "Triton's cancellation notification"
    if lg.reached_backend:
        t.info(f"log: the cancelled queued request {obs.request_id!r} was still handed to the backend")
    # As many responses dropped as it still had to produce ('skipping response generation' lines carry no
    # request id): it may have run to its end within the allowance, which neither a release in time nor
    # the silence after it tells from a stop.
    finished = obs.remaining is not None and lg.skipped_total >= obs.remaining
    if finished:
        t.info(f"log: {lg.skipped_total} response(s) produced and dropped after {ref}, as many as request "
               f"{obs.request_id!r} still had to produce ({obs.remaining}): it may have run to its end")  # fmt: skip
    _release_rule(obs, lg, ref, t, finished)
    _late_responses_rule(obs, lg, ref, t, finished)


def _release_rule(obs: CaseObservation, lg: LogObservation, ref: str, t: _Tally, finished: bool) -> None:
    """The backend released the request within the allowance (stopped) or later (continued)."""
    if lg.released_after_ms is not None:
        if lg.released_after_ms <= obs.allowance_ms and finished:
            t.info(f"log: request {obs.request_id!r} released by the backend {lg.released_after_ms:.0f} ms after "
                   f"{ref}, maybe at its end")  # fmt: skip
        elif lg.released_after_ms <= obs.allowance_ms:
            t.stop(f"log: request {obs.request_id!r} released by the backend {lg.released_after_ms:.0f} ms after {ref}")
        else:
            t.went_on(f"log: request {obs.request_id!r} released only {lg.released_after_ms:.0f} ms after {ref}")
    elif lg.reached_backend is not False:
        t.info(f"log: no RELEASED line for {obs.request_id!r} within {lg.window_ms:.0f} ms of the notification")


def _late_responses_rule(obs: CaseObservation, lg: LogObservation, ref: str, t: _Tally, finished: bool) -> None:
    """Responses still produced past the allowance: continued. Silence counts only where the request,
    at the rate it streamed before the cancel, would have produced several past the allowance."""
    allowance = obs.allowance_ms
    if lg.skipped_after_allowance and lg.others:
        # Another client's cancelled request on the same Triton drops its responses in the same lines: a
        # healthy model was called failing so. (Silence stays evidence: others only add such lines.)
        t.info(f"log: {lg.skipped_after_allowance} response(s) dropped later than {allowance:.0f} ms after {ref}, "
               f"but other requests were cancelled around it ({lg.others} sign(s) in the log): 'skipping response "
               "generation' lines carry no request id, so these decide nothing")  # fmt: skip
        return
    if lg.skipped_after_allowance:
        t.went_on(f"log: {lg.skipped_after_allowance} response(s) still produced later than {allowance:.0f} ms "
                  f"after {ref} (last at {lg.last_skipped_ms:.0f} ms; 'skipping response generation' lines carry "
                  "no request id)")  # fmt: skip
        return
    t.info(f"log: {lg.skipped_total} response(s) produced and dropped within the allowance")
    quiet = lg.window_ms - allowance
    expected = obs.rate_per_s * quiet / 1000.0 if obs.rate_per_s else 0.0
    if obs.remaining is not None:
        # What it still had to produce once the allowance was over: at its rate, the rest of its work may
        # have fitted within the allowance, and then the silence after it shows nothing.
        due = obs.remaining - (obs.rate_per_s or 0.0) * allowance / 1000.0
        expected = min(expected, max(0.0, due))
    if obs.case == "executing" and expected >= 3 and not finished:
        t.stop(f"log: no response produced from {allowance:.0f} to {lg.window_ms:.0f} ms after the notification, "
               f"where the request, streaming {obs.rate_per_s:.0f}/s before the cancel, would have produced about "
               f"{expected:.0f} (Triton logs each as 'skipping response generation')")  # fmt: skip


def _metrics_info(metrics: dict[str, float] | None, t: _Tally) -> None:
    """Counters are reported, never decide: they do not move for every backend."""
    if metrics is None:
        return
    if metrics:
        moved = ", ".join(f"{k} {v:+g}" for k, v in sorted(metrics.items()))
        t.info(f"metrics moved over the window: {moved}")
    else:
        t.info("metrics: no nv_inference_* counter moved (they do not for every backend)")


def _proxy_info(obs: CaseObservation, t: _Tally) -> None:
    """The proxy's view is reported, never decides: no more frames is the "client stopped reading" illusion."""
    if obs.upstream_rst_us is not None or obs.late_frames is not None:
        rst = f"{obs.upstream_rst_us:.0f} µs" if obs.upstream_rst_us is not None else "not forwarded"
        t.info(f"proxy: cancel forwarded upstream {rst} after the client's RST_STREAM; {obs.late_frames or 0} late "
               "frame(s) from Triton after it (no frames is not proof the work stopped)")  # fmt: skip
    if obs.proxy_in_flight is not None:
        # The wire shows responses, not execution: "no response yet" may be queued or executing.
        responded = set(obs.proxy_responded or ())
        ids = ", ".join(f"{r} ({'responded' if r in responded else 'no response yet'})" for r in obs.proxy_in_flight)
        t.info(f"proxy: the cancel ended {len(obs.proxy_in_flight)} request(s) in flight on the call: {ids}")


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

"""Server-side evidence of one cancel: Triton's verbose log and metrics over the observation window,
and what the in-process recording proxy captured. Reading is here; what it means is
:mod:`proxy.triton.server_evidence` (parsing) and :mod:`proxy.cancelcheck.verdict` (deciding)."""

from __future__ import annotations

import time
from pathlib import Path

from proxy.cancelcheck import verdict as vd
from proxy.cancelcheck.options import Setup
from proxy.cancelcheck.verdict import Case
from proxy.ops.evidence import lines_since, metric_deltas, sample_metrics
from proxy.triton.server_evidence import LogObservation, scan_log
from replay.errors import UserError


class LogTail:
    """Lines appended to a file after :meth:`mark` (Triton's log is append-only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        """Remember the current end of the file."""
        try:
            self.offset = self.path.stat().st_size
        except OSError as e:
            raise UserError(f"--log {str(self.path)!r} cannot be read: {e.strerror or e}") from None

    def read(self) -> list[str]:
        """The complete lines appended since :meth:`mark`."""
        return lines_since(self.path, self.offset)


def start_window(setup: Setup) -> tuple[LogTail | None, dict[str, float] | None]:
    """Just before a cancel: mark the log's end and sample the metrics (each when asked for)."""
    tail = None
    if setup.opts.log_path is not None:
        tail = LogTail(setup.opts.log_path)
        tail.mark()
    before = None
    if setup.opts.metrics_url is not None and setup.metrics_ok:
        before = metrics_or_none(setup)
    return tail, before


def metrics_or_none(setup: Setup) -> dict[str, float] | None:
    """The ``nv_inference_*`` sample, or None and a note (once) when the endpoint cannot be read."""
    assert setup.opts.metrics_url is not None
    try:
        return sample_metrics(setup.opts.metrics_url)
    except Exception as e:  # a non-HTTP port raises http.client errors, not OSError
        note = f"metrics endpoint {setup.opts.metrics_url} unreadable: {type(e).__name__}: {e}"
        if note not in setup.notes:
            setup.notes.append(note)
        return None


def end_window(
    setup: Setup, tail: LogTail | None, before: dict[str, float] | None, rid: str, t_start: float, case: Case
) -> tuple[LogObservation | None, dict[str, float] | None]:
    """After the cancel of ``rid``: wait out the window from ``t_start`` (the cancel, or for a queued request
    the end of the work ahead of it, when it could reach the backend), then what the log showed and how the
    metrics moved."""
    # The window is what lets work that goes on show itself (log lines, counters).
    remaining = setup.opts.window_s - (time.monotonic() - t_start)
    if remaining > 0 and (tail is not None or before is not None):
        time.sleep(remaining)
    log = None
    if tail is not None:
        try:
            lines = tail.read()
        except OSError as e:
            setup.notes.append(f"--log {str(tail.path)!r} unreadable after the cancel: {e.strerror or e}")
        else:
            log = scan_log(lines, rid, setup.opts.allowance_ms, setup.opts.window_s * 1000.0, case=case)
    deltas = None
    if before is not None:
        after = metrics_or_none(setup)
        if after is not None:
            deltas = metric_deltas(before, after, setup.opts.model)
    return log, deltas


def with_capture(obs: vd.CaseObservation, capture: Path) -> vd.CaseObservation:
    """Add what the proxy recorded about this cancel (cancel record, late frames)."""
    import dataclasses

    from replay.capture import events as ev
    from replay.capture.reader import read_capture

    if obs.skipped is not None:
        return obs
    cancel: ev.CallCancelled | None = None
    late = 0
    for _seq, rec in read_capture([capture]):
        if isinstance(rec, ev.CallCancelled) and obs.request_id in rec.in_flight:
            cancel = rec
        elif isinstance(rec, ev.LateFrameSeen) and cancel is not None and rec.call == cancel.call:
            late += 1
    if cancel is None:
        return dataclasses.replace(obs, not_covered=(*obs.not_covered, "the proxy recorded no cancel for this request"))
    return dataclasses.replace(
        obs, upstream_rst_us=cancel.upstream_rst_us, late_frames=late,
        proxy_in_flight=tuple(cancel.in_flight), proxy_responded=tuple(cancel.responded),
    )  # fmt: skip

"""Server-side evidence after each forwarded cancel (``triton-tap record --evidence``).

For every cancel the proxy forwarded upstream, one background task (named, tracked, never leaked)
watches for ``--evidence-window`` seconds: the ``nv_inference_*`` counters of Triton's metrics
endpoint (sampled at the cancel and at the end) and/or the lines appended to Triton's verbose log
that mention cancellation, skipped responses or a request id that was in flight. The result is one
``evidence`` record per source, tied to the cancel by call id and time. Nothing here runs on the
forwarding path: the relay only hands over the cancel record (and a log offset taken at once).
"""

from __future__ import annotations

import asyncio
import http.client
import os
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from proxy.triton.server_evidence import NOTIFIED, SKIPPED, parse_metrics
from replay.capture import events as ev
from replay.errors import UserError

log = structlog.get_logger("triton_tap.evidence")

#: At most this many cancels are watched at once; later ones get an `evidence` record saying so.
MAX_WINDOWS = 256
MAX_LINES = 200


@dataclass(frozen=True)
class EvidenceSpec:
    """What ``--evidence`` asked for."""

    metrics_url: str | None = None
    log_path: Path | None = None
    window_s: float = 5.0


def parse_evidence(text: str, window_s: float) -> EvidenceSpec:
    """``metrics=URL,log=PATH`` (either or both) -> spec, or :class:`UserError`."""
    metrics: str | None = None
    path: Path | None = None
    seen: set[str] = set()
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not value:
            raise UserError(f"--evidence takes metrics=URL and/or log=PATH, got {part!r}")
        if key in seen:
            raise UserError(f"--evidence names {key}= twice in {text!r}")
        seen.add(key)
        if key == "metrics":
            if not value.startswith(("http://", "https://")):
                raise UserError(f"--evidence metrics= must be an http(s) URL, got {value!r}")
            metrics = value
        elif key == "log":
            path = Path(value)
            if not path.is_file():
                raise UserError(f"--evidence log={value!r} is not a readable file")
        else:
            raise UserError(f"--evidence: unknown source {key!r} (metrics, log)")
    return EvidenceSpec(metrics_url=metrics, log_path=path, window_s=window_s)


def probe_metrics(url: str, timeout: float = 3.0) -> str | None:
    """Why ``url`` does not answer as a metrics endpoint now, or None when it does (a start-up check)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            resp.read()
    except Exception as e:  # any failure is only a warning: the endpoint may come up later
        return f"{type(e).__name__}: {e}"
    return None


def sample_metrics(url: str, timeout: float = 5.0) -> dict[str, float]:
    """Every ``nv_inference_*`` series of the Prometheus endpoint (ValueError: it did not answer HTTP)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return parse_metrics(resp.read().decode("utf-8", "replace"))
    except http.client.HTTPException as e:
        # http.client's message quotes what came instead (a gRPC port's HTTP/2 bytes, NULs and all): a
        # report's note or a record's error would carry them.
        raise ValueError(f"not an HTTP answer ({type(e).__name__})") from None


def metric_deltas(before: dict[str, float], after: dict[str, float], model: str | None = None) -> dict[str, float]:
    """The series that changed (optionally only those labelled with ``model``)."""
    tag = f'model="{model}"' if model else ""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if tag in k and v != before.get(k, 0.0)}


def lines_since(path: Path, offset: int) -> list[str]:
    """The complete lines appended to ``path`` after byte ``offset`` (Triton's log is append-only)."""
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    return data[: data.rfind(b"\n") + 1].decode("utf-8", "replace").splitlines()


def _log_lines(path: Path, offset: int, ids: list[str]) -> tuple[list[str], int]:
    tags = [f"[request id: {i}]" for i in ids if i]
    kept: list[str] = []
    skipped = 0
    for line in lines_since(path, offset):
        if SKIPPED in line:
            skipped += 1
        elif NOTIFIED not in line and not any(t in line for t in tags):
            continue
        if len(kept) < MAX_LINES:
            kept.append(line)
    return kept, skipped


class EvidenceCollector:
    """Watches a window after each forwarded cancel; emits ``evidence`` records on the loop."""

    def __init__(self, spec: EvidenceSpec, emit: Callable[[Any], None]) -> None:
        self.spec = spec
        self.emit = emit
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = asyncio.Event()
        # call -> (cancel t_ns, window end t_ns) of every window open, and of those ended that an open one
        # overlaps: the `overlapping` field (a later window's log lines include an earlier one's work)
        self._windows: dict[str, tuple[int, int]] = {}
        self._open: set[str] = set()
        # call -> size of Triton's log just before the cancel went upstream
        self._offsets: dict[str, int] = {}

    def mark(self, call: str) -> None:
        """A cancel of ``call`` is about to be forwarded (on the loop): remember where the log ends."""
        if self.spec.log_path is not None and not self._closing.is_set():
            if len(self._offsets) >= 4 * MAX_WINDOWS:
                # A mark whose reset then failed is never collected: forget the oldest.
                del self._offsets[next(iter(self._offsets))]
            try:
                self._offsets[call] = os.stat(self.spec.log_path).st_size
            except OSError:
                self._offsets[call] = -1

    def notify(self, rec: ev.CallCancelled) -> None:
        """A cancel was forwarded upstream (called on the loop, from the capture sink)."""
        if self._closing.is_set():
            return
        offset = self._offsets.pop(rec.call, -1)
        if len(self._tasks) >= MAX_WINDOWS:
            for source in self._sources():
                self.emit(ev.EvidenceRecorded(
                    t_ns=time.time_ns(), call=rec.call, cancel_t_ns=rec.t_ns, source=source, window_ms=0.0,
                    in_flight=list(rec.in_flight), error=f"not watched: {MAX_WINDOWS} cancels already being watched",
                ))  # fmt: skip
            return
        end = rec.t_ns + int(self.spec.window_s * 1e9)
        self._windows[rec.call] = (rec.t_ns, end)
        self._open.add(rec.call)
        task = asyncio.get_running_loop().create_task(self._watch(rec, offset), name=f"triton-tap-evidence-{rec.call}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _sources(self) -> list[Any]:
        out: list[Any] = []
        if self.spec.metrics_url is not None:
            out.append("metrics")
        if self.spec.log_path is not None:
            out.append("log")
        return out

    async def _watch(self, rec: ev.CallCancelled, offset: int) -> None:
        try:
            await self._sample(rec, offset)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # evidence must never fail the relay or leave a task error
            log.warning("evidence_failed", call=rec.call, error=f"{type(e).__name__}: {e}")
            self._ended(rec.call)
            for source in self._sources():
                self.emit(ev.EvidenceRecorded(
                    t_ns=time.time_ns(), call=rec.call, cancel_t_ns=rec.t_ns, source=source, window_ms=0.0,
                    in_flight=list(rec.in_flight), error=f"evidence failed: {type(e).__name__}: {e}",
                ))  # fmt: skip

    async def _sample(self, rec: ev.CallCancelled, offset: int) -> None:
        t0 = time.monotonic()
        before: dict[str, float] | None = None
        before_error: str | None = None
        url = self.spec.metrics_url
        if url is not None:
            try:
                before = await asyncio.to_thread(sample_metrics, url)
            except Exception as e:  # a non-HTTP port raises http.client errors, not OSError
                before_error = f"metrics endpoint unreadable: {type(e).__name__}: {e}"
        try:
            # Shutdown ends the window early; the record then says how long it really was.
            await asyncio.wait_for(self._closing.wait(), max(0.0, self.spec.window_s - (time.monotonic() - t0)))
        except TimeoutError:
            pass
        window_ms = (time.monotonic() - t0) * 1000.0
        start, end = self._windows.get(rec.call, (rec.t_ns, rec.t_ns))
        end = min(end, start + int(window_ms * 1e6))  # (cut short at shutdown)
        # Every other cancel whose window meets this one, before or after it: Triton's skipped-response lines
        # carry no request id, so what this window read may be their work.
        overlapping = sorted(c for c, (t, e) in self._windows.items() if c != rec.call and t <= end and e >= start) or None
        self._ended(rec.call)
        common: dict[str, Any] = {
            "call": rec.call, "cancel_t_ns": rec.t_ns, "window_ms": window_ms, "in_flight": list(rec.in_flight),
            "overlapping": overlapping,
        }  # fmt: skip
        if url is not None:
            deltas: dict[str, float] | None = None
            error = before_error
            if before is not None:
                try:
                    deltas = metric_deltas(before, await asyncio.to_thread(sample_metrics, url))
                except Exception as e:  # as above
                    error = f"metrics endpoint unreadable: {type(e).__name__}: {e}"
            self.emit(ev.EvidenceRecorded(t_ns=time.time_ns(), source="metrics", counters=deltas, error=error, **common))
        path = self.spec.log_path
        if path is not None:
            if offset < 0:
                self.emit(ev.EvidenceRecorded(t_ns=time.time_ns(), source="log", error=f"{path} unreadable", **common))
                return
            try:
                lines, skipped = await asyncio.to_thread(_log_lines, path, offset, list(rec.in_flight))
            except (OSError, ValueError) as e:
                self.emit(ev.EvidenceRecorded(t_ns=time.time_ns(), source="log", error=f"{path}: {e}", **common))
                return
            self.emit(ev.EvidenceRecorded(
                t_ns=time.time_ns(), source="log", lines=lines, skipped_responses=skipped, **common,
            ))  # fmt: skip

    def _ended(self, call: str) -> None:
        """``call``'s window is over: kept while an open window began before it ended, for its `overlapping`."""
        self._open.discard(call)
        first = min((self._windows[c][0] for c in self._open if c in self._windows), default=None)
        for c in [c for c, (_t, e) in self._windows.items() if c not in self._open and (first is None or e < first)]:
            del self._windows[c]

    async def close(self) -> None:
        """End every window now (records written with their shortened window), wait for them."""
        self._closing.set()
        tasks = list(self._tasks)
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=10)
            for t in pending:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if tasks:
            log.info("evidence_windows_closed", count=len(tasks))

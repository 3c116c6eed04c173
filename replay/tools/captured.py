"""A capture read whole for ``serve`` and ``diff``: per-call scripts, matchable requests, outcomes.

One pass over the records feeds :class:`~replay.machine.tracker.Tracker` (the outcomes ``replay check``
reports, and which request each response belongs to) and keeps, per call, its request and
response messages and how it ended. Unlike ``check`` this holds the capture in memory (payloads
included), which is what a mock server needs to answer from it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

from replay.capture import events as ev
from replay.capture.events import STATUS_FOR_CAUSE
from replay.capture.methods import INFER, STREAM_INFER, short_method
from replay.machine.outcomes import RequestOutcome, TrackResult
from replay.machine.tracker import CaptureSource, Tracker, open_source
from replay.tools.match import Candidate, Key, input_hash_of_bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class CallEnd:
    """How a captured call ended, at the point the client learned it."""

    t_ns: int  # the cancel record's time when there is one (the captured point), else call_end's
    seq: int
    status: str
    details: str | None
    cause: str
    trailers: list[list[str]] | None
    initial_metadata: list[list[str]] | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Response:
    """One captured server message of a call, with the request it answers (null when unattributable)."""

    seq: int
    record: ev.MessageSeen
    request_seq: int | None


@dataclass(kw_only=True)
class CapturedCall:
    """One captured RPC: its messages in capture order and its end."""

    id: str
    method: str
    t_start: int
    timeout_ms: float | None
    requests: list[tuple[int, ev.MessageSeen]] = field(default_factory=list)
    responses: list[Response] = field(default_factory=list)
    end: CallEnd | None = None
    _by_request: dict[int, list[Response]] | None = field(default=None, repr=False)

    def responses_of(self, request_seq: int) -> list[Response]:
        """The responses attributed to the request recorded at ``request_seq``, in capture order."""
        if self._by_request is None:
            self._by_request = {}
            for r in self.responses:
                if r.request_seq is not None:
                    self._by_request.setdefault(r.request_seq, []).append(r)
        return self._by_request.get(request_seq, [])

    @property
    def short_method(self) -> str:
        """The method as people read it (:func:`replay.capture.methods.short_method`)."""
        return short_method(self.method)


@dataclass(kw_only=True)
class LoadedCapture:
    """Everything ``serve`` and ``diff`` need from one or more capture files."""

    calls: dict[str, CapturedCall]
    candidates: list[Candidate]
    outcomes: TrackResult
    payload_modes: set[str]

    @property
    def matchable_by_payload(self) -> bool:
        """Some request can be matched by ``payload`` (its bytes were captured: ``--payload full``),
        or there is no request at all (nothing to complain about)."""
        return not self.candidates or any(c.key.input_hash is not None for c in self.candidates)

    def outcome(self, call: str, seq: int) -> RequestOutcome | None:
        """The ``check`` outcome of the request recorded at ``seq`` on ``call``."""
        return self._outcomes.get((call, seq))

    def __post_init__(self) -> None:
        self._outcomes = {(r.call, r.seq): r for r in self.outcomes.requests}
        self._requests = {(c.id, seq): rec for c in self.calls.values() for seq, rec in c.requests}

    def request(self, call: str, seq: int) -> ev.MessageSeen:
        """The captured request message recorded at ``seq`` on ``call``."""
        return self._requests[call, seq]


def request_key(rec: ev.MessageSeen, kind: str) -> Key:
    """The matching key of a captured request message."""
    digest: str | None = None
    if rec.payload is not None and not rec.payload_truncated and not rec.compressed:
        try:
            digest = input_hash_of_bytes(base64.b64decode(rec.payload))
        except Exception:  # a payload that does not parse cannot be matched on; the labels still can
            digest = None
    return Key(kind=kind, model=rec.model, request_id=rec.request_id, input_hash=digest)


def load(capture: CaptureSource) -> LoadedCapture:
    """Read a capture (paths or records) whole; raises :class:`~replay.errors.CaptureError` when unreadable."""
    records, reader = open_source(capture)
    # (call, response seq) -> seq of the request the tracker attributed the response to
    attribution: dict[tuple[str, int], int] = {}
    tracker = Tracker(on_response=lambda cid, req_seq, seq, _rec: attribution.__setitem__((cid, seq), req_seq))
    calls: dict[str, CapturedCall] = {}
    cancels: dict[str, tuple[int, ev.CallCancelled]] = {}
    modes: set[str] = set()
    for seq, rec in records:
        tracker.feed(seq, rec)
        if isinstance(rec, ev.CaptureStarted):
            modes.add(str(rec.options.get("payload", "unknown")))
            continue
        if isinstance(rec, ev.CallStarted):
            cid = tracker.qualified(rec.call)
            calls.setdefault(cid, CapturedCall(id=cid, method=rec.method, t_start=rec.t_ns, timeout_ms=rec.timeout_ms))
            continue
        raw = getattr(rec, "call", None)
        if raw is None:
            continue
        call = calls.get(tracker.qualified(raw))
        if call is None or call.end is not None:
            continue
        if isinstance(rec, ev.MessageSeen):
            if rec.dir == "c2s":
                call.requests.append((seq, rec))
            else:
                call.responses.append(
                    Response(seq=seq, record=rec, request_seq=attribution.get((call.id, seq)))
                )
        elif isinstance(rec, ev.CallCancelled):
            cancels[call.id] = (seq, rec)
        elif isinstance(rec, ev.CallEnded):
            cancelled = cancels.pop(call.id, None)
            t = cancelled[1].t_ns if cancelled is not None else rec.t_ns
            call.end = CallEnd(t_ns=t, seq=seq, status=rec.status, details=rec.details, cause=rec.cause,
                               trailers=rec.trailers, initial_metadata=rec.initial_metadata)  # fmt: skip
    for cid, (cseq, cancel) in cancels.items():
        # The capture stops between the cancel and its call_end: the cancel says how it ended.
        calls[cid].end = CallEnd(t_ns=cancel.t_ns, seq=cseq, status=STATUS_FOR_CAUSE.get(cancel.cause, "UNKNOWN"),
                                 details=None, cause=cancel.cause, trailers=None, initial_metadata=None)  # fmt: skip
    outcomes = tracker.finish(reader.gaps, reader.warnings) if reader is not None else tracker.finish()
    candidates: list[Candidate] = []
    positions: dict[tuple[str, str | None], int] = {}
    for call in calls.values():
        if call.method not in (STREAM_INFER, INFER):
            continue
        kind = "stream" if call.method == STREAM_INFER else "unary"
        for seq, rec in call.requests:
            if rec.request_id is None:  # unlabelled (payload none) or undecoded: nothing to match on
                continue
            pos = positions.get((kind, rec.model), 0)
            positions[kind, rec.model] = pos + 1
            candidates.append(Candidate(key=request_key(rec, kind), call=call.id, seq=seq, position=pos))
            if kind == "unary":
                break
    return LoadedCapture(calls=calls, candidates=candidates, outcomes=outcomes, payload_modes=modes)

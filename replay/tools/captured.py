"""A capture read once, streaming, for ``serve`` and ``diff``: per-request summaries, never records.

One pass over the records feeds :class:`~replay.machine.tracker.Tracker` (the outcomes ``replay check``
reports, and which request each response belongs to) and keeps the match key of every inference
request (:class:`~replay.tools.match.Candidate`). That is all ``diff`` needs (:func:`summarize`): its
memory is the tracker's per-request outcomes plus one candidate per request, whatever the number of
responses. ``serve`` needs more (what to answer): it passes an observer that sees every record once,
in the same pass, and keeps what it needs (:mod:`replay.tools.serve.index`: a compact index, the
answers on disk).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from replay.capture import events as ev
from replay.capture.methods import INFER, STREAM_INFER
from replay.capture.payload import has_payload, payload_bytes
from replay.machine.outcomes import RequestOutcome, TrackResult
from replay.machine.tracker import CaptureSource, Tracker, open_source
from replay.tools.match import Candidate, Key, input_hash_of_bytes

#: ``observer(seq, record, call, request_seq)``, called for every record of a call after the tracker
#: saw it: ``call`` is its qualified id (as ``replay check`` names it); ``request_seq`` is, for a
#: response, the record of the request the tracker attributed it to (None: unattributable, or not a
#: response). Records of calls whose ``call_start`` was not captured, or after their ``call_end``,
#: are not passed on.
Observer = Callable[[int, ev.Record, str, int | None], None]


@dataclass(kw_only=True)
class CaptureSummary:
    """What ``diff`` (and the request matching of ``serve``) needs from one or more capture files."""

    candidates: list[Candidate]
    outcomes: TrackResult
    payload_modes: set[str]
    _outcomes: dict[tuple[str, int], RequestOutcome] | None = field(default=None, repr=False)

    @property
    def matchable_by_payload(self) -> bool:
        """Some request can be matched by ``payload`` (its bytes were captured: ``--payload full``),
        or there is no request at all (nothing to complain about)."""
        return not self.candidates or any(c.key.input_hash is not None for c in self.candidates)

    def outcome(self, call: str, seq: int) -> RequestOutcome | None:
        """The ``check`` outcome of the request recorded at ``seq`` on ``call``."""
        if self._outcomes is None:
            self._outcomes = {(r.call, r.seq): r for r in self.outcomes.requests}
        return self._outcomes.get((call, seq))


def request_key(rec: ev.MessageSeen, kind: str) -> Key:
    """The matching key of a captured request message."""
    digest: str | None = None
    if has_payload(rec) and not rec.payload_truncated and not rec.compressed:
        data = payload_bytes(rec)  # a side file that cannot give them is a CaptureError, not "no match"
        try:
            digest = input_hash_of_bytes(data or b"")
        except Exception:  # a payload that does not parse cannot be matched on; the labels still can
            digest = None
    model = sys.intern(rec.model) if rec.model is not None else None  # one string per model, not per request
    return Key(kind=kind, model=model, request_id=rec.request_id, input_hash=digest)


class _Requests:
    """The matchable requests of each call, kept per call so candidates come out call by call."""

    def __init__(self) -> None:
        self.kinds: dict[str, str | None] = {}  # call -> stream | unary | None (not an inference call)
        self.ended: set[str] = set()
        self.by_call: dict[str, list[tuple[int, Key]]] = {}

    def started(self, cid: str, method: str) -> None:
        kind = "stream" if method == STREAM_INFER else "unary" if method == INFER else None
        self.kinds.setdefault(cid, kind)

    def request(self, cid: str, seq: int, rec: ev.MessageSeen) -> None:
        kind = self.kinds[cid]
        if kind is None or rec.request_id is None:  # unlabelled (payload none) or undecoded: nothing to match on
            return
        keys = self.by_call.setdefault(cid, [])
        if kind == "unary" and keys:  # a unary call answers its first request
            return
        keys.append((seq, request_key(rec, kind)))

    def candidates(self) -> list[Candidate]:
        """In call order (``call_start``), each call's requests in capture order; positions per kind and model."""
        out: list[Candidate] = []
        positions: dict[tuple[str, str | None], int] = {}
        for cid in self.kinds:
            for seq, key in self.by_call.get(cid, ()):
                pos = positions.get((key.kind, key.model), 0)
                positions[key.kind, key.model] = pos + 1
                out.append(Candidate(key=key, call=cid, seq=seq, position=pos))
        return out


def summarize(capture: CaptureSource, observe: Observer | None = None) -> CaptureSummary:
    """Read a capture (paths or records) in one streaming pass; raises :class:`~replay.errors.CaptureError`
    when unreadable. ``observe`` sees every record of a call (see :data:`Observer`)."""
    records, reader = open_source(capture)
    # The tracker names the request a response answers while it is fed that response: kept for one record.
    last = [-1, -1]  # [response seq, request seq]

    def attributed(_cid: str, req_seq: int, seq: int, _rec: ev.MessageSeen) -> None:
        last[0], last[1] = seq, req_seq

    tracker = Tracker(on_response=attributed)
    requests = _Requests()
    modes: set[str] = set()
    for seq, rec in records:
        last[0] = -1  # seqs are per worker chain: a stale attribution of an equal seq must not count
        tracker.feed(seq, rec)
        if isinstance(rec, ev.CaptureStarted):
            modes.add(str(rec.options.get("payload", "unknown")))
            continue
        raw = getattr(rec, "call", None)
        if raw is None:
            continue
        cid = tracker.qualified(raw)
        if isinstance(rec, ev.CallStarted):
            if cid in requests.kinds:
                continue
            requests.started(cid, rec.method)
        elif cid not in requests.kinds or cid in requests.ended:
            continue
        elif isinstance(rec, ev.CallEnded):
            requests.ended.add(cid)
        elif isinstance(rec, ev.MessageSeen) and rec.dir == "c2s":
            requests.request(cid, seq, rec)
        if observe is not None:
            is_response = isinstance(rec, ev.MessageSeen) and rec.dir == "s2c" and last[0] == seq
            observe(seq, rec, cid, last[1] if is_response else None)
    outcomes = tracker.finish(reader.gaps, reader.warnings) if reader is not None else tracker.finish()
    return CaptureSummary(candidates=requests.candidates(), outcomes=outcomes, payload_modes=modes)

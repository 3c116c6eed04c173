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
from replay.capture.methods import HTTP_INFERENCE, INFER, START_NOT_READ, STREAM_INFER, http_call, http_kind, protocol
from replay.capture.payload import has_payload, http_body, http_encoding, message_bytes, payload_bytes
from replay.capture.shm import request_regions
from replay.machine.outcomes import RequestOutcome, TrackResult
from replay.machine.tracker import CaptureSource, Tracker, open_source
from replay.tools.match import Candidate, Key, payload_key

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
    #: The HTTP inference requests, key kinds ``http infer``, ``http generate_stream``... (:func:`match_kind`):
    #: a gRPC request and an HTTP one never match.
    http_candidates: list[Candidate] = field(default_factory=list)
    #: Calls the recording proxy refused unprocessed (``call_end.refused``: they crossed a GOAWAY, and their
    #: clients may have sent them again as calls of their own): no candidates, and ``diff`` leaves them out.
    refused: frozenset[str] = frozenset()
    _outcomes: dict[tuple[str, int], RequestOutcome] | None = field(default=None, repr=False)

    @property
    def matchable_by_payload(self) -> bool:
        """Some request can be matched by ``payload`` (its bytes were captured: ``--payload full``),
        or there is no request at all (nothing to complain about)."""
        every = (*self.candidates, *self.http_candidates)
        return not every or any(c.key.input_hash is not None for c in every)

    def outcome(self, call: str, seq: int) -> RequestOutcome | None:
        """The ``check`` outcome of the request recorded at ``seq`` on ``call``."""
        if self._outcomes is None:
            self._outcomes = {(r.call, r.seq): r for r in self.outcomes.requests}
        return self._outcomes.get((call, seq))


def match_kind(method: str) -> str | None:
    """The matching kind of a call's requests: ``stream`` / ``unary`` (gRPC), ``http <kind>`` (an HTTP
    inference endpoint, :data:`~replay.capture.methods.HttpKind`), None for a call that carries none.

    Kinds keep protocols and endpoints apart: a generate_stream request never stands for a
    ModelStreamInfer one, nor for a generate one (the client saw different answers).
    """
    if method == STREAM_INFER or method == START_NOT_READ:
        return "stream"
    if method == INFER:
        return "unary"
    kind = http_kind(method)
    return f"http {kind}" if kind in HTTP_INFERENCE else None


def request_key(rec: ev.MessageSeen, kind: str, method: str, encoding: str | None = None) -> tuple[Key, tuple[str, ...]]:
    """The matching key of the captured request message ``rec`` of a call of ``method`` (its :func:`match_kind` ``kind``),
    and the shared-memory regions it names (:func:`replay.capture.shm.request_regions`; ``()`` without its bytes).

    An HTTP request is its call's: a body the labeller could not read still stands for it (as the tracker
    tracks it), with the path's model when the body names none. ``encoding``: an HTTP call's request
    Content-Encoding (:func:`~replay.capture.payload.http_encoding` of its ``call_start`` headers).
    """
    digest: str | None = None
    regions: tuple[str, ...] = ()
    if protocol(method) == "grpc":
        # As the server read it (a compressed one inflated), as serve's client's request is compared. A side
        # file that cannot give the bytes is a CaptureError, not "no match".
        data = message_bytes(rec)
        if data is not None:
            digest = payload_key(method, data)
            regions = request_regions(method, data)
    elif has_payload(rec) and not rec.payload_truncated:
        # The body as sent, decompressed (gzip, deflate) by the rule the labels (its request_id) read it with
        # and serve reads its client's body with, so that a compressed request matches by payload too. One
        # whose encoding was not read (br, bytes that do not decompress) has no hash, as it has no id.
        stored = payload_bytes(rec) or b""
        data, _ = http_body(stored, encoding if rec.compressed else None)
        if data is not None:
            digest = payload_key(method, data)
            regions = request_regions(method, data)
    model, version = rec.model, rec.model_version
    if kind.startswith("http "):
        # The path's version (gRPC: the request's own field): the body names none
        call = http_call(method)
        if model is None:
            model = call.model if call is not None else None
        version = call.version if call is not None else None
    model = sys.intern(model) if model is not None else None  # one string per model, not per request
    return Key(kind=kind, model=model, request_id=rec.request_id, input_hash=digest, version=version or ""), regions


class _Requests:
    """The matchable requests of each call, kept per call so candidates come out call by call."""

    def __init__(self) -> None:
        self.kinds: dict[str, str | None] = {}  # call -> stream | unary | http <kind> | None (no inference call)
        self.methods: dict[str, str] = {}  # call -> method, while a request of it may still come (payload_key reads it)
        self.encodings: dict[str, str] = {}  # HTTP call -> its request's Content-Encoding, until its request is read
        self.ended: set[str] = set()
        self.by_call: dict[str, list[tuple[int, Key, tuple[str, ...]]]] = {}

    def started(self, cid: str, method: str, encoding: str | None = None) -> None:
        kind = self.kinds[cid] = match_kind(method)
        if kind is not None:
            self.methods[cid] = sys.intern(method)
            if encoding is not None:
                self.encodings[cid] = encoding

    def end(self, cid: str) -> None:
        self.ended.add(cid)
        self.methods.pop(cid, None)
        self.encodings.pop(cid, None)

    def request(self, cid: str, seq: int, rec: ev.MessageSeen) -> None:
        kind = self.kinds[cid]
        if kind is None:
            return
        http = kind.startswith("http ")
        if rec.request_id is None and not http:  # unlabelled (payload none) or undecoded: nothing to match on
            return
        keys = self.by_call.setdefault(cid, [])
        if kind != "stream" and keys:  # a unary call answers its first request; an HTTP call carries one
            return
        method = self.methods[cid] if kind == "stream" else self.methods.pop(cid)  # the call's one request: done
        keys.append((seq, *request_key(rec, kind, method, self.encodings.pop(cid, None))))

    def candidates(self, *, http: bool = False) -> list[Candidate]:
        """In call order (``call_start``), each call's requests in capture order; positions per kind and model.

        ``http``: the HTTP requests instead of the gRPC ones.
        """
        out: list[Candidate] = []
        positions: dict[tuple[str, str | None], int] = {}
        for cid, kind in self.kinds.items():
            if kind is None or kind.startswith("http ") is not http:
                continue
            for seq, key, regions in self.by_call.get(cid, ()):
                pos = positions.get((key.kind, key.model), 0)
                positions[key.kind, key.model] = pos + 1
                out.append(Candidate(key=key, call=cid, seq=seq, position=pos, regions=regions))
        return out


def summarize(capture: CaptureSource, observe: Observer | None = None) -> CaptureSummary:
    """Read a capture (paths or records) in one streaming pass; raises :class:`~replay.errors.CaptureError`
    when unreadable. ``observe`` sees every record of a call (see :data:`Observer`)."""
    records, reader = open_source(capture)
    # The tracker names the request a response answers while it is fed that response: kept for one record.
    last = [-1, -1]  # [response seq, request seq]

    def attributed(_cid: str, req_seq: int, seq: int, _rec: ev.MessageSeen) -> None:
        last[0], last[1] = seq, req_seq

    requests = _Requests()
    # A call whose call_start was not read is taken up by the tracker at its first message: its
    # requests are matched as well as judged (a stream's, as the tracker reads it).
    tracker = Tracker(on_response=attributed, on_adopt=lambda cid, _conn, _rec: requests.started(cid, START_NOT_READ))
    tracker.watch(reader)
    modes: set[str] = set()
    refused: set[str] = set()
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
            requests.started(cid, rec.method, http_encoding(rec.metadata) if rec.protocol == "http" else None)
        elif cid not in requests.kinds or cid in requests.ended:
            continue
        elif isinstance(rec, ev.CallEnded):
            requests.end(cid)
            if ev.was_refused(rec):
                refused.add(cid)
                requests.by_call.pop(cid, None)
        elif isinstance(rec, ev.MessageSeen) and rec.dir == "c2s":
            requests.request(cid, seq, rec)
        if observe is not None:
            is_response = isinstance(rec, ev.MessageSeen) and rec.dir == "s2c" and last[0] == seq
            observe(seq, rec, cid, last[1] if is_response else None)
    outcomes = tracker.finish(reader.gaps, reader.warnings) if reader is not None else tracker.finish()
    return CaptureSummary(candidates=requests.candidates(), outcomes=outcomes, payload_modes=modes,
                          http_candidates=requests.candidates(http=True), refused=frozenset(refused))

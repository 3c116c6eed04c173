"""What ``serve`` keeps of a capture: a compact index in memory, the answers on disk (pure: no sockets).

One streaming pass (:func:`replay.tools.captured.summarize`, with an observer) builds, per captured
call, two integer arrays: its requests (seq, time, labelled) and its responses (seq, time, where the
answer is, whether it holds the real bytes, the next response of the same request). The answer a
response stands for is built once, while reading (the bytes a client will get:
:func:`~replay.tools.serve.responses.answer_bytes`), and written to an unlinked temporary file
(:class:`AnswerStore`); it is read back when a client's request is matched. So ``serve`` holds
:data:`RESPONSE_BYTES` bytes per captured response and :data:`REQUEST_BYTES` per captured request
(plus the per-request summaries every replay tool keeps: the ``check`` outcome and the match key),
never a record: payloads stay on disk.

Why a spill file and not offsets into the capture files: a rotated file may be gzipped (no seek), a
sparse (v2) line is not self-contained (its sticky fields lean on earlier lines), several workers'
files interleave; the spill holds exactly what is sent, and identical answers (the rebuilt answers
of a ``meta`` capture repeat) are written once.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, NamedTuple

from replay.capture import events as ev
from replay.capture.events import cancel_status
from replay.capture.methods import http_call, short_method
from replay.capture.payload import message_bytes
from replay.machine.tracker import CaptureSource
from replay.tools.captured import CaptureSummary, summarize
from replay.tools.serve.responses import (
    Kind,
    answer_bytes,
    answer_kind,
    has_bytes,
    http_answer,
    payload_bytes,
)

#: Index bytes per captured request and per captured response (the arrays' items; the bound serve states).
REQUEST_BYTES = 4 * 8
RESPONSE_BYTES = 6 * 8
_REQ = 4  # request row: t_ns, labelled, first response row, last response row (-1: none)
_RESP = 6  # response row: seq, t_ns, answer offset, answer length (-1: none), real, next row of the request


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
    http_status: int | None = None  # HTTP: the status the client got (None: no response head reached it)
    #: HTTP: the end was Triton's close after the client's FIN (``client_disconnect`` after a ``half_close``), an
    #: answer to the FIN, not an end the client made
    after_fin: bool = False


class Sent(NamedTuple):
    """A captured request message of a call."""

    seq: int
    t_ns: int
    labelled: bool  # it carries a request id (``--payload none`` and undecoded messages do not)


class Answer(NamedTuple):
    """A captured response message, as the bytes to send (read back from the store)."""

    seq: int
    t_ns: int
    data: bytes | None  # the serialized answer; None: it cannot be rebuilt (a meta capture's metadata answer)
    real: bool  # the captured bytes (``--payload full``), not rebuilt from the labels


class AnswerStore:
    """Answer bytes in an unlinked temporary file, read back by offset; identical short answers written once."""

    #: Short answers remembered to write a repeat once; the memo is dropped when it holds this many.
    MEMO = 4096
    MEMO_MAX_BYTES = 512

    def __init__(self, directory: str | None = None) -> None:
        self._f: IO[bytes] = tempfile.TemporaryFile(prefix="triton-tap-serve-", dir=directory)
        self.size = 0  # bytes written
        self._memo: dict[bytes, int] = {}
        self._unflushed = False
        self._last: bytes | None = None
        self._last_at = 0
        #: Rebuilt (meta) answers by what they are built from; the label lists by identity, as the reader
        #: hands on the same objects for a call's repeated sticky fields (kept alive in the value).
        self.rebuilt: dict[tuple[object, ...], tuple[bytes, object, object]] = {}

    def put(self, data: bytes) -> int:
        """Store ``data``; its offset."""
        if data is self._last:  # the same answer object as just now (a rebuilt answer looked up again)
            return self._last_at
        small = len(data) <= self.MEMO_MAX_BYTES
        if small and (at := self._memo.get(data)) is not None:
            self._last, self._last_at = data, at
            return at
        at = self.size
        self._f.write(data)
        self.size += len(data)
        self._unflushed = True
        if small:
            if len(self._memo) >= self.MEMO:
                self._memo.clear()
            self._memo[data] = at
        self._last, self._last_at = data, at
        return at

    def seal(self) -> None:
        """Everything is written: drop the memo of repeats (it is only needed while writing)."""
        self._memo = {}
        self.rebuilt = {}
        self._last = None
        self._f.flush()
        self._unflushed = False

    def get(self, offset: int, length: int) -> bytes:
        """The ``length`` bytes stored at ``offset``."""
        if self._unflushed:
            self._f.flush()
            self._unflushed = False
        return os.pread(self._f.fileno(), length, offset)

    def close(self) -> None:
        """Drop the file."""
        self._f.close()


class CapturedCall:
    """One captured RPC, indexed: its requests, its responses (answers in the store) and its end."""

    __slots__ = ("_last_req", "_req", "_req_seq", "_resp", "_store", "asked", "asked_model", "end", "fin_t", "http", "id",
                 "kind", "method", "t_start", "timeout_ms")  # fmt: skip

    def __init__(self, *, id: str, method: str, t_start: int, timeout_ms: float | None, store: AnswerStore) -> None:
        self.id = id
        self.method = method
        self.t_start = t_start
        self.timeout_ms = timeout_ms
        self.kind: Kind = answer_kind(method)
        #: An HTTP call's request line, read (None: a gRPC call)
        self.http = http_call(method)
        self.end: CallEnd | None = None
        #: When the client's FIN came while the call was open (its ``half_close`` record), else None
        self.fin_t: int | None = None
        #: (offset, length) in the store of the first request's captured bytes (non-inference calls), else None
        self.asked: tuple[int, int] | None = None
        #: The model and version its first request named (a readiness, metadata, config or repository call's
        #: labels: what a capture without the bytes says it asked), else None
        self.asked_model: tuple[str, str | None] | None = None
        self._store = store
        self._req_seq = array("q")  # request seqs, ascending (a call's records are in capture order)
        self._req = array("q")
        self._resp = array("q")
        self._last_req = (-1, 0)  # (request seq, its row): responses of one request come in runs

    @property
    def short_method(self) -> str:
        """The method as people read it (:func:`replay.capture.methods.short_method`)."""
        return short_method(self.method)

    # -- building ------------------------------------------------------------------------------------

    def add_request(self, seq: int, rec: ev.MessageSeen) -> None:
        """A request message of the call (c2s), in capture order."""
        first = not self._req_seq
        self._req_seq.append(seq)
        self._req.extend((rec.t_ns, rec.request_id is not None, -1, -1))
        if first and (self.kind.other is not None or self.http is not None):
            # (gRPC: as the server read it, inflated; an HTTP body only as sent uncompressed, as a client's is compared)
            data = message_bytes(rec) if self.http is None else payload_bytes(rec) if has_bytes(rec) else None
            if data is not None:
                self.asked = (self._store.put(data), len(data))
        if first and rec.model is not None and self.kind.other is not None:
            self.asked_model = (rec.model, rec.model_version)

    def add_response(self, seq: int, rec: ev.MessageSeen, request_seq: int | None) -> None:
        """A response message of the call (s2c), in capture order; ``request_seq``: the request it answers."""
        data, real = self._build(rec)
        at, length = (self._store.put(data), len(data)) if data is not None else (0, -1)
        row = len(self._resp) // _RESP
        self._resp.extend((seq, rec.t_ns, at, length, real, -1))
        if request_seq is None:
            return
        if request_seq == self._last_req[0]:
            i = self._last_req[1]
        else:
            found = self._row(request_seq)
            if found is None:
                return
            i = found
            self._last_req = (request_seq, i)
        base = i * _REQ
        last = self._req[base + 3]
        if last < 0:
            self._req[base + 2] = row
        else:
            self._resp[last * _RESP + 5] = row
        self._req[base + 3] = row

    def _build(self, rec: ev.MessageSeen) -> tuple[bytes | None, bool]:
        # Rebuilding a meta answer (a protobuf message) costs more than reading its record: repeats are
        # looked up first (every response of a stream of one model and output looks the same but for
        # the final flag).
        kind = self.kind
        if self.http is not None:
            return http_answer(self.http.kind, rec)
        if not kind.inference:
            return answer_bytes(kind, rec)
        if (data := message_bytes(rec)) is not None:
            return data, True
        rebuilt = self._store.rebuilt
        key = (kind.name, rec.model, rec.model_version, rec.request_id, rec.final, rec.error, id(rec.outputs),
               id(rec.output_tensors))  # fmt: skip
        hit = rebuilt.get(key)
        if hit is not None:
            return hit[0], False
        data, real = answer_bytes(self.kind, rec)
        if data is not None:
            if len(rebuilt) >= AnswerStore.MEMO:
                rebuilt.clear()
            rebuilt[key] = (data, rec.outputs, rec.output_tensors)
        return data, real

    # -- reading -------------------------------------------------------------------------------------

    def _row(self, seq: int) -> int | None:
        i = bisect_left(self._req_seq, seq)
        return i if i < len(self._req_seq) and self._req_seq[i] == seq else None

    def _answer(self, row: int) -> Answer:
        seq, t_ns, at, length, real, _next = self._resp[row * _RESP : (row + 1) * _RESP]
        data = self._store.get(at, length) if length > 0 else b"" if length == 0 else None
        return Answer(seq, t_ns, data, bool(real))

    def requests(self) -> Iterator[Sent]:
        """The request messages, in capture order."""
        for i, seq in enumerate(self._req_seq):
            yield Sent(seq, self._req[i * _REQ], bool(self._req[i * _REQ + 1]))

    def request_t(self, seq: int) -> int:
        """The captured time of the request recorded at ``seq`` (KeyError: no such request on this call)."""
        i = self._row(seq)
        if i is None:
            raise KeyError((self.id, seq))
        return self._req[i * _REQ]

    @property
    def first_request_t(self) -> int:
        """When the first request was captured (the call's start when it has none)."""
        return self._req[0] if self._req_seq else self.t_start

    @property
    def responses(self) -> int:
        """How many response messages were captured."""
        return len(self._resp) // _RESP

    def first_response(self) -> Answer | None:
        """The first captured response (the answer of a unary call), None when there is none."""
        return self._answer(0) if self._resp else None

    def all_responses(self) -> list[Answer]:
        """Every captured response message, in capture order (an HTTP call's one reply or its events)."""
        return [self._answer(row) for row in range(self.responses)]

    def responses_of(self, request_seq: int) -> list[Answer]:
        """The responses attributed to the request recorded at ``request_seq``, in capture order."""
        i = self._row(request_seq)
        out: list[Answer] = []
        row = self._req[i * _REQ + 2] if i is not None else -1
        while row >= 0:
            out.append(self._answer(row))
            row = self._resp[row * _RESP + 5]
        return out

    def asked_bytes(self) -> bytes | None:
        """The captured bytes of the first request (non-inference calls), None when not captured."""
        return self._store.get(*self.asked) if self.asked is not None else None


@dataclass(kw_only=True)
class LoadedCapture(CaptureSummary):
    """Everything ``serve`` needs: the summary (matching, outcomes) and the indexed calls."""

    calls: dict[str, CapturedCall] = field(default_factory=dict)
    store: AnswerStore | None = None
    _by_method: dict[str, list[CapturedCall]] | None = field(default=None, repr=False)

    def calls_of(self, method: str) -> list[CapturedCall]:
        """The captured calls of ``method`` (a full path), in capture order."""
        if self._by_method is None:
            self._by_method = {}
            for c in self.calls.values():
                self._by_method.setdefault(c.method, []).append(c)
        return self._by_method.get(method, [])

    def close(self) -> None:
        """Drop the answers on disk."""
        if self.store is not None:
            self.store.close()


class _Builder:
    """The observer of the pass: indexes calls, their messages and ends."""

    def __init__(self, store: AnswerStore) -> None:
        self.store = store
        self.calls: dict[str, CapturedCall] = {}
        self.cancels: dict[str, tuple[int, ev.CallCancelled]] = {}

    def __call__(self, seq: int, rec: ev.Record, cid: str, request_seq: int | None) -> None:
        if isinstance(rec, ev.CallStarted):
            self.calls[cid] = CapturedCall(id=cid, method=rec.method, t_start=rec.t_ns, timeout_ms=rec.timeout_ms,
                                           store=self.store)  # fmt: skip
            return
        call = self.calls[cid]
        if isinstance(rec, ev.MessageSeen):
            if rec.dir == "c2s":
                if ev.message_cut(rec.decode_error):
                    return  # what arrived of a request the call's end cut: Triton never had a request
                call.add_request(seq, rec)
            elif not ev.message_cut(rec.decode_error):
                # (Not what arrived of a response the call's end cut: no client had it, nor gets it here.)
                call.add_response(seq, rec, request_seq)
        elif isinstance(rec, ev.HalfClosed):
            if call.http is not None and call.fin_t is None and call.end is None:
                call.fin_t = rec.t_ns
        elif isinstance(rec, ev.CallCancelled):
            self.cancels[cid] = (seq, rec)
        elif isinstance(rec, ev.CallEnded):
            cancelled = self.cancels.pop(cid, None)
            t = cancelled[1].t_ns if cancelled is not None else rec.t_ns
            # (The details say it of a FIN that came before the call began too: a request pipelined behind one
            # still being answered; a capture written before they did says it only by the half_close.)
            after_fin = (
                call.http is not None
                and rec.cause == "client_disconnect"
                and (call.fin_t is not None or rec.details == ev.HALF_CLOSE_DETAILS)
            )
            call.end = CallEnd(t_ns=t, seq=seq, status=rec.status, details=rec.details, cause=rec.cause,
                               trailers=rec.trailers, initial_metadata=rec.initial_metadata,
                               http_status=rec.http_status, after_fin=after_fin)  # fmt: skip

    def finish(self) -> None:
        for cid, (cseq, cancel) in self.cancels.items():
            # The capture stops between the cancel and its call_end: the cancel says how it ended.
            call = self.calls[cid]
            after_fin = call.http is not None and cancel.cause == "client_disconnect" and call.fin_t is not None
            call.end = CallEnd(t_ns=cancel.t_ns, seq=cseq, status=cancel_status(cancel.cause, cancel.rst_code), details=None, cause=cancel.cause,
                               trailers=None, initial_metadata=None, after_fin=after_fin)  # fmt: skip


def load(capture: CaptureSource, *, spill_dir: str | None = None) -> LoadedCapture:
    """Index a capture (paths or records) for ``serve`` in one streaming pass; raises
    :class:`~replay.errors.CaptureError` when unreadable. ``spill_dir``: where the answers go (default: TMPDIR)."""
    store = AnswerStore(spill_dir)
    builder = _Builder(store)
    try:
        summary = summarize(capture, builder)
    except BaseException:
        store.close()
        raise
    builder.finish()
    store.seal()
    return LoadedCapture(candidates=summary.candidates, outcomes=summary.outcomes, payload_modes=summary.payload_modes,
                         http_candidates=summary.http_candidates, calls=builder.calls, store=store)  # fmt: skip

"""The replay of one incoming ``ModelStreamInfer`` call: match, schedule, write, end as captured."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from replay.capture.shm import parsed_regions
from replay.tools.grpcstatus import grpc_metadata, status_code, status_details
from replay.tools.serve.index import CapturedCall
from replay.tools.serve.responses import Undecodable, delay_s, request_key
from replay.tools.serve.session import Session

log = logging.getLogger("triton_tap.serve")


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    n: int
    message: Any = field(compare=False)
    call: str = field(compare=False)


class Stream:
    """The replay of one incoming ModelStreamInfer call."""

    def __init__(self, session: Session, context: Any, name: str) -> None:
        self.session = session
        self.context = context
        self.name = name
        self.pending: list[_Due] = []
        self.counter = itertools.count()
        self.primary: CapturedCall | None = None
        self.arrived: dict[int, float] = {}  # captured request seq (primary call) -> arrival (monotonic)
        self.half_closed = False
        self._before_end: list[int] = []  # the primary call's requests captured before its end
        self._written = 0.0  # when the last request came or response went out (monotonic): fast ends from there
        self._shm_noted = False  # its shared-memory warning was given (once per call)
        #: The pending answer captured last (while anything is pending: the last of them to go).
        self._latest: _Due | None = None

    def _schedule(self, call: CapturedCall, req_seq: int, req_t: int, incoming_id: str, now: float) -> None:
        speed = self.session.speed
        for answer in call.responses_of(req_seq):
            assert answer.data is not None  # every ModelStreamInfer response has an answer
            msg = pb.ModelStreamInferResponse.FromString(answer.data)
            self.session.note_dataless(answer.real, "ModelStreamInfer")
            if not self.session.keep_ids:
                msg.infer_response.id = incoming_id
            # fast: everything is due at once, so the heap orders what is pending by captured seq,
            # which keeps the captured interleaving among the requests that have arrived.
            at = 0.0 if speed is None else now + delay_s(req_t, answer.t_ns, speed)
            if speed is not None and self.pending:
                at = self._in_captured_order(answer.seq, at)
            due = _Due(at, answer.seq, next(self.counter), msg, call.id)
            heapq.heappush(self.pending, due)
            if self._latest is None or len(self.pending) == 1 or due.seq > self._latest.seq:
                self._latest = due

    def _in_captured_order(self, seq: int, at: float) -> float:
        """When the answer of captured ``seq``, due at ``at``, may go: not before a pending one captured earlier;
        and a pending one captured later waits for it. Each answer is timed from its own request, and requests
        that arrive closer together than captured would otherwise be answered in an order the server never gave
        (a non-decoupled model answers a stream's requests in turn).

        What is pending is due in captured order, so the one captured last is due last and goes last (at one
        time, the heap takes the lower seq first): an answer captured after it, the usual case (a request's
        answers are pushed in captured order), only waits for it, without a look at the others."""
        latest = self._latest
        if latest is not None and seq > latest.seq:
            return max(at, latest.at)
        at = max([at, *(d.at for d in self.pending if d.seq < seq)])
        moved = False
        for d in self.pending:
            if d.seq > seq and d.at < at:
                d.at, moved = at, True
        if moved:
            heapq.heapify(self.pending)
        return at

    def _end_reachable(self) -> bool:
        """A captured non-OK end is next once the requests captured before it arrived (or can no longer)."""
        call = self.primary
        if call is None or call.end is None or call.end.status == "OK":
            return False
        # The client may still send what was sent before the captured end.
        return self.half_closed or all(seq in self.arrived for seq in self._before_end)

    def _end_ready(self, now: float) -> bool:
        call = self.primary
        if not self._end_reachable() or call is None or call.end is None:
            return False
        if any(d.call == call.id and d.seq < call.end.seq for d in self.pending):
            return False
        return now >= self._end_at()

    def _end_at(self) -> float:
        call = self.primary
        speed = self.session.speed
        if call is None or call.end is None:
            return 0.0
        grace = self.session.grace(call.end.cause)
        if speed is None or not self.arrived:
            return self._written + grace if grace else 0.0
        return max(at + delay_s(call.request_t(seq), call.end.t_ns, speed) for seq, at in self.arrived.items()) + grace

    async def _take(self, item: Any) -> None:
        if item is None:
            self.half_closed = True
        elif isinstance(item, Undecodable):
            await self.session.undecodable(self.context, item, f"ModelStreamInfer {self.name}")
        else:
            await self._request(item, time.monotonic())

    async def _drain(self, incoming: asyncio.Queue[Any]) -> None:
        # Everything the client already sent is matched before anything more is written, so that
        # responses due together go out in captured order across requests.
        while not incoming.empty():
            await self._take(incoming.get_nowait())

    async def run(self, incoming: asyncio.Queue[Any]) -> None:
        """Match, schedule and write until the call ends as captured (or by the client)."""
        while True:
            await self._drain(incoming)
            while self.pending and self.pending[0].at <= time.monotonic():
                await self.context.write(heapq.heappop(self.pending).message)
                self._written = time.monotonic()
                await self._drain(incoming)
            if self._end_ready(time.monotonic()):
                await self._abort_as_captured()
            if self.half_closed and not self.pending:
                await self._finish()
                return
            wake: float | None = None
            if self.pending:
                wake = self.pending[0].at
            elif self._end_reachable():
                wake = self._end_at()
            if wake is not None and wake <= time.monotonic():
                continue
            try:
                timeout = None if wake is None else wake - time.monotonic()
                item = await asyncio.wait_for(incoming.get(), timeout)
            except TimeoutError:
                continue
            await self._take(item)

    async def _finish(self) -> None:
        """The client half-closed and every response is sent: end as the captured call did."""
        call = self.primary
        if call is not None and call.end is None:
            await self.session.unrecorded_end(self.context, call.id, f"ModelStreamInfer {self.name}")
        if call is not None and call.end is not None and call.end.status != "OK":
            # The client will send nothing more: the captured end comes at its time.
            await asyncio.sleep(max(0.0, self._end_at() - time.monotonic()))
            await self._abort_as_captured()
        if call is not None and call.end is not None and call.end.trailers:
            self.context.set_trailing_metadata(tuple(grpc_metadata(call.end.trailers)))

    async def _request(self, request: Any, now: float) -> None:
        key = request_key("stream", request)
        m = self.session.matcher.match(key, prefer_call=self.primary.id if self.primary else None)
        if m.candidate is None:
            await self.session.not_found(self.context, key, f"ModelStreamInfer {self.name}")
            return
        call = self.session.capture.calls[m.candidate.call]
        log.debug("%s: %s matched %s (call %s, seq %d) by %s%s", self.name, key.describe(),
                 m.candidate.key.describe(), call.id, m.candidate.seq, m.by, " (again)" if m.reused else "")  # fmt: skip
        if not self._shm_noted:
            where = f"ModelStreamInfer {self.name} {key.describe()}"
            self._shm_noted = self.session.note_shared_memory(where, parsed_regions(request), m.candidate)
        if self.primary is None:
            self.primary = call
            end_seq = call.end.seq if call.end is not None else -1
            self._before_end = [r.seq for r in call.requests() if r.seq < end_seq and r.labelled]
        if call is self.primary:
            self.arrived[m.candidate.seq] = now
            self._written = max(self._written, now)
        self._schedule(call, m.candidate.seq, call.request_t(m.candidate.seq), request.id, now)

    async def _abort_as_captured(self) -> None:
        assert self.primary is not None and self.primary.end is not None
        end = self.primary.end
        log.info("%s: ending as captured call %s did: %s (%s)", self.name, self.primary.id, end.status, end.cause)
        await self.context.abort(status_code(end.status), status_details(end.status, end.details),
                                 tuple(grpc_metadata(end.trailers)))  # fmt: skip

"""A synthetic, perf_analyzer-like capture of any size, for measuring ``triton-tap report`` (issue 19).

    python -m bench.report_capture OUT.jsonl --records 1000000

Shape (modelled on a real perf_analyzer run through the proxy): several runs one after the other;
each run opens ``concurrency`` connections, each with one long ModelStreamInfer call that sends
requests one after the other (4..60 text responses each, then the empty final flagged
``triton_final_response``), ~1% ending with an in-band error; every connection also sends a few
unary ModelInfer calls to a second model. Every 500th stream request is cut by a deadline on its
own short call (a cancel with that request in flight). Each run's stream calls end ~12 s after
their last request as ``client_disconnect`` with nothing in flight, the very pattern that used to
paint a cancel mark on every completed lane. Deterministic for a given seed.

Records are built as :mod:`replay.capture.events` dataclasses and encoded by the writer's own
:class:`~replay.capture.schema.Encoder` (sparse: a response repeating its call's model, version and
outputs omits them), so the file is what the proxy would write (without tensor payloads:
``--payload meta``). Until 2026-12-02 it was encoded record by record without that state (231
bytes a record instead of ~160; the same records).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Iterator
from pathlib import Path

from replay.capture import events as ev
from replay.capture.schema import Encoder

STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
INFER = "/inference.GRPCInferenceService/ModelInfer"
T0 = 1_780_000_000_000_000_000
MS = 1_000_000

Event = tuple[int, int, ev.Record]  # (t_ns, tie-break, record)


def _start(t: int, call: str, method: str, timeout_ms: float | None = None) -> ev.CallStarted:
    return ev.CallStarted(t_ns=t, call=call, conn=call.split(".")[0], method=method, peer="127.0.0.1:40000",
                          metadata=[[":path", method]], timeout_ms=timeout_ms)  # fmt: skip


def _request(t: int, call: str, index: int, model: str, rid: str) -> ev.MessageSeen:
    return ev.MessageSeen(t_ns=t, call=call, dir="c2s", index=index, size=120, compressed=False, model=model,
                          model_version="", request_id=rid, enable_empty_final=True)  # fmt: skip


def _response(t: int, call: str, index: int, model: str, rid: str, *, final: bool, text: bool,
              error: str | None = None) -> ev.MessageSeen:  # fmt: skip
    return ev.MessageSeen(t_ns=t, call=call, dir="s2c", index=index, size=40 if text else 12, compressed=False,
                          model=model, model_version="1" if text else "", request_id=rid, final=final,
                          outputs=["TEXT"] if text else [], error=error)  # fmt: skip


def _end(t: int, call: str, t_start: int, status: str, cause: str, c2s: int, s2c: int) -> ev.CallEnded:
    return ev.CallEnded(t_ns=t, call=call, status=status, details=None, cause=cause,  # type: ignore[arg-type]
                        trailers=[["grpc-status", "0"]] if cause == "ok" else None, initial_metadata=None,
                        duration_ms=(t - t_start) / MS, messages_c2s=c2s, messages_s2c=s2c)  # fmt: skip


class _Stream:
    """One connection's stream call: requests one after the other, each answered by a burst."""

    def __init__(self, rng: random.Random, conn: str, t: int) -> None:
        self.rng, self.conn, self.t = rng, conn, t
        self.call = f"{conn}.1"
        self.c2s = self.s2c = 0
        self.next_call = 3
        self.events: list[Event] = [(t, 0, _start(t, self.call, STREAM))]

    def request(self, k: int, load: float) -> None:
        """Request ``k``: sent, answered by 4..60 text responses, then the final (or an in-band error)."""
        rng, call = self.rng, self.call
        rid = f"{self.conn}-{k}"
        self.t += int(rng.uniform(0.05, 0.4) * MS)
        self.events.append((self.t, 1, _request(self.t, call, self.c2s, "tokens", rid)))
        self.c2s += 1
        t = self.t + int(rng.lognormvariate(1.5, 0.4) * load * MS)  # time to first response
        for _ in range(rng.randint(4, 60)):
            self.events.append((t, 2, _response(t, call, self.s2c, "tokens", rid, final=False, text=True)))
            self.s2c += 1
            t += int(rng.lognormvariate(0.0, 0.5) * load * MS)  # inter-response gap
        error = "tokens: generation failed" if rng.random() < 0.01 else None
        self.events.append((t, 3, _response(t, call, self.s2c, "tokens", rid, final=True, text=False, error=error)))
        self.s2c += 1
        self.t = t

    def unary(self, k: int) -> None:
        """A ModelInfer call of its own to the `echo` model."""
        call = f"{self.conn}.{self.next_call}"
        self.next_call += 2
        t = self.t + int(0.1 * MS)
        rid = f"{self.conn}-u{k}"
        self.events += [(t, 0, _start(t, call, INFER)), (t + 1, 1, _request(t + 1, call, 0, "echo", rid))]
        t2 = t + int(self.rng.uniform(0.5, 3) * MS)
        self.events += [(t2, 2, _response(t2, call, 0, "echo", rid, final=True, text=True)),
                        (t2 + 1, 4, _end(t2 + 1, call, t, "OK", "ok", 1, 1))]  # fmt: skip

    def deadline(self, k: int) -> None:
        """A stream call of its own whose 50 ms deadline cuts its one request after a few responses."""
        call = f"{self.conn}.{self.next_call}"
        self.next_call += 2
        t = self.t + int(0.1 * MS)
        rid = f"{self.conn}-d{k}"
        self.events += [(t, 0, _start(t, call, STREAM, 50.0)), (t + 1, 1, _request(t + 1, call, 0, "tokens", rid))]
        for i in range(3):
            tr = t + (10 + 10 * i) * MS
            self.events.append((tr, 2, _response(tr, call, i, "tokens", rid, final=False, text=True)))
        td = t + 50 * MS
        self.events += [
            (td, 4, ev.CallCancelled(t_ns=td, call=call, cause="deadline", in_flight=[rid], responded=[rid],
                                     rst_code=None, elapsed_ms=50.0, forwarded_upstream=True)),
            (td + 1, 5, _end(td + 1, call, t, "DEADLINE_EXCEEDED", "deadline", 1, 3)),
        ]  # fmt: skip

    def disconnect(self, t: int) -> None:
        """The connection closes long after its last request completed: a call-level ending."""
        t_start = self.events[0][0]
        self.events += [
            (t, 4, ev.CallCancelled(t_ns=t, call=self.call, cause="client_disconnect", in_flight=[], responded=[],
                                    rst_code=None, elapsed_ms=(t - t_start) / MS, forwarded_upstream=True)),
            (t + 1, 5, _end(t + 1, self.call, t_start, "CANCELLED", "client_disconnect", self.c2s, self.s2c)),
        ]  # fmt: skip


def _run(rng: random.Random, run: int, t: int, concurrency: int, requests: int) -> tuple[list[Event], int]:
    """One perf_analyzer run: ``concurrency`` connections, ``requests`` stream requests each."""
    streams = [_Stream(rng, f"r{run}c{i}", t + i * 200_000) for i in range(concurrency)]
    for s in streams:
        # The load rises through the run, so the overview has a shape to show.
        for k in range(requests):
            s.request(k, 1.0 + 2.0 * k / max(1, requests))
            if k % 20 == 7:
                s.unary(k)
            if k % 500 == 250:
                s.deadline(k)
    last = max(s.t for s in streams)
    for s in streams:
        s.disconnect(last + 12_000 * MS + rng.randint(0, 200) * MS)
    events = [e for s in streams for e in s.events]
    return events, last + 13_000 * MS


def records(n: int, *, seed: int = 19, runs: int = 3, concurrency: int = 8) -> Iterator[ev.Record]:
    """About ``n`` records (a little over), in time order."""
    rng = random.Random(seed)
    per_request = 34  # records per stream request on average, unary and deadline calls included
    requests = max(1, n // (runs * concurrency * per_request))
    yield ev.CaptureStarted(t_ns=T0, proxy_version="bench", listen="127.0.0.1:8011", upstream="127.0.0.1:8001",
                            options={"payload": "meta"})  # fmt: skip
    t = T0 + MS
    last = t
    for run in range(runs):
        events, t = _run(rng, run, t, concurrency, requests)
        events.sort(key=lambda e: (e[0], e[1]))
        for e in events:
            last = max(last, e[0])
            yield e[2]
    yield ev.CaptureEnded(t_ns=last + MS, reason="shutdown", counts={})


def write(path: Path, n: int, *, seed: int = 19) -> int:
    """Write about ``n`` records to ``path``; returns how many were written."""
    count = 0
    encoder = Encoder()  # one file: one encoder's state, as the writer keeps it
    with path.open("wb") as f:
        buf: list[bytes] = []
        for seq, rec in enumerate(records(n, seed=seed)):
            buf.append(encoder.encode(rec, seq))
            count += 1
            if len(buf) >= 10_000:
                f.write(b"".join(buf))
                buf.clear()
        f.write(b"".join(buf))
    return count


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.report_capture", description=__doc__.split("\n")[0])
    p.add_argument("output", type=Path)
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=19)
    a = p.parse_args(argv)
    n = write(a.output, a.records, seed=a.seed)
    print(f"wrote {a.output}: {n} records", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

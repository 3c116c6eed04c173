"""Synthetic captures of any size, encoded as the proxy's writer encodes them, in two shapes.

``python -m bench.captures OUT --records N [--shape steady|runs] [--compress zstd|gzip|none]`` writes
one capture file into the directory ``OUT`` and prints its path. Generated captures go to temporary
directories, never into the repository (10M records are ~1.5 GB plain).

* ``steady`` (the default): what ``triton-tap record`` writes for NVIDIA's perf_analyzer
  (``--streaming``, concurrency 4) against a decoupled model answering 20 small responses plus an
  empty final per request: four interleaved ModelStreamInfer calls, each request one ``c2s`` message
  followed by 21 ``s2c`` messages. Every message record is labelled from real protobuf bytes by the
  proxy's own labeller. The records of one request are built once and re-stamped (seq, time, index),
  so 10M records take about a minute: the shape for the reader's, ``serve``'s and ``diff``'s speed
  and memory (``bench.probes.readers``, ``bench.probes.serve_index``), the writer's cost per record
  (``bench.micro``) and the SQL recipes' tests.
* ``runs``: what a real perf_analyzer session looks like to ``triton-tap report``: several runs one
  after the other; each opens ``concurrency`` connections, each with one long ModelStreamInfer call
  that sends requests one after the other (4..60 text responses each, then the empty final flagged
  ``triton_final_response``), ~1 % ending with an in-band error; every connection also sends a few
  unary ModelInfer calls to a second model. Every 500th stream request is cut by a deadline on its
  own short call (a cancel with that request in flight). Each run's stream calls end ~12 s after
  their last request as ``client_disconnect`` with nothing in flight, the pattern that used to paint
  a cancel mark on every completed lane. Deterministic for a given seed: the shape for the report's
  cost (``bench.probes.report_build``) and the report's tests.

Both are encoded by the writer's own :class:`~replay.capture.schema.Encoder` (sparse: a message
repeating its call's sticky fields omits them) and framed by its sink, so sizes and read speeds are
the real ones (``--payload meta``: no tensor bytes).
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from tritonclient.grpc import service_pb2 as pb

from proxy.capture.sink import COMPRESS_CHOICES, make_sink
from proxy.triton import labels
from replay.capture import events as ev
from replay.capture.schema import Encoder

T0 = 1_780_000_000_000_000_000
MS = 1_000_000
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
INFER = "/inference.GRPCInferenceService/ModelInfer"
SHAPES = ("steady", "runs")

# -- steady: four interleaved streams of identical requests ----------------------------------------

STREAMS = 4
RESPONSES = 20


def _steady_response(final: bool, text: bytes | None) -> dict[str, Any]:
    r = pb.ModelInferResponse(model_name="tokens", model_version="1" if text is not None else "", id="")
    r.parameters["triton_final_response"].bool_param = final
    if text is not None:
        r.outputs.add(name="TEXT", datatype="BYTES", shape=[1])
        r.raw_output_contents.append(len(text).to_bytes(4, "little") + text)
    body = pb.ModelStreamInferResponse(infer_response=r).SerializeToString()
    return {"size": len(body), **labels.stream_response_labels(body, False)}


def _steady_request() -> dict[str, Any]:
    r = pb.ModelInferRequest(model_name="tokens", id="")
    r.inputs.add(name="PROMPT", datatype="BYTES", shape=[1])
    r.raw_input_contents.append(b"\x05\0\0\0hello")
    r.parameters["triton_enable_empty_final_response"].bool_param = True
    body = r.SerializeToString()
    return {"size": len(body), **labels.request_labels(body, False)}


def steady_records(n: int) -> Iterator[ev.Record]:
    """About ``n`` records (whole requests; capture_start and capture_end included) of the shape above."""
    req, text, final = _steady_request(), _steady_response(False, b"token-0042 " * 4), _steady_response(True, None)
    t = T0
    yield ev.CaptureStarted(t_ns=t, proxy_version="0.1.0", listen="127.0.0.1:8011", upstream="127.0.0.1:8001",
                            options={"payload": "meta"})  # fmt: skip
    calls = [f"c1.{2 * i + 1}" for i in range(STREAMS)]
    for call in calls:
        t += 50_000
        yield ev.CallStarted(t_ns=t, call=call, conn="c1", method=STREAM, peer="127.0.0.1:50000",
                             metadata=[[":method", "POST"], [":path", STREAM]], timeout_ms=None)  # fmt: skip
    index = dict.fromkeys(calls, 0)
    made = 2 + STREAMS
    per_request = RESPONSES + 2
    while made + per_request * STREAMS + 2 * STREAMS <= n:
        for call in calls:  # each stream's request, then its responses interleaved with the others'
            t += 37_000
            yield ev.MessageSeen(t_ns=t, call=call, dir="c2s", index=index[call], **req)
        for k in range(RESPONSES + 1):
            for call in calls:
                t += 48_000 + (k * 7919 + len(call)) % 9000  # 5k responses/s, not perfectly regular
                fields = final if k == RESPONSES else text
                yield ev.MessageSeen(t_ns=t, call=call, dir="s2c", index=index[call] * (RESPONSES + 1) + k, **fields)
        for call in calls:
            index[call] += 1
        made += per_request * STREAMS
    yield from _steady_tail(t, calls, index[calls[0]])


def _steady_cycles(n: int) -> int:
    """How many request rounds :func:`steady_records` writes for ``n``."""
    first, per_round = 2 + STREAMS, (RESPONSES + 2) * STREAMS
    return 0 if n < first + per_round + 2 * STREAMS else (n - first - per_round - 2 * STREAMS) // per_round + 1


def steady_lines(n: int) -> Iterator[bytes]:
    """The encoded lines of ``steady_records(n)``, made fast: 10M records in seconds rather than an hour.

    The writer's Encoder encodes the first two request rounds; from the second on every round is
    the same lines with seq, t_ns and index moved on by the same amounts (the sticky state of the
    sparse encoding repeats round to round), so later rounds are those lines re-stamped. Byte for
    byte what encoding ``steady_records(n)`` gives (tests/bench/test_captures.py).
    """
    cycles = _steady_cycles(n)
    encoder = Encoder()
    if cycles <= 2:
        yield from (encoder.encode(rec, seq) for seq, rec in enumerate(steady_records(n)))
        return
    head = 1 + STREAMS + 2 * (RESPONSES + 2) * STREAMS  # capture_start, call_starts, two rounds
    made = [encoder.encode(rec, seq) for seq, rec in enumerate(itertools.islice(steady_records(10**9), head))]
    yield from made
    per_round = (RESPONSES + 2) * STREAMS
    one, two = (
        [orjson.loads(x) for x in made[-2 * per_round : -per_round]],
        [orjson.loads(x) for x in made[-per_round:]],
    )
    templates = []
    for a, b, line in zip(one, two, made[-per_round:], strict=True):
        text = line.replace(b"%", b"%%")
        for key in ("seq", "t_ns", "index"):
            text = text.replace(b'"%s":%d' % (key.encode(), b[key]), b'"%s":%%d' % key.encode(), 1)
        templates.append((text, b["seq"], b["t_ns"], b["index"], b["t_ns"] - a["t_ns"], b["index"] - a["index"]))
    for c in range(1, cycles - 1):
        for text, seq, t_ns, index, dt, di in templates:
            yield text % (seq + c * per_round, t_ns + c * dt, index + c * di)
    seq = 1 + STREAMS + cycles * per_round
    t = two[-1]["t_ns"] + (cycles - 2) * (two[-1]["t_ns"] - one[-1]["t_ns"])
    for tail in _steady_tail(t, [f"c1.{2 * i + 1}" for i in range(STREAMS)], cycles):
        yield encoder.encode(tail, seq)
        seq += 1


def _steady_tail(t: int, calls: list[str], cycles: int) -> Iterator[ev.Record]:
    for call in calls:
        t += 10_000
        yield ev.HalfClosed(t_ns=t, call=call)
        yield ev.CallEnded(t_ns=t, call=call, status="OK", details=None, cause="ok", trailers=[["grpc-status", "0"]],
                           initial_metadata=None, duration_ms=(t - T0) / 1e6, messages_c2s=cycles,
                           messages_s2c=cycles * (RESPONSES + 1))  # fmt: skip
    yield ev.CaptureEnded(t_ns=t + 1, reason="shutdown", counts={})


# -- runs: perf_analyzer runs with unary calls, deadlines, errors and disconnects ------------------

Event = tuple[int, int, ev.Record]  # (t_ns, tie-break, record)


def _start(t: int, call: str, method: str, timeout_ms: float | None = None) -> ev.CallStarted:
    return ev.CallStarted(t_ns=t, call=call, conn=call.split(".")[0], method=method, peer="127.0.0.1:40000",
                          metadata=[[":path", method]], timeout_ms=timeout_ms)  # fmt: skip


def _runs_request(t: int, call: str, index: int, model: str, rid: str) -> ev.MessageSeen:
    return ev.MessageSeen(t_ns=t, call=call, dir="c2s", index=index, size=120, compressed=False, model=model,
                          model_version="", request_id=rid, enable_empty_final=True)  # fmt: skip


def _runs_response(t: int, call: str, index: int, model: str, rid: str, *, final: bool, text: bool,
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
        self.events.append((self.t, 1, _runs_request(self.t, call, self.c2s, "tokens", rid)))
        self.c2s += 1
        t = self.t + int(rng.lognormvariate(1.5, 0.4) * load * MS)  # time to first response
        for _ in range(rng.randint(4, 60)):
            self.events.append((t, 2, _runs_response(t, call, self.s2c, "tokens", rid, final=False, text=True)))
            self.s2c += 1
            t += int(rng.lognormvariate(0.0, 0.5) * load * MS)  # inter-response gap
        error = "tokens: generation failed" if rng.random() < 0.01 else None
        self.events.append(
            (t, 3, _runs_response(t, call, self.s2c, "tokens", rid, final=True, text=False, error=error))
        )
        self.s2c += 1
        self.t = t

    def unary(self, k: int) -> None:
        """A ModelInfer call of its own to the `echo` model."""
        call = f"{self.conn}.{self.next_call}"
        self.next_call += 2
        t = self.t + int(0.1 * MS)
        rid = f"{self.conn}-u{k}"
        self.events += [(t, 0, _start(t, call, INFER)), (t + 1, 1, _runs_request(t + 1, call, 0, "echo", rid))]
        t2 = t + int(self.rng.uniform(0.5, 3) * MS)
        self.events += [(t2, 2, _runs_response(t2, call, 0, "echo", rid, final=True, text=True)),
                        (t2 + 1, 4, _end(t2 + 1, call, t, "OK", "ok", 1, 1))]  # fmt: skip

    def deadline(self, k: int) -> None:
        """A stream call of its own whose 50 ms deadline cuts its one request after a few responses."""
        call = f"{self.conn}.{self.next_call}"
        self.next_call += 2
        t = self.t + int(0.1 * MS)
        rid = f"{self.conn}-d{k}"
        self.events += [(t, 0, _start(t, call, STREAM, 50.0)), (t + 1, 1, _runs_request(t + 1, call, 0, "tokens", rid))]
        for i in range(3):
            tr = t + (10 + 10 * i) * MS
            self.events.append((tr, 2, _runs_response(tr, call, i, "tokens", rid, final=False, text=True)))
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


def _one_run(rng: random.Random, run: int, t: int, concurrency: int, requests: int) -> tuple[list[Event], int]:
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


def runs_records(n: int, *, seed: int = 19, runs: int = 3, concurrency: int = 8) -> Iterator[ev.Record]:
    """About ``n`` records (a little over), in time order."""
    rng = random.Random(seed)
    per_request = 34  # records per stream request on average, unary and deadline calls included
    requests = max(1, n // (runs * concurrency * per_request))
    yield ev.CaptureStarted(t_ns=T0, proxy_version="bench", listen="127.0.0.1:8011", upstream="127.0.0.1:8001",
                            options={"payload": "meta"})  # fmt: skip
    t = T0 + MS
    last = t
    for run in range(runs):
        events, t = _one_run(rng, run, t, concurrency, requests)
        events.sort(key=lambda e: (e[0], e[1]))
        for e in events:
            last = max(last, e[0])
            yield e[2]
    yield ev.CaptureEnded(t_ns=last + MS, reason="shutdown", counts={})


def lines(n: int, shape: str = "steady", *, seed: int = 19) -> Iterator[bytes]:
    """The encoded lines of about ``n`` records of ``shape``, as one capture file holds them."""
    if shape == "steady":
        yield from steady_lines(n)
        return
    if shape != "runs":
        raise ValueError(f"unknown shape {shape!r} (known: {', '.join(SHAPES)})")
    encoder = Encoder()  # one file: one encoder's state, as the writer keeps it
    for seq, rec in enumerate(runs_records(n, seed=seed)):
        yield encoder.encode(rec, seq)


def write(
    out: Path, n: int, compress: str = "none", batch: int = 100, *, shape: str = "steady", seed: int = 19
) -> Path:
    """Write the capture into directory ``out`` as the writer would (batches of ``batch`` records, one
    frame each); its path."""
    sink = make_sink(compress)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"capture-20260528T000000-1{sink.suffix}"
    buf: list[bytes] = []
    with open(path, "wb") as f:
        for line in lines(n, shape, seed=seed):
            buf.append(line)
            if len(buf) >= batch:
                f.write(sink.frame(b"".join(buf)))
                buf.clear()
        if buf:
            f.write(sink.frame(b"".join(buf)))
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.captures", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="directory to write the capture into")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--shape", choices=SHAPES, default="steady", help="(default %(default)s)")
    p.add_argument("--compress", choices=COMPRESS_CHOICES, default="none")
    p.add_argument("--batch", type=int, default=100, help="records per written batch (frame) (default %(default)s)")
    p.add_argument("--seed", type=int, default=19, help="with --shape runs (default %(default)s)")
    args = p.parse_args(argv)
    print(write(args.out, args.records, args.compress, args.batch, shape=args.shape, seed=args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Synthetic captures shaped like the issue-15 measurement, any size, for the reader benchmarks.

``python -m bench.gencapture OUT --records N [--compress zstd|gzip|none] [--batch B]``
writes what ``triton-tap record`` writes for NVIDIA's perf_analyzer (``--streaming``, concurrency
4) against a decoupled model answering 20 small responses plus an empty final per request: four
interleaved ModelStreamInfer calls, each request one ``c2s`` message followed by 21 ``s2c``
messages. Every message record is labelled from real protobuf bytes by the proxy's own labeller
and encoded by the writer's encoder and sink, so sizes and read speeds are the real ones. The
records of one request are built once and re-stamped (seq, time, index), so 10M records take
about a minute; big files go to a temporary directory, never into the repository.
"""

from __future__ import annotations

import argparse
import itertools
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
STREAMS = 4
RESPONSES = 20
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"


def _response(final: bool, text: bytes | None) -> dict[str, Any]:
    r = pb.ModelInferResponse(model_name="tokens", model_version="1" if text is not None else "", id="")
    r.parameters["triton_final_response"].bool_param = final
    if text is not None:
        r.outputs.add(name="TEXT", datatype="BYTES", shape=[1])
        r.raw_output_contents.append(len(text).to_bytes(4, "little") + text)
    body = pb.ModelStreamInferResponse(infer_response=r).SerializeToString()
    return {"size": len(body), **labels.stream_response_labels(body, False)}


def _request() -> dict[str, Any]:
    r = pb.ModelInferRequest(model_name="tokens", id="")
    r.inputs.add(name="PROMPT", datatype="BYTES", shape=[1])
    r.raw_input_contents.append(b"\x05\0\0\0hello")
    r.parameters["triton_enable_empty_final_response"].bool_param = True
    body = r.SerializeToString()
    return {"size": len(body), **labels.request_labels(body, False)}


def records(n: int) -> Iterator[ev.Record]:
    """About ``n`` records (whole requests; capture_start and capture_end included) of the shape above."""
    req, text, final = _request(), _response(False, b"token-0042 " * 4), _response(True, None)
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
    yield from _tail(t, calls, index[calls[0]])


def _cycles(n: int) -> int:
    """How many request rounds :func:`records` writes for ``n``."""
    first, per_round = 2 + STREAMS, (RESPONSES + 2) * STREAMS
    return 0 if n < first + per_round + 2 * STREAMS else (n - first - per_round - 2 * STREAMS) // per_round + 1


def lines(n: int) -> Iterator[bytes]:
    """The encoded lines of ``records(n)``, made fast: 10M records in seconds rather than an hour.

    The writer's Encoder encodes the first two request rounds; from the second on every round is
    the same lines with seq, t_ns and index moved on by the same amounts (the sticky state of the
    sparse encoding repeats round to round), so later rounds are those lines re-stamped. Byte for
    byte what encoding ``records(n)`` gives (tests/bench/test_gencapture.py).
    """
    cycles = _cycles(n)
    encoder = Encoder()
    if cycles <= 2:
        yield from (encoder.encode(rec, seq) for seq, rec in enumerate(records(n)))
        return
    head = 1 + STREAMS + 2 * (RESPONSES + 2) * STREAMS  # capture_start, call_starts, two rounds
    made = [encoder.encode(rec, seq) for seq, rec in enumerate(itertools.islice(records(10**9), head))]
    yield from made
    per_round = (RESPONSES + 2) * STREAMS
    one, two = [orjson.loads(x) for x in made[-2 * per_round : -per_round]], [orjson.loads(x) for x in made[-per_round:]]
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
    for tail in _tail(t, [f"c1.{2 * i + 1}" for i in range(STREAMS)], cycles):
        yield encoder.encode(tail, seq)
        seq += 1


def _tail(t: int, calls: list[str], cycles: int) -> Iterator[ev.Record]:
    for call in calls:
        t += 10_000
        yield ev.HalfClosed(t_ns=t, call=call)
        yield ev.CallEnded(t_ns=t, call=call, status="OK", details=None, cause="ok", trailers=[["grpc-status", "0"]],
                           initial_metadata=None, duration_ms=(t - T0) / 1e6, messages_c2s=cycles,
                           messages_s2c=cycles * (RESPONSES + 1))  # fmt: skip
    yield ev.CaptureEnded(t_ns=t + 1, reason="shutdown", counts={})


def write(out: Path, n: int, compress: str = "none", batch: int = 100) -> Path:
    """Write the capture as the writer would (batches of ``batch`` records, one frame each); its path."""
    sink = make_sink(compress)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"capture-20260528T000000-1{sink.suffix}"
    buf: list[bytes] = []
    with open(path, "wb") as f:
        for line in lines(n):
            buf.append(line)
            if len(buf) >= batch:
                f.write(sink.frame(b"".join(buf)))
                buf.clear()
        if buf:
            f.write(sink.frame(b"".join(buf)))
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gencapture", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="directory to write the capture into")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--compress", choices=COMPRESS_CHOICES, default="none")
    p.add_argument("--batch", type=int, default=100, help="records per written batch (frame) (default %(default)s)")
    args = p.parse_args(argv)
    print(write(args.out, args.records, args.compress, args.batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())

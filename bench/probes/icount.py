"""Instructions per streamed response and per record encoded, counted by valgrind's callgrind.

``python -m bench.icount`` answers the same question as :mod:`bench.probes.micro` ("how much work does the
proxy do per streamed response") in a unit that does not move with the machine's load: instructions
retired, counted by ``valgrind --tool=callgrind``. Each figure is the difference between two runs of
one child process that differ only in how many responses the proxy handles, and callgrind counts only
inside the measured loop (run by ``functools.reduce``: ``--toggle-collect=functools_reduce``), so
interpreter start-up, imports and the harness's set-up never enter: start-up alone varied by up to 33M
instructions between identical runs, enough to move a per-response figure by thousands. Repeats agree
to the instruction.

What is counted: the proxy's ``data_received`` on reads of the upstream side that each hold ``--per-read``
DATA frames of one small ModelStreamInferResponse (the bytes made once by real ``h2`` peers, then fed
again and again: the relay does not track flow control, so replaying DATA of an open stream is what
it sees from a streaming Triton), plus, unless ``--no-encode``, the writer thread's encoding of every
record: a capture file's sparse :class:`replay.capture.schema.Encoder`, as the writer uses it (a
stream's repeated sticky fields left out). Valgrind must be installed.

``--unary`` counts a whole unary ModelInfer call instead: the proxy's two reads of it (the client's
HEADERS+DATA, the upstream's HEADERS+DATA+trailers, as grpc sends them: one read each way), its
five records (``call_start``, two ``message``, ``half_closed``, ``call_end``) and their encoding.
The calls are made by the same ``h2`` peers beforehand, as many in both runs, so only the relay's
part differs between them.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import subprocess
import sys
import tempfile
from typing import Any


def _child(payload: str, per_read: int, rounds: int, encode_records: bool) -> None:
    from bench.probes.micro import _Harness, grpc_frame, response_bytes
    from replay.capture.schema import Encoder

    lines: list[bytes] = []
    sink: list[Any] = []
    encode = Encoder().encode

    def emit(record: Any) -> None:
        if encode_records:
            lines.append(encode(record, len(lines)))
        else:
            sink.append(record)

    h = _Harness(payload, emit)
    sid = h.open_stream()
    more = grpc_frame(response_bytes(False))
    reads = []
    for _ in range(50):
        for _ in range(per_read):
            h.server.send_data(sid, more)
        reads.append(h.server.data_to_send())
    read = h.conn.upstream.data_received

    def one_round(_: None, __: int) -> None:
        for data in reads:
            read(data)
        h.dt.out.clear()
        lines.clear()
        sink.clear()

    functools.reduce(one_round, range(rounds), None)  # what callgrind counts (_COUNTED)


def _unary_child(payload: str, rounds: int, encode_records: bool) -> None:
    from bench.probes.micro import _Harness, unary_call_reads
    from replay.capture.schema import Encoder

    lines: list[bytes] = []
    encode = Encoder().encode

    def emit(record: Any) -> None:
        if encode_records:
            lines.append(encode(record, len(lines)))

    h = _Harness(payload, emit)
    # As many calls made in both runs (the h2 peers' work cancels out); only ``rounds`` relayed.
    calls = unary_call_reads(h, UNARY_CALLS * UNARY_MAX_ROUNDS)
    down, up = h.conn.client.data_received, h.conn.upstream.data_received

    def one_call(_: None, call: tuple[bytes, bytes]) -> None:
        down(call[0])
        up(call[1])
        h.dt.out.clear()
        h.ut.out.clear()
        lines.clear()

    functools.reduce(one_call, calls[: UNARY_CALLS * rounds], None)  # what callgrind counts (_COUNTED)


#: Calls per round of ``--unary``, and the most rounds a run may ask for.
UNARY_CALLS = 50
UNARY_MAX_ROUNDS = 8

#: The one function callgrind counts inside: the children run their measured loop through it.
_COUNTED = "functools_reduce"


def _count(args: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--toggle-collect={_COUNTED}", f"--callgrind-out-file={out}",
             sys.executable, "-m", "bench.probes.icount",
             "--child", *args],
            capture_output=True, text=True, check=False, env={**os.environ, "PYTHONHASHSEED": "0"},
        )  # fmt: skip
        m = re.search(r"Collected : (\d+)", run.stderr)
        if run.returncode or m is None:
            raise SystemExit(f"callgrind run failed: {run.stderr[-2000:]}")
        if not int(m.group(1)):  # the measured loop was not seen: a count of nothing is no figure
            raise SystemExit(f"callgrind counted nothing inside {_COUNTED} (another Python's name for it?)")
        return int(m.group(1))


def per_response(payload: str, per_read: int, encode_records: bool, rounds: int = 6) -> float:
    """Instructions per streamed response: (count with ``rounds``+1 rounds - count with 1) / responses."""
    base = [payload, str(per_read)] + ([] if encode_records else ["--no-encode"])
    small = _count([*base, "--rounds", "1"])
    big = _count([*base, "--rounds", str(rounds + 1)])
    return (big - small) / (rounds * 50 * per_read)


def per_unary_call(payload: str, encode_records: bool, rounds: int = 6) -> float:
    """Instructions per unary call: (count with ``rounds``+1 rounds - count with 1) / calls."""
    if rounds + 1 > UNARY_MAX_ROUNDS:
        raise SystemExit(f"--unary counts at most {UNARY_MAX_ROUNDS - 1} rounds")
    base = [payload, "1", "--unary"] + ([] if encode_records else ["--no-encode"])
    small = _count([*base, "--rounds", "1"])
    big = _count([*base, "--rounds", str(rounds + 1)])
    return (big - small) / (rounds * UNARY_CALLS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.icount", description=__doc__.split("\n\n")[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("payload", nargs="?", default=None, choices=["none", "meta", "full"])
    p.add_argument("per_read", nargs="?", type=int, default=None)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--no-encode", action="store_true", help="leave the writer's JSONL encoding out")
    p.add_argument("--unary", action="store_true", help="count per unary ModelInfer call instead")
    args = p.parse_args(argv)
    if args.child:
        if args.unary:
            _unary_child(args.payload, args.rounds, not args.no_encode)
        else:
            _child(args.payload, args.per_read, args.rounds, not args.no_encode)
        return 0
    if args.unary:
        print("### instructions per unary ModelInfer call (callgrind; relay + record encoding)")
        print("| payload | per call |")
        print("|---|---|")
        for payload in [args.payload] if args.payload else ["none", "meta", "full"]:
            print(f"| {payload} | {per_unary_call(payload, not args.no_encode, args.rounds) / 1e3:.1f} k |")
        return 0
    print("### instructions per streamed response (callgrind; relay + record encoding)")
    print("| payload | 1 response per read | 8 responses per read |")
    print("|---|---|---|")
    for payload in [args.payload] if args.payload else ["none", "meta", "full"]:
        row = [f"{per_response(payload, k, not args.no_encode, args.rounds) / 1e3:.1f} k" for k in (1, 8)]
        print(f"| {payload} | {' | '.join(row)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CPU per streamed response with ``record --admin`` and 0 or 1 Tail watchers (``python -m bench.probes.admin_tap``).

The relay (bench.probes.micro's in-memory harness: a real relay connection between two h2 peers) feeds a real
RecordObserver and CaptureWriter writing to a temporary directory; the whole process's CPU time
(loop thread, writer thread, the watcher's coroutine) is divided by the responses relayed. Cases:

- ``no admin``: the writer has no tap (``record`` without ``--admin``);
- ``admin, 0 watchers``: the hub is attached (recent-records ring) but nobody tails;
- ``admin, 1 watcher``: one unfiltered subscriber, drained by a coroutine that builds and serialises
  each TailResponse as the servicer does (the HTTP/2 write of the gRPC stream is not included).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.probes.micro import _Harness
from proxy.admin.hub import Dropped, TailFilter, TapHub
from proxy.admin.pb import admin_pb2 as pb
from proxy.capture.writer import CaptureWriter, WriterOptions
from proxy.ops.observe import RecordObserver
from replay.capture import events as ev


async def _watch(hub: TapHub, stop: asyncio.Event) -> int:
    sub, _, _ = hub.subscribe(TailFilter())
    n = 0
    try:
        while True:
            items = await sub.next_items()
            if not items:  # closed and drained
                break
            for item in items:
                if isinstance(item, Dropped):
                    continue
                seq, kind, line = item
                pb.TailResponse(record=pb.TailRecord(seq=seq, kind=kind, json=line)).SerializeToString()
                n += 1
    finally:
        hub.unsubscribe(sub)
    return n


async def one_run(case: str, responses: int, directory: Path) -> float:
    """Process CPU microseconds per relayed response."""
    start = ev.CaptureStarted(t_ns=time.time_ns(), proxy_version="bench", listen="-", upstream="-", options={})
    writer = CaptureWriter(WriterOptions(directory=directory), start)
    writer.open()
    hub = TapHub()
    if case != "no admin":
        writer.tap = hub.publish
    stop = asyncio.Event()
    watcher = asyncio.create_task(_watch(hub, stop), name="bench-watcher") if case == "admin, 1 watcher" else None
    await asyncio.sleep(0)
    h = _Harness("meta", RecordObserver(writer.emit))
    sid = h.open_stream()
    h.stream(sid, 200, 1)  # warm-up
    chunk = 500
    t0 = time.process_time()
    done = 0
    while done < responses:
        h.stream(sid, chunk, 1)
        done += chunk
        await asyncio.sleep(0)  # let the writer task and the watcher run, as the event loop would
    while writer.backlog:
        await asyncio.sleep(0.005)
    await writer.close()
    stop.set()
    hub.close()
    if watcher is not None:
        seen = await watcher
        assert seen >= responses, f"the watcher saw {seen} of {responses} records"
    return (time.process_time() - t0) * 1e6 / responses


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.probes.admin_tap", description=__doc__.split("\n\n")[0])
    p.add_argument("--responses", type=int, default=20_000)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    cases = ("no admin", "admin, 0 watchers", "admin, 1 watcher")
    results: dict[str, list[float]] = {c: [] for c in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for case in cases:  # interleaved, so machine noise spreads over every case
                d = Path(tmp) / f"{rep}-{cases.index(case)}"
                d.mkdir()
                results[case].append(asyncio.run(one_run(case, args.responses, d)))
    print(f"### process CPU per streamed response, payload meta (median of {args.reps} runs, {args.responses} responses)")
    print("| case | us per response | min | max |")
    print("|---|---|---|---|")
    for case in cases:
        v = results[case]
        print(f"| {case} | {statistics.median(v):.1f} | {min(v):.1f} | {max(v):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

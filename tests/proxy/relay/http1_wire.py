"""Drive :class:`proxy.relay.http1.Http1Core` with a real Triton 2.51 HTTP transcript, no event loop.

The transcripts (``tests/proxy/relay/data/http1``) are every read a recording TCP relay saw between
real clients and a real tritonserver, in order, with EOFs. Each read goes to the core as the shell
would give it; what the core writes, the records it emits and its commands are collected.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.relay.contract import CLIENT, UPSTREAM, Close, Output
from proxy.relay.http1 import Http1Core
from proxy.relay.options import RelayOptions

DATA = Path(__file__).parent / "data" / "http1"


@dataclass
class Shared:
    options: RelayOptions = field(default_factory=RelayOptions)
    authority: bytes | None = None
    open_calls: int = 0
    records: list[Any] = field(default_factory=list)
    before_cancel: Any = None

    def emit(self, record: Any) -> None:
        self.records.append(record)

    def emit_message(self, record: Any) -> None:
        self.records.append(record)


@dataclass
class Run:
    core: Http1Core
    shared: Shared
    c2s: bytearray = field(default_factory=bytearray)
    s2c: bytearray = field(default_factory=bytearray)
    commands: list[Any] = field(default_factory=list)
    closed: set[str] = field(default_factory=set)

    def perform(self, out: Output | None) -> None:
        while out is not None:
            if out.c2s is not None and UPSTREAM not in self.closed:
                self.c2s += bytes(out.c2s)
            if out.s2c is not None and CLIENT not in self.closed:
                self.s2c += bytes(out.s2c)
            self.commands += out.commands
            for c in out.commands:
                if type(c) is Close:
                    self.closed.add(c.side)
            out = self.core.resume() if out.more else None

    def records(self, kind: str | None = None) -> list[Any]:
        return [r for r in self.shared.records if kind is None or r.kind == kind]


def transcript(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / name).read_text())
    return data


def reads(conn: dict[str, Any]) -> list[tuple[str, bytes | None]]:
    """(direction, bytes) per read; bytes None for an EOF or a read error."""
    out: list[tuple[str, bytes | None]] = []
    for e in conn["events"]:
        if "b64" in e:
            out.append((e["dir"], base64.b64decode(e["b64"])))
        elif e.get("eof") or "read_error" in e:
            out.append((e["dir"], None))
    return out


def drive(events: list[tuple[str, bytes | None]], conn_id: str = "c1", options: RelayOptions | None = None,
          shared: Shared | None = None) -> Run:  # fmt: skip
    """Every read in order; an EOF is the side's loss (the shell closes on EOF). Reads of a side the
    core closed are not given to it (the shell would not read them)."""
    shared = shared or Shared(options=options or RelayOptions())
    run = Run(Http1Core(shared, conn_id, "127.0.0.1:5"), shared)  # type: ignore[arg-type]
    run.perform(run.core.connected())
    lost: set[str] = set()
    for d, data in events:
        side = CLIENT if d == "c2s" else UPSTREAM
        if side in run.closed or side in lost:
            continue
        if data is None:
            lost.add(side)
            run.perform(run.core.lost(side, None))
        else:
            run.perform(run.core.receive_c2s(data) if side == CLIENT else run.core.receive_s2c(data))
    for side in (CLIENT, UPSTREAM):
        if side in run.closed and side not in lost:
            run.perform(run.core.lost(side, None))
    return run


def drive_file(name: str, conn: int = 0, **kw: Any) -> Run:
    return drive(reads(transcript(name)["connections"][conn]), **kw)

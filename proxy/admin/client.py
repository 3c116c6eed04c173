"""``triton-tap status``, ``mark`` and ``rotate``: one unary call each to a proxy's admin service."""

from __future__ import annotations

import asyncio
from typing import Any, TextIO

from proxy.admin.connect import admin_call
from proxy.admin.pb import admin_pb2 as pb
from proxy.admin.pb import admin_pb2_grpc as pb_grpc
from proxy.admin.pbjson import message_dict
from replay.capture.methods import short_method
from replay.errors import UserError


def _call(args: Any, method: str, request: Any) -> Any:
    box: list[Any] = []

    async def go(chan: Any) -> None:
        stub = pb_grpc.AdminServiceStub(chan)  # type: ignore[no-untyped-call]
        box.append(await getattr(stub, method)(request, timeout=30))

    asyncio.run(admin_call(args, go))
    return box[0]


#: The open-calls table's headings; the request-id lists are named as the capture's ``cancel`` record
#: names them (``in_flight``, ``responded``).
OPEN_CALL_COLUMNS = ("call", "method", "model", "age ms", "in flight", "responded")


def render_status(st: pb.StatusResponse, out: TextIO) -> None:
    """The Status as a few lines and a table of open calls (rich)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, highlight=False, width=None if out.isatty() else 160)
    tls = f"tls listen={'on' if st.tls_listen else 'off'} upstream={'on' if st.tls_upstream else 'off'}"
    pairs = [f"{st.listen} -> {st.upstream}"] if st.listen or not st.http_listen else []
    if st.http_listen:
        pairs.append(f"http {st.http_listen} -> {st.http_upstream}")
    console.print(f"triton-tap {st.version}, up {st.uptime_s:.0f}s: {', '.join(pairs)} ({tls})")
    c = st.counters
    rec = dict(c.records)
    # The counts are of records written, not of traffic relayed: while the disk is low the proxy relays and
    # drops the records (`dropped`, and gap records in the capture), so the line says which it counts.
    console.print(f"recorded: calls {rec.get('call_start', 0)}, messages {rec.get('message', 0)}, "
                  f"gaps {rec.get('gap', 0)}; records dropped {c.dropped}, writer queue {st.writer_queue}; "
                  f"open calls {len(st.open_calls)}"
                  + (f"; relayed bytes c2s {c.message_bytes['c2s']} s2c {c.message_bytes['s2c']}" if c.message_bytes else ""))
    if c.calls_by_cause:
        console.print("recorded ends: " + ", ".join(f"{k} {v}" for k, v in sorted(c.calls_by_cause.items())))
    console.print(f"tail: {st.tail.subscribers} watcher(s), {st.tail.records_sent} record(s) sent, "
                  f"{st.tail.records_dropped} dropped; seq {st.recent_first_seq}..{st.next_seq - 1} in memory")
    for f in st.capture_files:
        console.print(f"capture: {f}")
    if st.open_calls:
        table = Table(title="open calls", title_justify="left")
        for col in OPEN_CALL_COLUMNS:
            table.add_column(col)
        for oc in st.open_calls:
            # gRPC: the method's last part, as before; HTTP ("POST /v2/..."): its short name (HTTP generate_stream).
            method = oc.method.rsplit("/", 1)[-1] if oc.method.startswith("/") else short_method(oc.method)
            table.add_row(oc.call, method, _models(oc), f"{oc.age_ms:.0f}",
                          ", ".join(oc.in_flight), ", ".join(oc.responded))  # fmt: skip
        console.print(table)


def _models(oc: pb.OpenCall) -> str:
    """The models of the requests in flight (a stream's may differ), "?" where not known; with none in
    flight, the latest request's, marked idle."""
    if not oc.in_flight:
        return f"{oc.model} (idle)" if oc.model else ""
    if len(oc.in_flight_models) != len(oc.in_flight):  # (a proxy from before the field: its latest request's)
        return oc.model
    return ", ".join(dict.fromkeys(m or "?" for m in oc.in_flight_models))


def run_status(args: Any, out: TextIO) -> int:
    """``triton-tap status``."""
    st = _call(args, "Status", pb.StatusRequest())
    if args.json:
        import json

        status = message_dict(st)
        for oc in status.get("open_calls", ()):
            oc.pop("executing", None)  # responded's deprecated first name (admin.proto): one name here
        out.write(json.dumps(status, indent=2) + "\n")
    else:
        render_status(st, out)
    return 0


def run_mark(args: Any, out: TextIO) -> int:
    """``triton-tap mark``."""
    labels: dict[str, str] = {}
    for item in args.label:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--label must be KEY=VALUE, got {item!r}")
        labels[key] = value
    for text in (args.note, *args.label):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(f"the note and labels must be UTF-8 text: {text!r} is not") from None
    resp = _call(args, "Mark", pb.MarkRequest(note=args.note, labels=labels))
    out.write(f"marked at t_ns {resp.t_ns}\n")
    return 0


def run_rotate(args: Any, out: TextIO) -> int:
    """``triton-tap rotate``."""
    resp = _call(args, "Rotate", pb.RotateRequest())
    out.write(f"closed {resp.closed_file}\nnow writing {resp.new_file}\n")
    return 0

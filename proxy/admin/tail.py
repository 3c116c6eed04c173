"""``triton-tap tail``: capture records as they are written, from a proxy's admin service or from files.

Both sources give the capture's own JSON lines; each is decoded with the capture schema
(:func:`replay.capture.schema.decode`) and shown as one line (time, seq, call, direction, model,
request id, final flag, error, cause) or, with ``--json``, printed as it is. Filters are the hub's
(:class:`proxy.admin.hub.TailFilter`): the admin service applies them server-side, ``--follow``
applies the same code locally.

``tail CAPTURE_DIR --follow`` reads the newest capture of the directory as it is written
(:mod:`proxy.admin.follow`: plain, zstd or gzip files, across rotation and reopen).
"""

from __future__ import annotations

import asyncio
import datetime
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

import orjson

from proxy.admin.connect import admin_call
from proxy.admin.follow import POLL_S, capture_names, follow_lines, newest_with_state, newest_written, set_chains
from proxy.admin.hub import Dropped, Subscriber, TailFilter
from replay.capture import naming
from replay.capture.schema import Sticky, decode, encode
from replay.errors import UnknownKind, UserError

_STYLE = {"call_start": "cyan", "call_end": "bold", "cancel": "yellow", "late": "magenta", "gap": "red",
          "protocol_error": "red", "mark": "bold green", "capture_start": "dim", "capture_end": "dim"}  # fmt: skip


def describe(seq: int, line: bytes) -> tuple[str, str]:
    """``(kind, text)``: one human line for a capture line (unknown kinds shown by name)."""
    raw = orjson.loads(line)
    try:
        _, rec = decode(raw, path="<tail>")
    except UnknownKind as e:
        return e.kind, f"{seq:>7} {e.kind} (unknown to this triton-tap)"
    r: Any = rec  # fields are read per kind below
    # In integers: r.t_ns / 1e9 is a float that can round a time to the next millisecond, or second.
    seconds, ns = divmod(r.t_ns, 1_000_000_000)
    t = f"{datetime.datetime.fromtimestamp(seconds, datetime.UTC):%H:%M:%S}.{ns // 1_000_000:03d}"
    parts = [t, f"{seq:>7}", f"{r.kind:<13}"]
    call = getattr(r, "call", None)
    if call is not None:
        parts.append(call)
    kind = r.kind
    if kind == "message":
        parts += [r.dir, f"model={r.model}" if r.model is not None else "", _rid(r.request_id)]
        if r.final is not None:
            parts.append(f"final={str(r.final).lower()}")
        if r.finish_reason is not None:
            parts.append(f"finish_reason={r.finish_reason}")
        if r.error:
            parts.append(f"error={r.error!r}")
        if r.decode_error:
            parts.append(f"decode_error={r.decode_error!r}")
    elif kind == "call_start":
        # An HTTP call's method is its request line: the version says which port it came through.
        parts += [r.method, f"HTTP/{r.http_version}" if r.protocol == "http" else "", f"peer={r.peer}"]
    elif kind == "call_end":
        parts += [f"cause={r.cause}", f"status={r.status}", f"{r.duration_ms:.1f}ms"]
        if r.details:
            parts.append(f"details={r.details!r}")
    elif kind == "cancel":
        parts += [f"cause={r.cause}", f"in_flight={r.in_flight}", f"forwarded={str(r.forwarded_upstream).lower()}"]
    elif kind == "late":
        parts += [r.frame, _rid(r.request_id)]
    elif kind == "mark":
        labels = " ".join(f"{k}={v}" for k, v in sorted(r.labels.items()))
        parts += [repr(r.note), labels]
    elif kind == "gap":
        parts += [f"dropped={r.dropped}", r.reason]
    elif kind == "capture_end":
        parts += [r.reason, r.next_file or ""]
    elif kind == "capture_start":
        parts.append(f"file_index={r.file_index}")
        if r.listen or r.http_listen is None:  # "" when only HTTP is relayed
            parts += [f"listen={r.listen}", f"upstream={r.upstream}"]
        if r.http_listen is not None:
            parts += [f"http_listen={r.http_listen}", f"http_upstream={r.http_upstream}"]
    elif kind == "protocol_error":
        parts += [r.side, r.error]
    return kind, " ".join(p for p in parts if p)


def _rid(rid: str | None) -> str:
    return "" if rid is None else f"id={rid!r}"


class Printer:
    """Writes records (and drop notices) to the terminal: JSON lines, or one described line each."""

    def __init__(self, out: TextIO, err: TextIO, as_json: bool) -> None:
        self.out, self.err, self.as_json = out, err, as_json
        self.console: Any = None
        if not as_json and out.isatty():
            from rich.console import Console

            self.console = Console(file=out, highlight=False, soft_wrap=True)

    def record(self, seq: int, line: bytes) -> None:
        """One capture line."""
        if self.as_json:
            self.out.write(line.decode() + "\n")
        else:
            kind, text = describe(seq, line)
            if self.console is not None:
                from rich.markup import escape

                style = _STYLE.get(kind)
                self.console.print(f"[{style}]{escape(text)}[/]" if style else escape(text))
            else:
                self.out.write(text + "\n")
        self.out.flush()

    def warning(self, text: str) -> None:
        """One line on stderr (the follow skipped files that were removed before it read them)."""
        print(f"triton-tap: warning: {text}", file=self.err, flush=True)

    def dropped(self, count: int, first: int, last: int) -> None:
        """The proxy dropped records for this watcher (it read too slowly)."""
        print(f"triton-tap: warning: {count} record(s) not shown (seq {first}..{last}): this tail read too slowly",
              file=self.err, flush=True)  # fmt: skip


# -- from the admin service ---------------------------------------------------------------------------


def tail_request(flt: TailFilter, from_seq: int | None, max_queue: int = 0) -> Any:
    """The TailRequest for a filter."""
    from proxy.admin.pb import admin_pb2 as pb

    req = pb.TailRequest(filter=pb.TailFilter(models=sorted(flt.models), methods=sorted(flt.methods),
                                              request_ids=sorted(flt.request_ids), kinds=sorted(flt.kinds)),
                         max_queue=max_queue)  # fmt: skip
    if from_seq is not None:
        req.from_seq = from_seq
    return req


async def tail_admin(chan: Any, flt: TailFilter, printer: Printer, from_seq: int | None = None) -> None:
    """Print the Tail stream until the proxy ends it."""
    from proxy.admin.pb import admin_pb2_grpc as pb_grpc

    stub = pb_grpc.AdminServiceStub(chan)  # type: ignore[no-untyped-call]
    async for resp in stub.Tail(tail_request(flt, from_seq)):
        which = resp.WhichOneof("event")
        if which == "record":
            printer.record(resp.record.seq, resp.record.json)
        elif which == "dropped":
            d = resp.dropped
            printer.dropped(d.count, d.first_seq, d.last_seq)
        elif which == "started" and resp.started.from_seq_lost:
            print(f"triton-tap: warning: seq {from_seq} is no longer in the proxy's memory: starting at "
                  f"{resp.started.first_seq}", file=printer.err, flush=True)  # fmt: skip


# -- from files being written ------------------------------------------------------------------------


async def tail_files(directory: Path, flt: TailFilter, printer: Printer, from_seq: int | None = None,
                     live: bool = False) -> None:  # fmt: skip
    """``tail CAPTURE_DIR --follow``: the newest capture, filtered as the admin service filters; a capture set
    (``record --workers``) as every worker's chain, their lines as they come, a worker's chain that appears
    after the follow started included. ``from_seq``: the records before it are not printed (of each chain:
    a worker's seq numbers are its own). ``live``: only a capture being written (:func:`_first_chains`)."""
    chains = await _first_chains(directory, printer, live)
    name = naming.parse(chains[0].name)
    the_set = name.capture_set if name is not None else ""
    if not the_set:
        one = ((0, path, line) async for path, line in follow_lines(chains[0], printer.warning))
        await _tail_lines(one, flt, printer, from_seq)
        return
    lines: asyncio.Queue[tuple[int, Path, bytes] | BaseException | None] = asyncio.Queue()
    tasks: list[asyncio.Task[None]] = []
    followed: set[str] = set()  # the chains' stems (a chain's first file present changes as retention works)
    open_chains = 0

    async def chain(k: int, first: Path) -> None:
        try:
            async for path, line in follow_lines(first, printer.warning):
                await lines.put((k, path, line))
        except Exception as e:  # (a CaptureError: raised where the lines are read, as for one chain)
            await lines.put(e)
        finally:
            await lines.put(None)  # (this chain is over)

    def follow(found: list[Path]) -> None:
        nonlocal open_chains
        for first in found:
            stem = _stem(first)
            if stem not in followed:
                followed.add(stem)
                open_chains += 1
                k = len(tasks)
                tasks.append(asyncio.create_task(chain(k, first), name=f"tail-follow-chain-{k}"))

    async def look_again() -> None:
        while True:
            await asyncio.sleep(POLL_S)
            follow(set_chains(directory, the_set))

    async def merged() -> AsyncIterator[tuple[int, Path, bytes]]:
        # A chain that fails (damage, or a worker that died without closing it) is said once the others have
        # ended: a worker that fails stops the set, and the others' last lines are still to print.
        nonlocal open_chains
        failed = None
        while open_chains:
            item = await lines.get()
            if item is None:
                open_chains -= 1
            elif isinstance(item, BaseException):
                failed = failed or item
            else:
                yield item
        if failed is not None:
            raise failed

    follow(chains)
    finder = asyncio.create_task(look_again(), name="tail-follow-find-chains")
    try:
        await _tail_lines(merged(), flt, printer, from_seq)
    finally:
        for task in (finder, *tasks):
            task.cancel()
        await asyncio.gather(finder, *tasks, return_exceptions=True)


async def _first_chains(directory: Path, printer: Printer, live: bool = False) -> list[Path]:
    """:func:`newest_chains`, once there is a capture: a follow started with ``record`` (a script starting both,
    a unit) waits for the proxy to create the directory and open its first file, as ``tail -F`` waits for a
    file, and says so once. A path that is a file is bad input at once.

    The newest capture may be one no proxy writes any more (an earlier run's, in a directory it left files
    in): it is shown as it was left, and stderr says so first, since its end (or its proxy's stop) is not the
    end of a proxy started with the follow. ``live``: only a capture being written is followed, the newest
    one, or one that began after the follow did, even if it is over by the time the follow looks (a run
    shorter than a poll); none, the follow waits for one."""
    said = False
    over: set[str] = set()  # (newest_written's: the captures found over, not looked at again)
    said_over: str | None = None
    before: set[str] | None = None  # live: the captures there when the follow first looked
    while True:
        if directory.exists() and not directory.is_dir():
            raise UserError(f"{str(directory)!r} is not a directory")
        captures = capture_names(directory)
        if live and before is None:
            before = captures
        if captures:
            if not live:
                chains, state = newest_with_state(directory)
                if state == "over":
                    printer.warning(f"the newest capture in {str(directory)!r} ({chains[0].name}) is not being written "
                                    "(its proxy closed it or stopped): showing it as it was left (--live waits for a "
                                    "capture being written)")  # fmt: skip
                return chains
            written, newest = newest_written(directory, over)
            if written is not None:
                return written
            assert before is not None
            began = sorted(captures - before)
            if began:
                # Begun and over between two looks: still the run the follow was started for.
                return set_chains(directory, began[-1])
            if newest is not None and newest in over and said_over != newest:
                printer.warning(f"the newest capture in {str(directory)!r} ({newest}) is not being written (its "
                                "proxy closed it or stopped): waiting for one that is (Ctrl-C to stop)")  # fmt: skip
                said_over, said = newest, True
        if not said:
            printer.err.write(f"triton-tap: waiting for a capture in {str(directory)!r} (Ctrl-C to stop)\n")
            printer.err.flush()
            said = True
        await asyncio.sleep(POLL_S)


def _stem(path: Path) -> str:
    named = naming.parse(path.name)
    return named.stem if named is not None else path.name


async def _tail_lines(source: AsyncIterator[tuple[int, Path, bytes]], flt: TailFilter, printer: Printer,
                      from_seq: int | None = None) -> None:  # fmt: skip
    """The lines of the chains (``(chain, file, line)``), filtered and printed from seq ``from_seq`` on."""
    sub = Subscriber(flt, asyncio.get_running_loop(), max_queue=2**62, max_bytes=2**62, open_methods={})
    start = from_seq or 0
    # Sparse lines lean on earlier lines of their own file only: per chain, its current file and that file's state.
    states: dict[int, tuple[Path, Sticky]] = {}
    async for k, path, line in source:
        state = states.get(k)
        if state is None:
            _said_gone(k, path, line, from_seq, printer)
        if state is None or state[0] != path:
            state = states[k] = (path, {})
        raw = orjson.loads(line)
        try:
            seq, record = decode(raw, path=str(path), sticky=state[1])
        except UnknownKind as e:
            if (not flt.kinds or e.kind in flt.kinds) and e.seq >= start:
                printer.record(e.seq, line)
            continue
        # Printed as a line that stands alone (what the admin service's Tail sends too). The records before
        # --from-seq go through the filter all the same: a call that started before it is still told by
        # its model or request id.
        sub.offer(seq, record, encode(record, seq).rstrip(b"\n"))
        while sub.items:
            item = sub.items.popleft()
            if not isinstance(item, Dropped) and item[0] >= start:
                printer.record(item[0], item[2])


def _said_gone(k: int, path: Path, line: bytes, from_seq: int | None, printer: Printer) -> None:
    """A chain's first line, after a seq ``from_seq`` that is no longer in the files (retention removed it):
    one warning, as the admin service's Tail gives of a seq no longer in memory."""
    seq = orjson.loads(line).get("seq")
    if from_seq is not None and isinstance(seq, int) and seq > from_seq:
        printer.warning(f"seq {from_seq} is no longer in the capture files: starting at {seq} ({path.name})")


def run_tail(args: Any) -> int:
    """``triton-tap tail``."""
    flt = TailFilter(models=frozenset(args.model), methods=frozenset(args.method),
                     request_ids=frozenset(args.request_id), kinds=frozenset(args.kind))  # fmt: skip
    printer = Printer(sys.stdout, sys.stderr, args.json)
    if (args.capture_dir is None) == (args.admin is None):
        raise UserError("give either --admin HOST:PORT or CAPTURE_DIR --follow")
    if args.capture_dir is not None:
        if not args.follow:
            raise UserError("tail CAPTURE_DIR needs --follow (to read a finished capture use `replay check`)")
        # Flags of a connection the follow never makes: ignored in silence, they would say it is one.
        for flag, value in (("--ca", args.ca), ("--server-name", args.server_name), ("--cert", args.cert),
                            ("--key", args.key)):  # fmt: skip
            if value is not None:
                raise UserError(f"{flag} is for tail --admin: tail CAPTURE_DIR --follow reads files")
        asyncio.run(tail_files(args.capture_dir, flt, printer, args.from_seq, args.live))
        return 0
    if args.live:
        raise UserError("--live goes with CAPTURE_DIR --follow (tail --admin follows the running proxy)")
    if args.follow:
        raise UserError("--follow goes with CAPTURE_DIR (tail --admin follows the proxy without it)")
    return asyncio.run(admin_call(args, lambda chan: tail_admin(chan, flt, printer, args.from_seq)))

"""``triton-tap replay send``: its flags (registered without importing anything heavy) and the command."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from replay.cli.base import add_capture_argument, hostport, parse_pairs, positive_float, positive_int
from replay.errors import EXIT_FINDINGS, EXIT_OK, UserError

if TYPE_CHECKING:
    from proxy.resend.plan import CallScript
    from proxy.resend.run import Tally


def add_send_command(sub: Any) -> None:
    """Register ``send`` on the ``replay`` subparser set."""
    p = sub.add_parser(
        "send",
        help="re-drive a capture's client traffic at a live Triton and record what comes back",
        description="Re-open every captured call against --target (gRPC) or --http-target (HTTP/1.1) with its method, recorded request bytes "
        "(needs a --payload full capture), half-close, metadata (hop-by-hop headers dropped; redacted values are "
        "not sent unless --header supplies them) and recorded grpc-timeout; re-enact the client's cancels and "
        "disconnects at the same offset (or after the same number of responses) and start calls at their "
        "recorded offsets, calls of one captured connection on one connection. The traffic runs through an "
        "in-process recorder, so the new capture (in --out) has the same schema and causes: compare it with "
        "`triton-tap diff CAPTURE NEW`. Exit 0: every call sent and its outcome observed; 1: some call was not sent "
        "or its connection was lost before its outcome (each named on stderr), or the target is unreachable at start "
        "(nothing written); 2: bad input (nothing written).",
    )
    add_capture_argument(p)
    p.add_argument("--target", type=hostport("--target", listen=False),
                   help="HOST:PORT of Triton's gRPC endpoint (needed when the capture has gRPC calls to send)")
    p.add_argument("--http-target", type=hostport("--http-target", listen=False), metavar="HOST:PORT",
                   help="HOST:PORT of Triton's HTTP endpoint (needed when the capture has HTTP calls to send)")
    p.add_argument("--out", type=Path, default=Path("sent"), metavar="DIR", help="directory for the new capture (default %(default)s)")
    p.add_argument("--speed", default="1", metavar="F|max", help="2 = twice as fast, 0.5 = half; max = no waiting (default 1)")
    p.add_argument("--loop", type=positive_int, default=1, metavar="N", help="send the whole capture N times (default 1)")
    p.add_argument("--cancel-at", choices=("time", "responses"), default="time",
                   help="re-enact a client cancel/disconnect at the recorded offset from the call start (time), or once "
                   "the client has the number of responses it had then, and not before that offset (default %(default)s)")
    p.add_argument("--model-map", action="append", default=[], metavar="OLD=NEW", help="send requests for OLD to NEW (repeatable)")
    p.add_argument("--only", action="append", default=[], metavar="KEY=VALUE[,...]",
                   help="send only calls matching all of KEY=V1|V2 (model, method, call, conn); repeatable: any of them")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                   help="send this header on every call (supplies a value the capture redacted; repeatable)")
    p.add_argument("--skip-unsendable", action="store_true",
                   help="send the calls that can be, and count the others in the summary, instead of failing")
    p.add_argument("--drain", type=positive_float, default=30.0, metavar="SECONDS",
                   help="how long a call may stay open after its client is done before send cancels it (default %(default)s)")
    p.set_defaults(func=_run)


def _load(args: argparse.Namespace) -> tuple[list[CallScript], int, dict[str, int], int, int]:
    """(the calls to send, how many calls the capture holds, the unsendable ones skipped by why, how many began
    before the capture, how many selected ones the recording proxy refused unprocessed)."""
    from proxy.resend.plan import parse_headers, parse_only, prepare, scripts, selected
    from replay.capture.reader import read_capture

    filters = parse_only(args.only)
    model_map = parse_pairs(args.model_map, "--model-map")
    headers = parse_headers(args.header)
    unstarted: set[str] = set()
    calls = scripts(read_capture(args.capture), unstarted)
    if not calls:
        raise UserError("the capture holds no calls to send" + (
            f": its {len(unstarted)} call(s) began before it (their call_start is not in it: give the files "
            "before it too)" if unstarted else ""))  # fmt: skip
    refused = sum(1 for c in calls if c.refused and selected(c, filters))
    chosen, skipped = prepare([c for c in calls if not c.refused], filters=filters, model_map=model_map,
                              headers=headers, skip_unsendable=args.skip_unsendable)  # fmt: skip
    if not chosen:
        raise UserError("no call to send" + (f": the {refused} selected were refused unprocessed by the recording proxy"
                                             if refused and not skipped
                                             else " (--only selects none)" if filters and not skipped else ""))  # fmt: skip
    return chosen, len(calls) + len(unstarted), skipped, len(unstarted), refused


def _run(args: argparse.Namespace) -> int:
    from proxy.ops import logs
    from proxy.resend.run import SendOptions, Tally, run_send
    from proxy.resend.schedule import parse_speed, plan_starts

    logs.configure("warning")
    speed = parse_speed(args.speed)
    if args.out.exists() and not args.out.is_dir():
        raise UserError(f"--out {str(args.out)!r} is not a directory")
    held = _captures_in(args.out)
    if held:
        # diff reads every capture of a directory: a second run's beside the first would be one mixed set.
        raise UserError(f"--out {str(args.out)!r} already holds {held} capture file(s): give a new or empty "
                        "directory (diff reads every capture file of a directory)")  # fmt: skip
    chosen, total, skipped, unstarted, refused = _load(args)
    if args.target is None and any(not c.http for c in chosen):
        raise UserError("the capture has gRPC calls to send: give --target (Triton's gRPC HOST:PORT)")
    if args.http_target is None and any(c.http for c in chosen):
        raise UserError("the capture has HTTP calls to send: give --http-target (Triton's HTTP HOST:PORT)")
    starts = plan_starts(chosen, speed, args.loop)
    opts = SendOptions(target=args.target, out=args.out, speed=speed, loops=args.loop, cancel_at=args.cancel_at,
                       drain_s=args.drain, http_target=args.http_target)  # fmt: skip
    tally = Tally(total=len(starts))
    began = time.monotonic()
    with _Progress(tally, sys.stderr) as tick:
        path = run_send(starts, opts, tally, tick)
    _summary(sys.stdout, path, chosen, total, skipped, (unstarted, refused), tally, time.monotonic() - began, args)
    return _unobserved(sys.stderr, tally, args.loop)


def _captures_in(directory: Path) -> int:
    from replay.capture.naming import looks_like_capture

    try:
        return sum(1 for p in directory.iterdir() if looks_like_capture(p.name))
    except FileNotFoundError:
        return 0


class _Progress:
    """A rich progress bar on stderr, only when it is a terminal: calls started, achieved rate, lag."""

    def __init__(self, tally: Tally, err: TextIO) -> None:
        self.tally, self.err = tally, err
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Any:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(file=self.err)
        if not console.is_terminal:
            return None
        self._progress = Progress(TextColumn("sending"), BarColumn(), TextColumn("{task.completed}/{task.total} calls"),
                                  TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[lag]}"),
                                  TimeElapsedColumn(), console=console, transient=True)  # fmt: skip
        self._progress.start()
        self._task = self._progress.add_task("send", total=self.tally.total, rate="", lag="")
        self._began = time.monotonic()
        return self.tick

    def tick(self) -> None:
        t = self.tally
        elapsed = max(1e-6, time.monotonic() - self._began)
        self._progress.update(self._task, completed=t.started, rate=f"{t.started / elapsed:.1f} calls/s",
                              lag=f"lag {t.lag.last * 1000:.0f} ms (max {t.lag.worst * 1000:.0f})")  # fmt: skip

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def _summary(out: TextIO, path: Path, chosen: list[CallScript], total: int, skipped: dict[str, int],
             not_sent: tuple[int, int], tally: Tally, wall_s: float, args: argparse.Namespace) -> None:  # fmt: skip
    """``not_sent``: how many calls began before the capture, and how many the recording proxy refused."""
    from collections import Counter

    from proxy.resend.h1client import BODY_END
    from proxy.resend.h2client import OUTCOMES
    from replay.machine.tracker import track

    new = track(path)
    recorded = Counter(c.recorded_cause or "open" for c in chosen)
    got = Counter(c.cause or "open" for c in new.calls)
    lines = [
        f"sent {tally.started} call(s) of {total} captured"
        + (f" x{args.loop} passes" if args.loop > 1 else "")
        + " to " + " and ".join(f"{t} ({what})" for t, what in ((args.target, "gRPC"), (args.http_target, "HTTP")) if t)
        + f" in {wall_s:.1f} s ({tally.started / max(wall_s, 1e-6):.1f} calls/s)",
        f"pacing lag: mean {tally.lag.mean * 1000:.1f} ms, worst {tally.lag.worst * 1000:.1f} ms",
    ]
    if tally.held.count:
        # Not lag: those calls were due then, since the calls before them ended that much later than recorded.
        lines.append(f"waited for earlier calls to end: {tally.held.count} call(s), mean {tally.held.mean * 1000:.1f} ms, "
                     f"worst {tally.held.worst * 1000:.1f} ms past their offset")  # fmt: skip
    unstarted, refused = not_sent
    if unstarted:
        lines.append(f"not sent: {unstarted} call(s) that began before the capture (their call_start is not in "
                     "it: the request headers are unknown; give the files before it too)")  # fmt: skip
    if refused:
        lines.append(f"not sent: {refused} call(s) the recording proxy refused unprocessed (REFUSED_STREAM at a GOAWAY; "
                     "a client may retry such a call itself, and its retry is a call of its own)")  # fmt: skip
    if skipped:
        lines.append("skipped (unsendable): " + "; ".join(f"{n} with {why}" for why, n in skipped.items()))
    unsent = sorted({k for c in chosen for k in c.redacted})
    if unsent:
        lines.append(f"redacted header(s) not sent (supply with --header): {', '.join(unsent)}")
    ended = ", ".join(f"{k} {v}" for k, v in sorted(tally.endings.items()))
    if ended:
        lines.append(f"ended by send: {ended}")
    lines.append("outcomes seen by send: " + ", ".join(f"{k} {tally.outcomes[k]}" for k in (*OUTCOMES, BODY_END)
                                                       if tally.outcomes[k]))  # fmt: skip
    if tally.http_status:
        lines.append("HTTP status seen by send: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.http_status.items()))
                     + f"; {tally.events} event(s) or whole body(ies) received")
    if tally.short:
        lines.append(f"{tally.short} client ending(s) sent --drain ({args.drain:g} s) after their offset: the server had "
                     "sent fewer responses than the client had then")
    if tally.unsent_messages:
        lines.append(f"not sent: {tally.unsent_messages} request message(s) of {tally.cut_calls} call(s) the server had "
                     "ended before their offset")  # fmt: skip
    if tally.stray_frames:
        lines.append(f"ignored {tally.stray_frames} frame(s) that arrived after the server had ended their call")
    causes = sorted(got.keys() | recorded.keys())
    # With --loop N each captured call was sent N times: the recorded count is per pass.
    per = "" if args.loop == 1 else f" x{args.loop}"
    lines.append(f"causes (recorded{per} -> new): " + ", ".join(
        f"{k} {recorded[k]}{per} -> {got[k]}" for k in causes))  # fmt: skip
    lines.append(f"new capture: {path}")
    lines.append(f"compare: triton-tap diff {' '.join(args.capture)} {path}")
    out.write("\n".join(lines) + "\n")
    out.flush()


def _unobserved(err: TextIO, tally: Tally, loops: int) -> int:
    """Name every call that ended without an outcome send observed, grouped by why; the exit code."""
    if not tally.unobserved:
        return EXIT_OK
    groups: dict[tuple[str, str | None], list[str]] = {}
    for u in tally.unobserved:
        groups.setdefault((u.outcome, u.why), []).append(u.call if loops == 1 else f"{u.call} (pass {u.loop + 1})")
    lines = [f"send: {len(tally.unobserved)} of {tally.total} call(s) ended without an outcome send observed"]
    for (outcome, why), calls in groups.items():
        lines.append(f"send: {outcome}" + (f" ({why})" if why else "") + f": {len(calls)} call(s): {', '.join(calls)}")
    err.write("\n".join(lines) + "\n")
    err.flush()
    return EXIT_FINDINGS

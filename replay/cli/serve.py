"""``triton-tap serve``: argument parsing and the mock server process's lifetime."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay import readyfile
from replay.cli.base import add_capture_argument
from replay.cli.matching import MATCH_HELP, payload_hint, strategies_type
from replay.tools.match import STRATEGIES

if TYPE_CHECKING:
    from replay.tools.serve import MockTriton


def _timing(text: str) -> float | None:
    from replay.tools.serve import parse_timing

    try:
        return parse_timing(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


async def _serve_until_signalled(server: MockTriton, listen: str, what: str, ready_file: Path | None) -> None:
    import asyncio

    from replay.hostport import format_hostport, parse_hostport

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    port = await server.start(listen)
    where = format_hostport(parse_hostport(listen, "--listen", allow_port_zero=True)[0], port)
    try:
        if ready_file is not None:
            readyfile.write(ready_file, where)
        # The ready log line: clients can connect from here on.
        logging.getLogger("triton_tap.serve").info("serving %s on %s (Ctrl-C stops)", what, where)
        await stop.wait()
    finally:
        if ready_file is not None:  # no longer accepting connections
            readyfile.remove(ready_file)
        await server.stop()


def run_serve(args: argparse.Namespace) -> int:
    """``triton-tap serve``."""
    import asyncio

    from replay.tools.serve import MockTriton, load

    if args.ready_file is not None:
        readyfile.prepare(args.ready_file)  # before the capture is read: a bad path fails at once
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
    capture = load(args.capture)
    log = logging.getLogger("triton_tap.serve")
    for w in capture.outcomes.warnings:
        log.warning("capture: %s", w)
    payload_hint(capture, args.match, "the capture", sys.stderr)
    try:
        server = MockTriton(capture, speed=args.timing, strategies=args.match, keep_ids=args.keep_ids)
        spilled = capture.store.size if capture.store is not None else 0
        what = (f"{len(capture.calls)} captured call(s), {len(capture.candidates)} request(s) "
                f"({spilled:,} bytes of answers on disk)")  # fmt: skip
        asyncio.run(_serve_until_signalled(server, args.listen, what, args.ready_file))
    finally:
        capture.close()
    return 0


def add_serve_command(sub: Any) -> None:
    """Register ``serve`` on a subparser set."""
    p = sub.add_parser(
        "serve",
        help="a mock Triton gRPC server answering from captures",
        description="Impersonate the captured Triton for any gRPC client: ModelStreamInfer, ModelInfer and the "
        "readiness/metadata RPCs are answered from the capture(s). A request that matches nothing gets NOT_FOUND "
        "naming the closest captured request. Runs until SIGINT/SIGTERM.",
    )
    add_capture_argument(p, skip_damaged=True)
    p.add_argument("--listen", default="127.0.0.1:8001", help="HOST:PORT to serve on (default %(default)s)")
    p.add_argument(
        "--timing",
        type=_timing,
        default=1.0,
        metavar="as-captured|fast|xN",
        help="response delays: as captured relative to each request (default), none, or N times faster",
    )
    p.add_argument("--match", type=strategies_type, default=STRATEGIES, metavar="STRATEGIES", help=MATCH_HELP)
    p.add_argument(
        "--keep-ids",
        action="store_true",
        help="answer with the captured request ids instead of echoing the incoming ones",
    )
    readyfile.add_argument(p, "pid, listen")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.set_defaults(func=run_serve)

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

DEFAULT_LISTEN = "127.0.0.1:8001"

if TYPE_CHECKING:
    from replay.tools.serve import MockTriton


def _timing(text: str) -> float | None:
    from replay.tools.serve import parse_timing

    try:
        return parse_timing(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


async def _serve_until_signalled(
    server: MockTriton, listen: str | None, http_listen: str | None, what: str, ready_file: Path | None
) -> None:
    import asyncio

    from replay.hostport import format_hostport, parse_hostport
    from replay.tools.serve.httpd import HttpServe

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    http = HttpServe(server.session, server.other_used)
    wheres: list[str] = []
    addresses: dict[str, str] = {}
    try:
        if listen is not None:
            port = await server.start(listen)
            wheres.append(format_hostport(parse_hostport(listen, "--listen", allow_port_zero=True)[0], port))
        if http_listen is not None:
            port = await http.start(http_listen)
            addresses["http_listen"] = format_hostport(parse_hostport(http_listen, "--http-listen",
                                                                      allow_port_zero=True)[0], port)  # fmt: skip
            wheres.append(addresses["http_listen"] + " (HTTP)")
        if ready_file is not None:
            readyfile.write(ready_file, wheres[0] if listen is not None else "", **addresses)
        # The ready log line: clients can connect from here on.
        logging.getLogger("triton_tap.serve").info("serving %s on %s (Ctrl-C stops)", what, " and ".join(wheres))
        await stop.wait()
    finally:
        if ready_file is not None:  # no longer accepting connections
            readyfile.remove(ready_file)
        await http.stop()
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
        what = (f"{len(capture.calls)} captured call(s), {len(capture.candidates) + len(capture.http_candidates)} request(s) "
                f"({spilled:,} bytes of answers on disk)")  # fmt: skip
        # --http-listen alone serves HTTP only; --listen beside it serves both.
        listen = args.listen if args.listen is not None or args.http_listen is None else None
        if listen is None and args.http_listen is None:
            listen = DEFAULT_LISTEN
        asyncio.run(_serve_until_signalled(server, listen, args.http_listen, what, args.ready_file))
    finally:
        capture.close()
    return 0


def add_serve_command(sub: Any) -> None:
    """Register ``serve`` on a subparser set."""
    p = sub.add_parser(
        "serve",
        help="a mock Triton (gRPC and/or HTTP) answering from captures",
        description="Impersonate the captured Triton for any gRPC client: ModelStreamInfer, ModelInfer and the "
        "readiness/metadata RPCs are answered from the capture(s); with --http-listen, Triton's HTTP port too "
        "(infer, generate, generate_stream as server-sent events, health and metadata). A request that matches "
        "nothing gets NOT_FOUND (HTTP: 404) naming the closest captured request. Runs until SIGINT/SIGTERM.",
    )
    add_capture_argument(p, skip_damaged=True)
    p.add_argument(
        "--listen",
        default=None,
        help=f"HOST:PORT to serve gRPC on (default {DEFAULT_LISTEN}; none when only --http-listen is given)",
    )
    p.add_argument("--http-listen", default=None, metavar="HOST:PORT",
                   help="also (or, without --listen, only) serve Triton's HTTP/1.1 port here")  # fmt: skip
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

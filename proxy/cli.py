"""The ``triton-tap`` command: ``record`` (the proxy), ``demo``, and the offline replay commands.

Every failure a user can cause or meet (bad flag, busy port, unreachable upstream, unreadable
capture) ends as one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from proxy import __version__, logs
from replay.errors import CaptureError, TritonTapError, UserError

EXIT_USAGE = 2
EXIT_FAILURE = 1


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer: {text!r}")
    return int(text)


def add_record_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``triton-tap record`` (also ``python -m proxy``)."""
    p.add_argument("--listen", default="127.0.0.1:8011", help="HOST:PORT to accept clients on (default %(default)s)")
    p.add_argument("--upstream", default="127.0.0.1:8001", help="HOST:PORT of Triton's gRPC endpoint (default %(default)s)")
    p.add_argument("--capture-dir", type=Path, default=Path("captures"), help="directory for *.jsonl capture files (default %(default)s)")
    p.add_argument("--payload", choices=("none", "meta", "full"), default="meta",
                   help="none: message sizes only; meta: Triton labels, no tensor bytes (default); full: also the raw message, base64")
    p.add_argument("--payload-cap", type=_positive_int, default=None, metavar="BYTES",
                   help="with --payload full: store at most this many bytes per message")
    p.add_argument("--rotate-mb", type=_positive_float, default=None, metavar="MB", help="start a new capture file after this many MB")
    p.add_argument("--gzip-rotated", action="store_true", help="compress closed rotated files to .jsonl.gz")
    p.add_argument("--drain-timeout", type=_positive_float, default=10.0, metavar="SECONDS",
                   help="on SIGTERM/SIGINT, wait this long for open calls before ending them (default %(default)s)")
    p.add_argument("--redact", action="append", default=[], metavar="KEY",
                   help="also redact this metadata key's value (repeatable; authorization, cookie, x-api-key, *-token are always redacted)")
    p.add_argument("--redact-input", action="append", default=[], metavar="NAME",
                   help="with --payload full: cut this input tensor's data out of stored requests, keeping name, "
                        "datatype, shape, size and an HMAC-SHA256 (repeatable)")
    p.add_argument("--redact-salt", default=None, metavar="TEXT",
                   help="HMAC key for --redact-input hashes: the same salt gives comparable hashes across captures "
                        "(not recorded; or env TRITON_TAP_REDACT_SALT); default: random per capture, recorded in capture_start")
    tls = p.add_argument_group("TLS (default: h2c, plaintext HTTP/2, on both sides)")
    tls.add_argument("--tls-cert", type=Path, default=None, metavar="PEM", help="serve clients over TLS with this certificate chain (ALPN h2)")
    tls.add_argument("--tls-key", type=Path, default=None, metavar="PEM", help="private key of --tls-cert")
    tls.add_argument("--upstream-tls", action="store_true", help="connect to Triton over TLS (certificate and name verified)")
    tls.add_argument("--upstream-ca", type=Path, default=None, metavar="PEM", help="CA bundle for the upstream certificate (default: system store)")
    tls.add_argument("--upstream-cert", type=Path, default=None, metavar="PEM", help="client certificate for mutual TLS to Triton")
    tls.add_argument("--upstream-key", type=Path, default=None, metavar="PEM", help="private key of --upstream-cert")
    tls.add_argument("--upstream-server-name", default=None, metavar="NAME",
                     help="SNI and certificate name of the upstream, also sent as :authority (default: the --upstream host)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))


def run_record(args: argparse.Namespace) -> int:
    """``triton-tap record``."""
    from proxy.relay import DEFAULT_REDACT
    from proxy.server import ProxyConfig, run

    logs.configure(args.log_level)
    cfg = ProxyConfig(
        listen=args.listen,
        upstream=args.upstream,
        capture_dir=args.capture_dir,
        payload=args.payload,
        payload_cap=args.payload_cap,
        rotate_mb=args.rotate_mb,
        gzip_rotated=args.gzip_rotated,
        drain_timeout=args.drain_timeout,
        redact=DEFAULT_REDACT + tuple(k.lower() for k in args.redact),
        redact_inputs=tuple(args.redact_input),
        # The environment keeps a shared salt out of `ps` output and shell history.
        redact_salt=args.redact_salt if args.redact_salt is not None else os.environ.get("TRITON_TAP_REDACT_SALT"),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        upstream_tls=args.upstream_tls,
        upstream_ca=args.upstream_ca,
        upstream_cert=args.upstream_cert,
        upstream_key=args.upstream_key,
        upstream_server_name=args.upstream_server_name,
    )
    asyncio.run(run(cfg))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree."""
    parser = _Parser(prog="triton-tap", description="Record and replay Triton Inference Server gRPC traffic.")
    parser.add_argument("--version", action="version", version=f"triton-tap {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    rec = sub.add_parser("record", help="run the recording proxy")
    add_record_arguments(rec)
    rec.set_defaults(func=run_record)
    demo = sub.add_parser("demo", help="real CPU Triton + proxy + traffic (incl. a cancel) + capture summary")
    demo.add_argument("--workdir", type=Path, default=None, help="where to keep the capture and logs (default: a new temp dir)")
    demo.set_defaults(func=_run_demo)
    from replay.cli import add_replay_commands

    add_replay_commands(sub)
    return parser


def _run_demo(args: argparse.Namespace) -> int:
    from proxy.demo import main as demo_main

    logs.configure("warning")
    return demo_main(args.workdir)


def _run_guarded(args: argparse.Namespace) -> int:
    """Run a command; errors a user can meet become one line on stderr and an exit code."""
    try:
        code: int = args.func(args)
    except TritonTapError as e:
        print(f"triton-tap: error: {e}", file=sys.stderr)
        # The user's input (flags, paths, captures) is at fault: usage exit; otherwise a failure.
        return EXIT_USAGE if isinstance(e, (UserError, CaptureError)) else EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``triton-tap`` console script."""
    return _run_guarded(build_parser().parse_args(argv))


def record_main(argv: Sequence[str] | None = None) -> int:
    """``python -m proxy``: the same as ``triton-tap record``."""
    parser = _Parser(prog="python -m proxy", description="Run the triton-tap recording proxy.")
    add_record_arguments(parser)
    parser.set_defaults(func=run_record)
    return _run_guarded(parser.parse_args(argv))

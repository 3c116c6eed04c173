"""The ``triton-tap`` command: ``record`` (the proxy), ``demo``, ``replay send``, and the offline replay commands.

Every failure a user can cause or meet (bad flag, busy port, unreachable upstream, unreadable
capture) ends as one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proxy import __version__
from replay import readyfile
from replay.capture import naming
from replay.cli.base import (
    MAX_FLOAT,
    Parser,
    hostport,
    positive_float,
    positive_int,
    run_command,
    run_guarded,
    sigterm_interrupts,
)
from replay.errors import UserError


def _evidence(text: str) -> str:
    """Syntax and files of ``--evidence`` checked at parse time, so a config file's value is named as such."""
    from proxy.ops.evidence import parse_evidence

    try:
        parse_evidence(text, 1.0)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _zero_or_positive(text: str) -> float:
    """Seconds or megabytes where 0 means off."""
    try:
        if float(text) == 0.0:  # "0", "00", "0.00", "-0": off
            return 0.0
        return positive_float(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be a number >= 0 (0: off) and <= {MAX_FLOAT:g}: {text!r}") from None
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _always_redacted() -> str:
    from proxy.triton.metadata import DEFAULT_REDACT, REDACT_SUFFIXES

    return ", ".join([*DEFAULT_REDACT, *(f"*{s}" for s in REDACT_SUFFIXES)])


#: The gRPC pair when neither it nor the HTTP pair is given (``record`` as it always was).
GRPC_LISTEN, GRPC_UPSTREAM = "127.0.0.1:8011", "127.0.0.1:8001"


def _grpc_pair(args: argparse.Namespace) -> tuple[str, str]:
    """``--listen``/``--upstream``: their defaults unless only the HTTP pair is given (then ``""``: no gRPC)."""
    if (args.http_listen is None) != (args.http_upstream is None):
        raise UserError("--http-listen and --http-upstream go together")
    if args.http_upstream_tls and args.http_upstream is None:
        raise UserError("--http-upstream-tls needs --http-listen/--http-upstream (it is the HTTP upstream's TLS)")
    if args.http_listen is not None and args.listen is None and args.upstream is None:
        return "", ""
    return args.listen or GRPC_LISTEN, args.upstream or GRPC_UPSTREAM


def add_record_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``triton-tap record`` (also ``python -m proxy``)."""
    from proxy.ops.eventloop import EVENT_LOOPS

    p.add_argument("--listen", type=hostport("--listen", listen=True), default=None, help=f"HOST:PORT to accept gRPC clients on (default {GRPC_LISTEN} unless only the HTTP pair is given)")
    p.add_argument("--upstream", type=hostport("--upstream", listen=False), default=None, help=f"HOST:PORT of Triton's gRPC endpoint (default {GRPC_UPSTREAM} unless only the HTTP pair is given)")
    p.add_argument("--http-listen", type=hostport("--http-listen", listen=True), default=None, metavar="HOST:PORT",
                   help="also (or only) relay Triton's HTTP port: accept HTTP/1.1 clients here (with --http-upstream)")
    p.add_argument("--http-upstream", type=hostport("--http-upstream", listen=False), default=None, metavar="HOST:PORT",
                   help="HOST:PORT of Triton's HTTP endpoint (with --http-listen)")
    p.add_argument("--capture-dir", type=_directory, default=Path("captures"), help="directory for *.jsonl capture files (default %(default)s)")
    p.add_argument("--payload", choices=("none", "meta", "full"), default="meta",
                   help="none: message sizes and the labels request tracking needs (model, request ids, final/sequence "
                   "flags, output names, whether a response was an error) but no tensor specs or error texts; "
                   "meta: all Triton labels, no tensor bytes (default); full: also the raw message (see --payload-store)")
    p.add_argument("--payload-cap", type=positive_int, default=None, metavar="BYTES",
                   help="with --payload full: store at most this many bytes per message")
    p.add_argument("--payload-store", choices=("side", "inline"), default="side",
                   help="with --payload full: where message bytes go. side (default): messages of 1 KiB or more "
                   "raw, uncompressed, in a side file beside each capture file (capture-*.payload; their lines "
                   "say payload_at [offset, length]; keep the two files together), smaller ones base64 in their "
                   "line; inline: all base64 inside the JSON lines (self-contained files that triton-tap "
                   "versions before the side file read whole; ~1.7x the proxy CPU on a 100 MB tensor)")
    p.add_argument("--rotate-mb", type=positive_float, default=None, metavar="MB", help="start a new capture file after this many MB (its side file, with --payload full, included)")
    p.add_argument("--gzip-rotated", action="store_true",
                   help="with --compress none: compress closed rotated files to .jsonl.gz (given alone, it implies "
                   "--compress none, as before --compress existed)")
    p.add_argument("--compress", choices=("zstd", "gzip", "none"), default=None,
                   help="store the capture compressed as it is written, one frame per written batch "
                   "(capture-*.jsonl.zst / .jsonl.gz; a crash loses at most the last batch), or plain JSONL "
                   "(default: zstd; none with --gzip-rotated)")
    p.add_argument("--max-total-mb", type=positive_float, default=None, metavar="MB",
                   help="disk budget of the capture directory (all triton-tap capture files in it): the oldest closed "
                   "files are deleted to stay within it, and a files_removed record says which (default: no budget; "
                   "--rotate-mb defaults to a tenth of it and may be at most half)")
    p.add_argument("--min-free-mb", type=_zero_or_positive, default=None, metavar="MB",
                   help="stop writing records (forwarding goes on) while the capture filesystem has less free space; "
                   "a gap record counts what was not written (default: 64 or 5%% of the filesystem, whichever is "
                   "smaller; 0: off)")
    p.add_argument("--drain-timeout", type=positive_float, default=10.0, metavar="SECONDS",
                   help="on SIGTERM/SIGINT, wait this long for open calls before ending them (default %(default)s)")
    p.add_argument("--redact", action="append", default=[], metavar="KEY",
                   help=f"also redact this metadata key's value (repeatable; {_always_redacted()} are always redacted)")
    p.add_argument("--redact-input", action="append", default=[], metavar="NAME",
                   help="with --payload full: cut this input tensor's data out of stored requests, keeping name, "
                        "datatype, shape, size and an HMAC-SHA256 (repeatable)")
    p.add_argument("--redact-salt", default=None, metavar="TEXT",
                   help="HMAC key for --redact-input hashes: the same salt gives comparable hashes across captures "
                        "(not recorded; or env TRITON_TAP_REDACT_SALT); default: random per capture, recorded in capture_start")
    tls = p.add_argument_group("TLS (default: h2c, plaintext HTTP/2, on both sides)")
    tls.add_argument("--tls-cert", type=Path, default=None, metavar="PEM", help="serve clients over TLS with this certificate chain (ALPN h2)")
    tls.add_argument("--tls-key", type=Path, default=None, metavar="PEM", help="private key of --tls-cert")
    tls.add_argument("--tls-client-ca", type=Path, default=None, metavar="PEM",
                     help="require client certificates signed by this CA bundle (mutual TLS); call_start records "
                     "the verified subject; refused handshakes are logged and counted")
    tls.add_argument("--tls-watch", type=_zero_or_positive, default=10.0, metavar="SECONDS",
                     help="reload the TLS files (both sides) for new connections when they change on disk, checked "
                     "this often; SIGHUP also reloads them (default %(default)s; 0: only on SIGHUP)")
    tls.add_argument("--upstream-tls", action="store_true", help="connect to Triton's gRPC port over TLS (certificate and name verified)")
    tls.add_argument("--http-upstream-tls", action="store_true",
                     help="connect to the --http-upstream over TLS (an HTTPS front: Triton's own HTTP port has no TLS); "
                     "the --upstream-ca/--upstream-cert/--upstream-key/--upstream-server-name apply")
    tls.add_argument("--upstream-ca", type=Path, default=None, metavar="PEM", help="CA bundle for the upstream certificate (default: system store)")
    tls.add_argument("--upstream-cert", type=Path, default=None, metavar="PEM", help="client certificate for mutual TLS to Triton")
    tls.add_argument("--upstream-key", type=Path, default=None, metavar="PEM", help="private key of --upstream-cert")
    tls.add_argument("--upstream-server-name", default=None, metavar="NAME",
                     help="SNI and certificate name of the upstream, also sent as :authority (default: the --upstream host)")
    p.add_argument("--evidence", type=_evidence, default=None, metavar="metrics=URL,log=PATH",
                   help="after each cancel forwarded upstream, sample Triton's metrics endpoint (nv_inference_*) "
                   "and/or the lines appended to its verbose log, and record them as `evidence` records")
    p.add_argument("--evidence-window", type=positive_float, default=5.0, metavar="SECONDS",
                   help="how long to watch after each cancel (default %(default)s)")
    p.add_argument("--metrics", type=hostport("--metrics", listen=True), default=None, metavar="HOST:PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (default: off)")
    p.add_argument("--admin", type=hostport("--admin", listen=True), default=None, metavar="HOST:PORT",
                   help="serve the admin gRPC service (status, mark, rotate, tail) here (default: off; a "
                   "non-loopback address needs --tls-cert/--tls-key: it shows live request metadata)")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="N proxy processes on the --listen port (SO_REUSEPORT), one capture file chain each, "
                   "read as one capture set; --metrics port + k for worker k (default %(default)s)")
    p.add_argument("--event-loop", default="auto", choices=EVENT_LOOPS,
                   help="auto: uvloop when installed (it is a dependency on Linux and macOS; less CPU per "
                   "read and write), else asyncio's own loop (default %(default)s)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"),
                   help="info: start-up/shutdown, one line per call end, warnings (default %(default)s)")
    readyfile.add_argument(p, "pid, listen, http_listen, admin, metrics, capture; not with --workers")
    p.add_argument("--config", type=Path, default=None, metavar="FILE.toml", help="read these settings from a TOML file (keys = flag names without --); flags override it")


def _compress(compress: str | None, gzip_rotated: bool) -> str:
    """``--compress`` resolved: zstd by default; ``--gzip-rotated`` (compress closed files) needs plain files."""
    if compress is None:
        return "none" if gzip_rotated else "zstd"
    if gzip_rotated and compress != "none":
        raise UserError(f"--gzip-rotated compresses closed plain files; with --compress {compress} every file "
                        "is already compressed as written: drop --gzip-rotated")  # fmt: skip
    return compress


def _directory(text: str) -> Path:
    """A directory flag's value: ``''`` would be the working directory, which nobody means by leaving it empty."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a directory (use . for the working directory)")
    return Path(text)


def run_record(args: argparse.Namespace) -> int:
    """``triton-tap record``."""
    import os

    # grpc's C core (the admin service) would write INFO lines, not JSON, into the proxy's log (a plaintext
    # client at a TLS admin port); it reads this when grpc is imported. A value the user set stays.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    from proxy.ops import eventloop, logs
    from proxy.ops.evidence import parse_evidence
    from proxy.ops.server import ProxyConfig, run
    from proxy.triton.metadata import DEFAULT_REDACT

    logs.configure(args.log_level)
    listen, upstream = _grpc_pair(args)
    if args.payload != "full":
        # Flags that change only what --payload full stores: given with another mode, they would do nothing.
        moot = [flag for flag, given in (("--payload-cap", args.payload_cap is not None),
                                         ("--payload-store inline", args.payload_store == "inline"),
                                         ("--redact-input", bool(args.redact_input))) if given]  # fmt: skip
        if moot:
            raise UserError(f"{moot[0]} works with --payload full only (--payload {args.payload} stores no message bytes)")
    cfg = ProxyConfig(
        listen=listen,
        upstream=upstream,
        http_listen=args.http_listen,
        http_upstream=args.http_upstream,
        capture_dir=args.capture_dir,
        payload=args.payload,
        payload_cap=args.payload_cap,
        payload_store=args.payload_store,
        rotate_mb=args.rotate_mb,
        gzip_rotated=args.gzip_rotated,
        compress=_compress(args.compress, args.gzip_rotated),
        drain_timeout=args.drain_timeout,
        redact=DEFAULT_REDACT + tuple(k.lower() for k in args.redact),
        metrics=args.metrics,
        evidence=parse_evidence(args.evidence, args.evidence_window) if args.evidence is not None else None,
        redact_inputs=tuple(args.redact_input),
        # The environment keeps a shared salt out of `ps` output and shell history.
        redact_salt=args.redact_salt if args.redact_salt is not None else os.environ.get("TRITON_TAP_REDACT_SALT"),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        upstream_tls=args.upstream_tls,
        http_upstream_tls=args.http_upstream_tls,
        upstream_ca=args.upstream_ca,
        upstream_cert=args.upstream_cert,
        upstream_key=args.upstream_key,
        upstream_server_name=args.upstream_server_name,
        admin=args.admin,
        tls_client_ca=args.tls_client_ca,
        tls_watch_s=args.tls_watch,
        max_total_mb=args.max_total_mb,
        min_free_mb=args.min_free_mb,
        workers=args.workers,
        event_loop=args.event_loop,
        ready_file=args.ready_file,
    )
    if cfg.workers > 1:
        if cfg.http_listen is not None:
            raise UserError("--workers relays gRPC only: drop --workers to relay the HTTP port")
        if cfg.ready_file is not None:  # each worker listens on its own: no one moment is "ready"
            raise UserError("--ready-file works with one process: with --workers use `triton-tap health --wait`")
        from proxy.ops.workers import supervise

        return supervise(cfg, args.log_level)
    eventloop.run(run(cfg), cfg.event_loop)
    return 0


class _Version(argparse.Action):
    """``--version``: the version, and for each compiled module whether it runs compiled or why it runs
    uncompiled (the registry: :mod:`replay.compiled`); worked out only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:  # fmt: skip
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        from replay.compiled import COMPILED, PURE_ENV, active

        modules = active()
        width = max(map(len, modules))
        lines = [f"triton-tap {__version__}", f"compiled modules ({PURE_ENV}=1 runs their Python instead):"]
        for name, why in modules.items():
            lines.append(f"  {name:<{width}}  {why if why == COMPILED else f'uncompiled: {why}'}")
        sys.stdout.write("\n".join(lines) + "\n")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree (the ``record`` subparser is also ``parser.record_parser``)."""
    parser = Parser(prog="triton-tap", description="Record and replay Triton Inference Server gRPC traffic.")
    parser.add_argument("--version", action=_Version, help="show the version and which compiled modules run, and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    rec = sub.add_parser("record", help="run the recording proxy")
    add_record_arguments(rec)
    rec.set_defaults(func=run_record)
    parser.set_defaults(record_parser=rec)
    demo = sub.add_parser("demo", help="real CPU Triton + proxy + traffic (incl. a cancel) + capture summary")
    demo.add_argument("--workdir", type=Path, default=None, help="where to keep the capture and logs (default: a new temp dir)")
    demo.set_defaults(func=_run_demo)
    add_check_cancel(sub)
    from proxy.admin.commands import add_admin_commands
    from proxy.lab.command import add_lab_commands
    from proxy.ops.health import add_health_command
    from proxy.resend.cli import add_send_command
    from replay.cli.main import add_replay_commands

    add_send_command(add_replay_commands(sub))
    add_health_command(sub)
    add_admin_commands(sub)
    add_lab_commands(sub)
    return parser


def add_check_cancel(sub: Any) -> None:
    """``triton-tap check-cancel``: does the work stop after a cancel? (see :mod:`proxy.cancelcheck`)."""
    cc = sub.add_parser(
        "check-cancel",
        help="run the cancellation acceptance protocol against a Triton model and print a guarantee report",
        description="Cancel an executing and a queued request with a tritonclient method and gather evidence "
        "(client status, queue-service probe, Triton's verbose log, metrics, the proxy's view) of whether the "
        "work stopped. Exit 0: every case work_stopped true; 1: some work went on or a neighbour was hurt, or "
        "Triton is unreachable or misbehaved; 2: could not run (bad flag, unknown model, bad inputs), or a case "
        "could not be exercised or decided.",
    )
    cc.add_argument("--target", required=True, help="HOST:PORT of Triton's gRPC endpoint (or of a triton-tap proxy)")
    cc.add_argument("--model", required=True, help="model to test")
    cc.add_argument("--method", choices=("stream", "future", "aio"), default="stream",
                    help="stream: stop_stream(cancel_requests=True) (stream scope, decoupled models); future: "
                    "async_infer CallContext.cancel() (request scope, unary models); aio: tritonclient.grpc.aio "
                    "stream cancel() (stream scope) (default %(default)s)")
    cc.add_argument("--inputs", default=None, metavar="JSON",
                    help='inputs of the long request as {"NAME": array, ...} or @FILE (default: built-in recipe '
                    "for one BYTES prompt + one INT32 length input, with --length)")
    cc.add_argument("--probe-inputs", default=None, metavar="JSON",
                    help="inputs of the short probe/neighbour request (default: the recipe with length 1, or --inputs)")
    cc.add_argument("--length", type=positive_int, default=300, help="recipe: length of the long request (default %(default)s)")
    cc.add_argument("--cases", default="executing,queued", help="which cases to run (default %(default)s)")
    cc.add_argument("--allowance-ms", type=positive_float, default=300.0,
                    help="observation-delay allowance: evidence later than this after the cancel counts as "
                    "work that went on (default %(default)s)")
    cc.add_argument("--window", type=positive_float, default=6.0, metavar="SECONDS",
                    help="how long to watch the log/metrics after each cancel (the queued case: after the blocker's end, "
                    "when the cancelled request could start) (default %(default)s)")
    cc.add_argument("--start-wait-ms", type=positive_float, default=300.0,
                    help="--method future: how long after sending to assume the unary call is executing "
                    "(it shows no partial response) (default %(default)s)")
    cc.add_argument("--log", type=Path, default=None, metavar="PATH", help="Triton's log file, written with --log-verbose=1")
    cc.add_argument("--metrics", default=None, metavar="URL", help="Triton's metrics endpoint, e.g. http://HOST:8002/metrics")
    cc.add_argument("--through-proxy", action="store_true",
                    help="run the traffic through an in-process recording proxy and add its view of each cancel")
    cc.add_argument("--capture-dir", type=Path, default=None, help="with --through-proxy: keep the capture here")
    from proxy.admin.connect import add_tls_flags

    add_tls_flags(cc, "Triton (or the proxy at --target)")
    cc.add_argument("--json", action="store_true", help="print the report as one JSON document")
    cc.add_argument("--report", type=Path, default=None, metavar="FILE.md", help="also write the Markdown report here")
    cc.set_defaults(func=_run_check_cancel)


def _check_cancel_preflight(args: argparse.Namespace) -> None:
    """What can be known before the run (it takes seconds and a model's time) is checked first."""
    import os

    from replay.hostport import format_hostport, parse_hostport


    args.target = format_hostport(*parse_hostport(args.target, "--target"))
    if args.capture_dir is not None and not args.through_proxy:
        raise UserError("--capture-dir needs --through-proxy (only the in-process proxy writes a capture)")
    if args.log is not None and not (args.log.is_file() and os.access(args.log, os.R_OK)):
        raise UserError(f"--log {str(args.log)!r} is not a readable regular file")
    if args.metrics is not None and not args.metrics.startswith(("http://", "https://")):
        raise UserError(f"--metrics must be an http(s) URL, got {args.metrics!r}")
    if args.report is not None:
        report: Path = args.report
        if report.is_dir():
            raise UserError(f"--report {str(report)!r} is a directory")
        if naming.holds_capture(report.name):  # a typo must not turn a capture into Markdown after the run
            raise UserError(f"--report {str(report)!r} has a capture file's name: choose a .md name")
        where = report if report.exists() else (report.parent if str(report.parent) else Path("."))
        if not os.access(where, os.W_OK) or (where is not report and not where.is_dir()):
            raise UserError(f"--report {str(report)!r} is not writable")


def _run_check_cancel(args: argparse.Namespace) -> int:
    import json

    from proxy.admin.connect import quiet_handshake_logs

    if args.ca is not None:
        quiet_handshake_logs()  # before anything below imports grpc

    from proxy.cancelcheck import verdict
    from proxy.cancelcheck.inputs import parse_json_inputs
    from proxy.cancelcheck.protocol import CheckOptions, run_check
    from proxy.ops import logs

    logs.configure("warning")
    cases = tuple(c.strip() for c in args.cases.split(",") if c.strip())
    if not cases or set(cases) - {"executing", "queued"}:
        raise UserError(f"--cases must list executing and/or queued, got {args.cases!r}")
    _check_cancel_preflight(args)
    opts = CheckOptions(
        target=args.target, model=args.model, method=args.method,
        inputs=parse_json_inputs(args.inputs, "--inputs") if args.inputs else None,
        probe_inputs=parse_json_inputs(args.probe_inputs, "--probe-inputs") if args.probe_inputs else None,
        length=args.length, allowance_ms=args.allowance_ms, window_s=args.window, cases=cases,
        start_wait_ms=args.start_wait_ms,
        log_path=args.log, metrics_url=args.metrics, through_proxy=args.through_proxy, capture_dir=args.capture_dir,
        ca=args.ca, server_name=args.server_name, cert=args.cert, key=args.key,
    )  # fmt: skip
    # A run that cannot start ends as every command's errors do: an unreachable or misbehaving Triton
    # (UpstreamError) is exit 1, bad input (an unknown model, inputs it cannot build) exit 2.
    # A harness's timeout (SIGTERM) stops the in-process proxy as Ctrl-C does: its capture keeps its end.
    with sigterm_interrupts():
        report = run_check(opts)
    text = verdict.to_markdown(report)
    # Printed first: a report file that still fails to write must not throw the result away.
    print(json.dumps(verdict.to_json(report), indent=2) if args.json else text, flush=True)
    if args.report is not None:
        try:
            args.report.write_text(text)
        except OSError as e:
            raise UserError(f"--report {str(args.report)!r}: {e.strerror or e}") from None
    return verdict.exit_code(report)


def _run_demo(args: argparse.Namespace) -> int:
    from proxy.lab.demo import main as demo_main
    from proxy.ops import logs

    logs.configure("warning")
    return demo_main(args.workdir)


def _parse(parser: argparse.ArgumentParser, record_parser: argparse.ArgumentParser,
           argv: Sequence[str] | None) -> argparse.Namespace:  # fmt: skip
    """Parse; with ``record --config FILE`` the file's settings become defaults and argv is parsed again."""
    args = parser.parse_args(argv)
    if getattr(args, "config", None) is not None:
        from proxy.ops.config import load_config

        record_parser.set_defaults(**load_config(args.config, record_parser))
        args = parser.parse_args(argv)
    return args


def _run_guarded(parser: argparse.ArgumentParser, record_parser: argparse.ArgumentParser,
                 argv: Sequence[str] | None) -> int:  # fmt: skip
    """Parse and run a command: one error rule for both command trees (:func:`replay.cli.base.run_guarded`)."""

    def run() -> int:
        args = _parse(parser, record_parser, argv)
        return run_command(args)

    return run_guarded(run)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``triton-tap`` console script."""
    parser = build_parser()
    return _run_guarded(parser, parser.get_default("record_parser"), argv)


def record_main(argv: Sequence[str] | None = None) -> int:
    """``python -m proxy``: the same as ``triton-tap record``."""
    parser = Parser(prog="python -m proxy", description="Run the triton-tap recording proxy.")
    add_record_arguments(parser)
    parser.set_defaults(func=run_record)
    return _run_guarded(parser, parser, argv)

"""The admin client commands: ``tail``, ``status``, ``mark``, ``rotate`` (argparse only; grpc is imported when run)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from proxy.admin.connect import add_tls_flags, quiet_handshake_logs
from replay.capture import events as ev
from replay.cli.base import seq_number


def _connection_flags(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument("--admin", required=required, default=None, metavar="HOST:PORT",
                   help="the proxy's admin address (record --admin)")  # fmt: skip
    add_tls_flags(p, "the proxy's admin port")


def add_admin_commands(sub: Any) -> None:
    """Register ``tail``, ``status``, ``mark`` and ``rotate``."""
    t = sub.add_parser("tail", help="capture records as they are written (from --admin, or CAPTURE_DIR --follow)",
                       description="One line per record (time, seq, call, direction, model, request id, final "
                       "flag, error, cause); JSON lines (the capture's own) with --json.")  # fmt: skip
    t.add_argument("capture_dir", nargs="?", type=Path, default=None, metavar="CAPTURE_DIR",
                   help="follow the newest capture in this directory (with --follow) instead of --admin")  # fmt: skip
    t.add_argument("--follow", "-f", action="store_true", help="with CAPTURE_DIR: keep reading as the files grow and rotate")
    t.add_argument("--live", action="store_true",
                   help="with CAPTURE_DIR --follow: only a capture being written, or one begun after the follow "
                   "started; none is (the newest one's proxy closed it or stopped, as an earlier run's left in the "
                   "directory), wait for one")  # fmt: skip
    _connection_flags(t, required=False)
    t.add_argument("--model", action="append", default=[], metavar="M", help="only this model's calls (repeatable)")
    t.add_argument("--method", action="append", default=[], metavar="M",
                   help="only calls of this gRPC method, full path or short name (repeatable)")  # fmt: skip
    t.add_argument("--request-id", action="append", default=[], metavar="R", help="only this Triton request id (repeatable)")
    # The kinds this version knows: a typo is a bad flag, not a tail that waits for ever and prints nothing.
    t.add_argument("--kind", action="append", default=[], metavar="K", choices=sorted(c.kind for c in ev.RECORD_TYPES),
                   help="only records of this kind (repeatable): %(choices)s")  # fmt: skip
    t.add_argument("--from-seq", type=seq_number, default=None, metavar="SEQ",
                   help="start at this seq: --admin if the proxy still holds it (default: now); CAPTURE_DIR "
                   "--follow if its file is still there (default: the first file still there)")  # fmt: skip
    t.add_argument("--json", action="store_true", help="print the capture's JSON lines")
    t.set_defaults(func=_run_tail)
    s = sub.add_parser("status", help="what a running proxy is doing (its admin service's Status)")
    _connection_flags(s, required=True)
    s.add_argument("--json", action="store_true", help="print the Status as JSON")
    s.set_defaults(func=_run_status)
    m = sub.add_parser("mark", help="write a `mark` record into a running proxy's capture")
    _connection_flags(m, required=True)
    m.add_argument("note", help='the text, e.g. "starting load test 3"')
    m.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="a label (repeatable)")
    m.set_defaults(func=_run_mark)
    r = sub.add_parser("rotate", help="make a running proxy start a new capture file now")
    _connection_flags(r, required=True)
    r.set_defaults(func=_run_rotate)


def _run_tail(args: argparse.Namespace) -> int:
    quiet_handshake_logs()
    from proxy.admin.tail import run_tail

    return run_tail(args)


def _run_status(args: argparse.Namespace) -> int:
    quiet_handshake_logs()
    from proxy.admin.client import run_status

    return run_status(args, sys.stdout)


def _run_mark(args: argparse.Namespace) -> int:
    quiet_handshake_logs()
    from proxy.admin.client import run_mark

    return run_mark(args, sys.stdout)


def _run_rotate(args: argparse.Namespace) -> int:
    quiet_handshake_logs()
    from proxy.admin.client import run_rotate

    return run_rotate(args, sys.stdout)

"""``triton-tap health``: one gRPC health check through the proxy (container HEALTHCHECK, scripts).

It sends ``grpc.health.v1.Health/Check`` to the proxy's listen address, so it passes only when the
proxy accepts connections *and* relays to a Triton that reports SERVING. The check is a real call
through the proxy: it appears in the capture as a ``/grpc.health.v1.Health/Check`` call.

``--wait SECONDS`` asks again (a new connection each time, every RETRY_S) until the answer is SERVING
or the time is up: what a script that has just started ``record`` (or Triton) runs before its first
call. Each try that reached the proxy is a call in the capture too.

A proxy that serves TLS (``record --tls-cert``) is checked over TLS with ``--ca`` (and ``--server-name``,
and ``--cert``/``--key`` for one that requires client certificates), the flags of the admin commands,
built by the same :func:`proxy.admin.connect.client_tls`. A plaintext check that a TLS port closes
says so rather than only "Socket closed".
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from proxy.admin.connect import ClientTls, add_tls_flags, client_tls, closed_on_us, tls_hint
from proxy.relay.contract import OWN_ANSWER
from replay.cli.base import positive_float
from replay.errors import UpstreamError
from replay.hostport import format_hostport, parse_hostport

# HealthCheckResponse.status = SERVING (field 1, varint 1); an empty HealthCheckRequest asks for
# the whole server. Raw bytes: grpcio-health-checking would be a dependency for two constants.
_SERVING = b"\x08\x01"

#: ``--wait``: how long between two tries.
RETRY_S = 0.2


class NotServing(UpstreamError):
    """One try's failure. ``closed``: the port took the connection and closed it, which is what a TLS
    port does to a plaintext client (and a mutual-TLS one to a client without a certificate)."""

    def __init__(self, message: str, closed: bool = False) -> None:
        super().__init__(message)
        self.closed = closed


def check(target: str, timeout: float, tls: ClientTls | None = None) -> None:
    """Raise :class:`NotServing` unless ``target`` answers the health check with SERVING."""
    import grpc

    # Parsed here, not by grpc: grpc wraps port 99999 and logs its own C-core line for a bad target.
    host, port = parse_hostport(target, "--target")
    target = format_hostport(host, port)
    chan = grpc.insecure_channel(target) if tls is None else grpc.secure_channel(target, tls.credentials, tls.options)
    with chan as channel:
        call = channel.unary_unary("/grpc.health.v1.Health/Check")
        try:
            answer: bytes = call(b"", timeout=timeout)
        except grpc.RpcError as e:
            # A failed sync call is also a grpc.Call: it has the status code and details.
            details = str(e.details())
            if details.startswith(OWN_ANSWER):
                # A recording proxy's own answer: it is up, and its upstream (Triton) is what failed. Its words
                # say which, and "nothing listens there" would blame the proxy.
                details += " (the proxy answered: Triton behind it did not)"
            elif e.code() == grpc.StatusCode.UNAVAILABLE and "Connection refused" in details:
                details = "connection refused (nothing listens there)"  # grpc's own text says it three times
            closed = e.code() == grpc.StatusCode.UNAVAILABLE and closed_on_us(details)
            raise NotServing(f"health check via {target} failed: {e.code().name}: {details}", closed) from None
    if answer != _SERVING:
        raise NotServing(f"health check via {target}: not SERVING (response {answer.hex() or 'empty'})")


def explained(target: str, error: NotServing, tls: ClientTls | None) -> UpstreamError:
    """``error``, with why a closed connection was closed when TLS is why (one probe: asked once, at the end)."""
    hint = tls_hint(*parse_hostport(target, "--target"), tls) if error.closed else ""
    return UpstreamError(f"{error}; {hint}" if hint else str(error))


def wait_serving(target: str, timeout: float, wait: float, tls: ClientTls | None = None) -> int:
    """Ask until ``target`` answers SERVING, for at most ``wait`` seconds; how many tries it took.

    :class:`UpstreamError` with the last try's failure when the time is up."""
    # grpc is imported before the clock starts: its import (up to a second on a loaded machine) would
    # otherwise eat the wait, and a short --wait would give up after a single try.
    import grpc  # noqa: F401

    deadline = time.monotonic() + wait
    tries = 0
    while True:
        tries += 1
        try:
            # No try outlasts the wait (but each gets a moment to connect and answer).
            check(target, max(min(timeout, deadline - time.monotonic()), RETRY_S), tls)
            return tries
        except NotServing as e:
            left = deadline - time.monotonic()
            if left <= 0:
                raise UpstreamError(f"{explained(target, e, tls)}; still so after waiting {wait:g} s ({tries} tries)") from None
            time.sleep(min(RETRY_S, left))


def add_health_command(sub: Any) -> None:
    """Register ``health`` on a subparser set."""
    p = sub.add_parser(
        "health",
        help="gRPC health check through a running proxy (exit 0 when Triton is SERVING)",
        description="Send one grpc.health.v1.Health/Check to the proxy's listen address; it passes only when the "
        "proxy accepts connections and relays to a Triton that answers SERVING (the check is recorded as a call "
        "in the capture). With --wait, ask again until SERVING or the time is up. Exit 0: SERVING; 1: not "
        "SERVING, unreachable or timed out (with --wait: still so when the time was up); 2: bad arguments (a TLS "
        "file that does not load).",
    )
    p.add_argument("--target", default="127.0.0.1:8011", metavar="HOST:PORT",
                   help="the proxy's listen address (default %(default)s)")
    p.add_argument("--timeout", type=positive_float, default=3.0, metavar="SECONDS",
                   help="how long to wait for the answer (default %(default)s)")
    p.add_argument("--wait", type=positive_float, default=None, metavar="SECONDS",
                   help=f"ask again every {RETRY_S:g} s until SERVING, for up to SECONDS (a proxy or Triton that is "
                   "starting); exit 1 if it is still not SERVING then (default: ask once)")
    add_tls_flags(p, "the proxy (record --tls-cert)")

    def run(args: argparse.Namespace) -> int:
        parse_hostport(args.target, "--target")  # a bad address is said before a TLS file is read
        tls = client_tls(args.ca, args.server_name, args.cert, args.key)
        if args.wait is None:
            try:
                check(args.target, args.timeout, tls)
            except NotServing as e:
                raise explained(args.target, e, tls) from None
            print("SERVING", file=sys.stderr)
            return 0
        t0 = time.monotonic()
        tries = wait_serving(args.target, args.timeout, args.wait, tls)
        print(f"SERVING (after {tries} tries, {time.monotonic() - t0:.1f} s)" if tries > 1 else "SERVING", file=sys.stderr)
        return 0

    p.set_defaults(func=run)

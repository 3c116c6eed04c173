"""``triton-tap health``: one gRPC health check through the proxy (container HEALTHCHECK, scripts).

It sends ``grpc.health.v1.Health/Check`` to the proxy's listen address, so it passes only when the
proxy accepts connections *and* relays to a Triton that reports SERVING. The check is a real call
through the proxy: it appears in the capture as a ``/grpc.health.v1.Health/Check`` call.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from replay.cli.base import positive_float
from replay.errors import UpstreamError
from replay.hostport import format_hostport, parse_hostport

# HealthCheckResponse.status = SERVING (field 1, varint 1); an empty HealthCheckRequest asks for
# the whole server. Raw bytes: grpcio-health-checking would be a dependency for two constants.
_SERVING = b"\x08\x01"


def check(target: str, timeout: float) -> None:
    """Raise :class:`UpstreamError` unless ``target`` answers the health check with SERVING."""
    import grpc

    # Parsed here, not by grpc: grpc wraps port 99999 and logs its own C-core line for a bad target.
    host, port = parse_hostport(target, "--target")
    target = format_hostport(host, port)
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary("/grpc.health.v1.Health/Check")
        try:
            answer: bytes = call(b"", timeout=timeout)
        except grpc.RpcError as e:
            # A failed sync call is also a grpc.Call: it has the status code and details.
            raise UpstreamError(f"health check via {target} failed: {e.code().name}: {e.details()}") from None
    if answer != _SERVING:
        raise UpstreamError(f"health check via {target}: not SERVING (response {answer.hex() or 'empty'})")


def add_health_command(sub: Any) -> None:
    """Register ``health`` on a subparser set."""
    p = sub.add_parser(
        "health",
        help="gRPC health check through a running proxy (exit 0 when Triton is SERVING)",
        description="Send one grpc.health.v1.Health/Check to the proxy's listen address; it passes only when the "
        "proxy accepts connections and relays to a Triton that answers SERVING (the check is recorded as a call "
        "in the capture). Exit 0: SERVING; 1: not SERVING, unreachable or timed out; 2: bad arguments.",
    )
    p.add_argument("--target", default="127.0.0.1:8011", metavar="HOST:PORT",
                   help="the proxy's listen address (default %(default)s)")
    p.add_argument("--timeout", type=positive_float, default=3.0, metavar="SECONDS",
                   help="how long to wait for the answer (default %(default)s)")

    def run(args: argparse.Namespace) -> int:
        check(args.target, args.timeout)
        print("SERVING", file=sys.stderr)
        return 0

    p.set_defaults(func=run)

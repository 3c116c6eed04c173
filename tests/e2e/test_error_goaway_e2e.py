"""Triton ends a connection with an error GOAWAY; through the proxy the client still gets each call's status.

Triton 2.51's gRPC server (C-core) answers a PING flood with GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings")
and then, before it closes the connection, ends every open call with ``grpc-status: 14`` ("Too many
pings") and RST_STREAM(NO_ERROR). The client here is raw HTTP/2 (h2 would stop sending PINGs, and
reading, at the GOAWAY) with one stream answering slowly and one that sent no request yet.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer
from replay.capture import events as ev
from replay.capture.methods import STREAM_INFER
from replay.capture.reader import read_capture
from tests.support.raw_h2 import DATA, GOAWAY, HEADERS, RST_STREAM, RawClient, tokens_request

pytestmark = pytest.mark.timeout(240)

#: PINGs sent at most (gRPC C-core's server allows two without data in between, by default).
PINGS = 1000


def _flood(url: str) -> list[str]:
    """What the client gets from the GOAWAY on: every GOAWAY, HEADERS and RST_STREAM, in order."""
    host, port = url.rsplit(":", 1)
    client = RawClient(host, int(port))
    try:
        slow = client.open(STREAM_INFER)
        # The first response at once, the second after 2 s: the flood starts after the first, so the
        # stream's response headers are behind it whatever the timing.
        client.send(slow, tokens_request("slow", "s", 2, 2000), end=False)
        idle = client.open(STREAM_INFER)  # no request: it only gets its end
        assert client.wait(lambda: client.responses(slow) >= 1), f"no first response: {client.error}"
        mark = len(client.frames)
        goaway = False
        for _ in range(PINGS):
            client.ping()
            client.read_frames(lambda: False, timeout=0.001)
            goaway = any(f.type == GOAWAY for f in client.frames[mark:])
            if goaway or client.closed:
                break
        assert goaway, f"Triton sent no GOAWAY for {PINGS} PINGs: {[str(f) for f in client.frames[mark:]]}"

        def both_reset() -> bool:
            return {f.sid for f in client.frames[mark:] if f.type == RST_STREAM} >= {slow, idle}

        assert client.read_frames(both_reset), [str(f) for f in client.frames[mark:]]
        got = [f for f in client.frames[mark:] if f.type in (GOAWAY, HEADERS, RST_STREAM, DATA)]
        return [f"{f.sid} {f}" for f in got[next(i for i, f in enumerate(got) if f.type == GOAWAY) :]]
    finally:
        client.close()


def test_the_client_gets_each_calls_status_after_tritons_error_goaway(triton: TritonServer, tmp_path: Path) -> None:
    direct = _flood(triton.grpc_url)
    assert direct[0].startswith("0 GOAWAY (3, 11, b'too_many_pings')"), direct
    assert "1 HEADERS END_STREAM {'grpc-status': '14', 'grpc-message': 'Too many pings'}" in direct, direct
    with ProxyThread(triton.grpc_url, tmp_path / "captures", payload="meta", drain_timeout=5) as proxy:
        proxied = _flood(proxy.url)
    assert proxied == direct

    records = [r for _, r in read_capture([proxy.capture_path])]
    ends = [r for r in records if isinstance(r, ev.CallEnded)]
    assert [(e.status, e.details, e.cause) for e in ends] == [("UNAVAILABLE", "Too many pings", "error")] * 2, ends
    (violation,) = [r for r in records if isinstance(r, ev.ProtocolViolated)]
    assert (violation.side, violation.error_code) == ("client", 11), violation
    assert "too_many_pings" in violation.error

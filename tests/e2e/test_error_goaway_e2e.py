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
from proxy.triton.causes import status_name
from replay.capture import events as ev
from replay.capture.methods import STREAM_INFER
from replay.capture.reader import read_capture
from tests.support.raw_h2 import DATA, END_STREAM, GOAWAY, HEADERS, RawClient, tokens_request

pytestmark = pytest.mark.timeout(240)

#: PINGs sent at most (gRPC C-core's server allows two without data in between, by default).
PINGS = 1000


def _flood(url: str) -> tuple[str, dict[int, tuple[str, str]]]:
    """The GOAWAY the client gets, and each stream's first end after it: (grpc-status, grpc-message). Only the
    first: Triton may end the stream that sent no request twice (14 "Too many pings", 1 "CANCELLED"), in
    either order, and how many of those one read holds is timing."""
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

        def ends() -> dict[int, tuple[str, str]]:
            out: dict[int, tuple[str, str]] = {}
            for f in client.frames[mark:]:
                if f.type == HEADERS and f.flags & END_STREAM and f.sid not in out:
                    out[f.sid] = (f.said.get("grpc-status", ""), f.said.get("grpc-message", ""))
            return out

        assert client.read_frames(lambda: set(ends()) >= {slow, idle}), [str(f) for f in client.frames[mark:]]
        first = next(f for f in client.frames[mark:] if f.type == GOAWAY)
        assert not any(f.type == DATA for f in client.frames[mark:]), "a response after the GOAWAY"
        return str(first), ends()
    finally:
        client.close()


def test_the_client_gets_each_calls_status_after_tritons_error_goaway(triton: TritonServer, tmp_path: Path) -> None:
    direct_goaway, direct = _flood(triton.grpc_url)
    assert direct_goaway == "GOAWAY (3, 11, b'too_many_pings')", direct_goaway
    assert direct[1] == ("14", "Too many pings"), direct
    with ProxyThread(triton.grpc_url, tmp_path / "captures", payload="meta", drain_timeout=5) as proxy:
        goaway, proxied = _flood(proxy.url)
    assert goaway == direct_goaway
    assert proxied[1] == direct[1]
    assert proxied[3][0] in ("14", "1") and not proxied[3][1].startswith("triton-tap"), proxied  # Triton's own

    records = [r for _, r in read_capture([proxy.capture_path])]
    ends = {r.call: (r.status, r.details, r.cause) for r in records if isinstance(r, ev.CallEnded)}
    assert ends == {f"c1.{sid}": (status_name(int(code)), text, "error") for sid, (code, text) in proxied.items()}, ends
    (violation,) = [r for r in records if isinstance(r, ev.ProtocolViolated)]
    assert (violation.side, violation.error_code) == ("client", 11), violation
    assert "too_many_pings" in violation.error

"""A response still arriving when the client cancels: the capture holds what arrived of it.

The client here is raw HTTP/2 and never gives Triton flow-control credit, as a client that stopped reading:
Triton 2.51 sends a stream's first 65,535 bytes (its initial window) and waits. The ``tokens`` model's
responses are ~40 kB each, so the first arrives whole and the second is cut at the window's end; then the
client cancels.
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer
from replay.capture import events as ev
from replay.capture.methods import STREAM_INFER
from replay.capture.reader import read_capture
from replay.cli.main import main as replay_main
from tests.support.raw_h2 import DATA, RawClient, tokens_request

pytestmark = pytest.mark.timeout(240)

#: HTTP/2's initial stream window: what Triton sends of the responses before it waits for credit.
WINDOW = 65_535
PROMPT = "p" * 40_000


def _cancel_mid_response(url: str) -> list[int]:
    """The sizes of the DATA frames the client got before it cancelled (Triton waits at the window's end)."""
    host, port = url.rsplit(":", 1)
    client = RawClient(host, int(port), ack=False)
    try:
        sid = client.open(STREAM_INFER)
        body = tokens_request("big", PROMPT, 3, 0).SerializeToString()
        client.send_bytes(sid, b"\0" + len(body).to_bytes(4, "big") + body)  # (in frames of 16 KiB)

        def got() -> int:
            return sum(f.said for f in client.on(sid) if f.type == DATA)

        assert client.wait(lambda: got() >= WINDOW), f"Triton sent {got()} bytes: {client.error}"
        client.reset(sid)
        return [f.said for f in client.on(sid) if f.type == DATA]
    finally:
        client.close()


def test_a_response_cut_by_the_clients_cancel_is_recorded_as_far_as_it_came(
    triton: TritonServer, tmp_path: Path
) -> None:
    direct = _cancel_mid_response(triton.grpc_url)
    assert sum(direct) == WINDOW, direct
    with ProxyThread(triton.grpc_url, tmp_path / "captures", payload="meta", drain_timeout=5) as proxy:
        assert sum(_cancel_mid_response(proxy.url)) == WINDOW

    records = [r for _, r in read_capture([proxy.capture_path])]
    request, first, cut = [r for r in records if isinstance(r, ev.MessageSeen)]
    assert (request.dir, request.request_id, first.dir, first.request_id, first.final) == ("c2s", "big", "s2c", "big", False)
    arrived = WINDOW - (5 + first.size) - 5
    assert (cut.dir, cut.index, cut.size, cut.request_id) == ("s2c", 1, arrived, None), cut
    # (Written after a labelled response of its call: a reader must not fill the sticky fields in from that one.)
    assert (cut.model, cut.model_version, cut.outputs) == (None, None, None), cut
    assert cut.decode_error is not None and cut.decode_error.startswith(f"{ev.MESSAGE_CUT} (after {arrived} of its ")
    (end,) = [r for r in records if isinstance(r, ev.CallEnded)]
    kinds = [r.kind for r in records if getattr(r, "call", None) == end.call]
    assert kinds[:6] == ["call_start", "message", "message", "message", "cancel", "call_end"], kinds
    assert set(kinds[6:]) <= {"late"}, kinds  # (what Triton still sent on the stream, if anything)
    assert (end.cause, end.messages_s2c) == ("client_cancel", 2), end

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = replay_main(["check", str(proxy.capture_path)])
    assert code == 0, out.getvalue() + err.getvalue()
    assert "1 response message(s) cut by their call's end" in err.getvalue(), err.getvalue()

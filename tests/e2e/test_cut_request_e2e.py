"""A request still uploading when Triton ends the call: the capture holds what arrived of it.

Triton 2.51's gRPC server ends a call at its ``grpc-timeout`` whether or not the request message has
arrived whole. The client here is raw HTTP/2: it sends the first 60 kB of a 1 MB ``echo`` request, then
waits, as a client on a slow link would.
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from tritonclient.grpc import service_pb2

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer
from replay.capture import events as ev
from replay.capture.methods import INFER
from replay.capture.reader import read_capture
from replay.cli.main import main as replay_main
from tests.support.raw_h2 import END_STREAM, HEADERS, RawClient

pytestmark = pytest.mark.timeout(240)

#: Bytes of the 1 MB message sent: within HTTP/2's initial flow-control window.
SENT = 60_000


def _slow_upload(url: str) -> str:
    """The first end of the call the client got (Triton repeats it, then adds "Unable to parse request":
    frames on a closed stream, late records in the capture)."""
    host, port = url.rsplit(":", 1)
    client = RawClient(host, int(port))
    try:
        request = service_pb2.ModelInferRequest(model_name="echo", id="big")
        request.inputs.add(name="INPUT", datatype="UINT8", shape=[1_000_000])
        request.raw_input_contents.append(bytes(1_000_000))
        body = request.SerializeToString()
        message = b"\0" + len(body).to_bytes(4, "big") + body
        sid = client.open(INFER, timeout="300m")
        client.send_bytes(sid, message[:SENT])
        assert client.wait(lambda: client.ended(sid)), f"the call never ended: {client.error}"
        return next(str(f) for f in client.on(sid) if f.type == HEADERS and f.flags & END_STREAM)
    finally:
        client.close()


def test_a_request_cut_by_tritons_deadline_is_recorded_as_far_as_it_came(triton: TritonServer, tmp_path: Path) -> None:
    direct = _slow_upload(triton.grpc_url)
    assert "'grpc-status': '4'" in direct, direct
    with ProxyThread(triton.grpc_url, tmp_path / "captures", payload="meta", drain_timeout=5) as proxy:
        assert _slow_upload(proxy.url) == direct

    records = [r for _, r in read_capture([proxy.capture_path])]
    (cut,) = [r for r in records if isinstance(r, ev.MessageSeen)]
    assert (cut.dir, cut.size, cut.request_id) == ("c2s", SENT - 5, None), cut
    assert cut.decode_error is not None and cut.decode_error.startswith(ev.MESSAGE_CUT), cut
    (end,) = [r for r in records if isinstance(r, ev.CallEnded)]
    assert (end.cause, end.status, end.messages_c2s) == ("deadline", "DEADLINE_EXCEEDED", 1), end

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = replay_main(["check", str(proxy.capture_path)])
    assert code == 0, out.getvalue() + err.getvalue()
    assert "0 request(s) on 1 call(s)" in out.getvalue(), out.getvalue()  # Triton never had a request whole
    assert f"request on call {end.call} not decoded ({cut.decode_error}): not tracked" in err.getvalue(), err.getvalue()

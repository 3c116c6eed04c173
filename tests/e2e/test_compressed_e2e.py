"""Compressed gRPC traffic, recorded with --payload full from a real Triton that compresses its responses
(``--grpc-infer-response-compression-level high``) and a client that compresses its requests (gzip), then served.

The capture keeps each message as it crossed the wire (compressed); ``serve`` must hand a client the data the
live Triton sent, inflated, not zero-filled outputs under a warning that blames a ``meta`` capture (it did, for
every compressed message). ``--match payload`` alone (the ids changed) must find the compressed requests by
what they ask (it never matched one: their bytes did not parse).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer, model_repository
from replay.capture import events as ev
from replay.capture.reader import read_capture
from replay.tools.serve import MockTriton, load
from tests.support.loop_thread import BackgroundLoop
from tests.support.triton_client import echo_inputs, token_inputs
from tests.support.triton_server import started
from tests.support.user_client import TextAssembler

pytestmark = pytest.mark.timeout(300)

WAIT_S = 60.0


@pytest.fixture(scope="module")
def compressing(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """A tritonserver serving echo and tokens that compresses every gRPC inference response."""
    repo = tmp_path_factory.mktemp("repo_z")
    for name in ("echo", "tokens"):
        shutil.copytree(model_repository() / name, repo / name, symlinks=False)
    server = started(TritonServer(repo, workdir=tmp_path_factory.mktemp("triton_z"),
                                  extra_args=("--grpc-infer-response-compression-level=high",)), request)  # fmt: skip
    yield server
    server.stop()


#: grpc compresses a message only when that makes it smaller: the echoed tensor repeats itself, and the
#: stream's responses carry a long request id.
ECHOED = np.tile(np.arange(1, 9, dtype=np.uint8), 512)
LONG = "x" * 300


def _script(url: str, tag: str) -> dict[str, Any]:
    """Unary echo and a stream of two token requests, every request sent gzip-compressed; ids carry ``tag``."""
    out: dict[str, Any] = {}
    c = grpcclient.InferenceServerClient(url)
    try:
        r = c.infer("echo", echo_inputs(ECHOED), request_id=f"{tag}e1", compression_algorithm="gzip")
        out["echo"] = r.as_numpy("OUTPUT").tolist()
        got = TextAssembler()
        c.start_stream(callback=got, compression_algorithm="gzip")
        for rid, prompt in ((f"{tag}a{LONG}", "a"), (f"{tag}b{LONG}", "b")):
            c.async_stream_infer("tokens", token_inputs(prompt, 3), request_id=rid, enable_empty_final_response=True)
        got.wait_for(lambda s: {f"{tag}a{LONG}", f"{tag}b{LONG}"} <= s.done, WAIT_S)
        c.stop_stream()
        out["text"] = {rid.removeprefix(tag)[:1]: text for rid, text in got.state()["text"].items()}
    finally:
        c.close()
    return out


@pytest.mark.parametrize("match", [("id", "payload", "order"), ("payload",)])
def test_serve_answers_compressed_traffic_with_the_data_triton_sent(
    compressing: TritonServer, tmp_path: Path, loop: BackgroundLoop, request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture, match: tuple[str, ...],
) -> None:  # fmt: skip
    """Live through the proxy == served from its capture (every message of it compressed on the wire); with
    ``--match payload`` alone too, the served script's ids all new."""
    with ProxyThread(compressing.grpc_url, tmp_path / "live", payload="full", drain_timeout=5) as proxy:
        live = _script(proxy.url, "")
    assert live["echo"] == ECHOED.tolist()
    assert live["text"] == {"a": "a-0a-1a-2", "b": "b-0b-1b-2"}
    # Compressed on the wire, both ways, in both calls: what this test is about.
    compressed = {(r.call, r.dir) for _, r in read_capture(proxy.capture_path) if isinstance(r, ev.MessageSeen) and r.compressed}
    assert compressed == {("c1.1", "c2s"), ("c1.1", "s2c"), ("c1.3", "c2s"), ("c1.3", "s2c")}

    server = MockTriton(load(proxy.capture_path), speed=None, strategies=match)
    port = loop.run(server.start("127.0.0.1:0"))
    request.addfinalizer(lambda: loop.run(server.stop(0)))
    with caplog.at_level(logging.WARNING):
        served = _script(f"127.0.0.1:{port}", "new-" if match == ("payload",) else "")
    assert served == live
    assert not [r.getMessage() for r in caplog.records if "zero-filled" in r.getMessage()]
    assert server.unmatched == []

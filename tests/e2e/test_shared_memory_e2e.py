"""System shared memory recorded from a real Triton, then served and sent: the tensor data is never on the wire.

tritonclient (gRPC and HTTP) registers an input and an output region, infers the ``echo`` model with both in
shared memory (Triton writes the echo into the output region), unregisters, and sends one plain inference,
through the proxy (``--payload full``). ``serve`` answers the shared-memory inference as captured, leaves the
client's output region as it is and says so; ``send`` refuses the region calls and the inferences naming a
region (their data and keys are the recording host's), and with ``--skip-unsendable`` sends the plain ones.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer
from replay.tools.serve import MockTriton, load
from replay.tools.serve.httpd import HttpServe
from tests.support.loop_thread import BackgroundLoop

pytestmark = pytest.mark.timeout(300)

SIZE = 16
MODULES = {"grpc": grpcclient, "http": httpclient}


def _cli(*args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from proxy.cli import main; sys.exit(main(sys.argv[1:]))", *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _client_session(tag: str, grpc_url: str, http_url: str) -> dict[str, list[int]]:
    """What each protocol's output region held after the shared-memory inference (7s before it)."""
    got: dict[str, list[int]] = {}
    for proto, url in (("grpc", grpc_url), ("http", http_url)):
        mod: Any = MODULES[proto]
        client = mod.InferenceServerClient(url)
        names = (f"in_{proto}", f"out_{proto}")
        keys = (f"/tap_e2e_in_{proto}_{tag}", f"/tap_e2e_out_{proto}_{tag}")
        handles = [shm.create_shared_memory_region(n, k, SIZE) for n, k in zip(names, keys, strict=True)]
        try:
            shm.set_shared_memory_region(handles[0], [np.arange(1, SIZE + 1, dtype=np.uint8)])
            shm.set_shared_memory_region(handles[1], [np.full(SIZE, 7, dtype=np.uint8)])
            for n, k in zip(names, keys, strict=True):
                client.register_system_shared_memory(n, k, SIZE)
            x = mod.InferInput("INPUT", [SIZE], "UINT8")
            x.set_shared_memory(names[0], SIZE)
            o = mod.InferRequestedOutput("OUTPUT", **({"binary_data": True} if proto == "http" else {}))
            o.set_shared_memory(names[1], SIZE)
            client.infer("echo", [x], outputs=[o], request_id=f"shm-{proto}")
            got[proto] = shm.get_contents_as_numpy(handles[1], np.uint8, [SIZE]).tolist()
            client.unregister_system_shared_memory()
            plain = mod.InferInput("INPUT", [2], "UINT8")
            plain.set_data_from_numpy(np.array([5, 6], dtype=np.uint8))
            assert client.infer("echo", [plain], request_id=f"plain-{proto}").as_numpy("OUTPUT").tolist() == [5, 6]
        finally:
            for h in handles:
                shm.destroy_shared_memory_region(h)
            client.close()
    return got


def test_shared_memory_is_recorded_then_served_with_a_warning_and_refused_by_send(
    triton: TritonServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tag = f"{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with ProxyThread(triton.grpc_url, tmp_path / "cap", payload="full", drain_timeout=5, http_listen="127.0.0.1:0",
                     http_upstream=triton.http_url.removeprefix("http://")) as proxy:  # fmt: skip
        live = _client_session(tag, proxy.url, f"127.0.0.1:{proxy.proxy.http_port}")
    assert live == {"grpc": list(range(1, SIZE + 1)), "http": list(range(1, SIZE + 1))}  # Triton wrote the echo
    capture = tmp_path / "cap"

    # serve: the same client gets OK answers, its output region stays as it was, and it is told why.
    loop = BackgroundLoop()
    mock = MockTriton(load([capture]), speed=None)
    http = HttpServe(mock.session, mock.other_used)
    try:
        grpc_port = loop.run(mock.start("127.0.0.1:0"))
        http_port = loop.run(http.start("127.0.0.1:0"))
        with caplog.at_level(logging.WARNING, logger="triton_tap.serve"):
            served = _client_session(tag, f"127.0.0.1:{grpc_port}", f"127.0.0.1:{http_port}")
    finally:
        loop.run(http.stop())
        loop.run(mock.stop(0))
        loop.close()
    assert served == {"grpc": [7] * SIZE, "http": [7] * SIZE}
    said = [r.getMessage() for r in caplog.records if "the request names shared-memory region(s)" in r.getMessage()]
    assert len(said) == 2 and all("not in the capture" in s and "left as it is" in s for s in said), caplog.text
    assert sum("serve maps no shared memory" in r.getMessage() for r in caplog.records) == 1

    # send: the region calls and the shared-memory inferences are refused, in one line, nothing written.
    target = ["--target", triton.grpc_url, "--http-target", triton.http_url.removeprefix("http://")]
    refused = _cli("replay", "send", str(capture), *target, "--out", str(tmp_path / "refused"))
    assert refused.returncode == 2, refused.stderr
    assert "8 of 10 call(s) cannot be sent: 6 with a shared-memory register, unregister or status call" in refused.stderr
    assert "2 with an inference request whose tensors are in shared memory" in refused.stderr
    assert not (tmp_path / "refused").exists()
    sent = _cli("replay", "send", str(capture), *target, "--out", str(tmp_path / "sent"), "--skip-unsendable")
    assert sent.returncode == 0, sent.stderr
    assert "sent 2 call(s)" in sent.stdout + sent.stderr
    assert "skipped (unsendable): 6 with a shared-memory" in sent.stdout + sent.stderr

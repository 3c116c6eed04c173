"""Fixtures for end-to-end tests against a real Triton 2.51 server (CPU, Python backend)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.server import ProxyConfig, RecordingProxy
from proxy.tritonserver import TritonNotAvailable, TritonServer, model_repository
from tests.support.loop_thread import BackgroundLoop
from tests.support.proxy import stop_proxy


@pytest.fixture(scope="session")
def triton(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """One tritonserver for the whole session, serving proxy/models on loopback."""
    server = TritonServer(model_repository(), workdir=tmp_path_factory.mktemp("triton"))
    # Registered before start() so a server that starts but then fails readiness, or a
    # session torn down by an error, never leaves a tritonserver process behind.
    request.addfinalizer(server.stop)
    try:
        server.start()
    except TritonNotAvailable as exc:
        # A missing server is a broken environment, not an optional feature: fail loudly.
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def recording_proxy(triton: TritonServer, tmp_path: Path) -> Iterator[RecordingProxy]:
    """Our proxy in front of the session's tritonserver, on its own loop; stopped at teardown."""
    bg = BackgroundLoop()
    proxy = RecordingProxy(
        ProxyConfig(listen="127.0.0.1:0", upstream=triton.grpc_url, capture_dir=tmp_path / "captures", drain_timeout=5)
    )
    bg.run(proxy.start())
    yield proxy
    stop_proxy(proxy)
    bg.close()

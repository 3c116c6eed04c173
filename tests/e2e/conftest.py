"""Fixtures for end-to-end tests against a real Triton 2.51 server (CPU, Python backend)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonNotAvailable, TritonServer, model_repository


@pytest.fixture(scope="session")
def triton(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """One tritonserver for the whole session, serving proxy/lab/models on loopback."""
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
def recording_proxy(triton: TritonServer, tmp_path: Path) -> Iterator[ProxyThread]:
    """Our proxy (payload meta) in front of the session's tritonserver; stopped at teardown."""
    with ProxyThread(triton.grpc_url, tmp_path / "captures", payload="meta", drain_timeout=5) as proxy:
        yield proxy


@pytest.fixture
def both_ports(triton: TritonServer, tmp_path: Path) -> Iterator[ProxyThread]:
    """The proxy on both of Triton's ports (gRPC and HTTP), payload meta."""
    http_upstream = triton.http_url.removeprefix("http://")
    with ProxyThread(triton.grpc_url, tmp_path / "captures", payload="meta", drain_timeout=5,
                     http_listen="127.0.0.1:0", http_upstream=http_upstream) as proxy:  # fmt: skip
        yield proxy

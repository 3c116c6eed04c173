"""Fixtures for end-to-end tests against a real Triton 2.51 server (CPU, Python backend)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer, model_repository
from tests.support.triton_server import started


@pytest.fixture(scope="session")
def triton(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """One tritonserver for the whole session, serving proxy/lab/models on loopback."""
    server = started(TritonServer(model_repository(), workdir=tmp_path_factory.mktemp("triton")), request)
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

"""Starting a real tritonserver in a test: the session's, or a module's own (another model repository, other flags)."""

from __future__ import annotations

import pytest

from proxy.lab.tritonserver import TritonNotAvailable, TritonServer


def started(server: TritonServer, request: pytest.FixtureRequest) -> TritonServer:
    """``server`` started, its stop registered with ``request`` first: a server that starts but then fails
    readiness, or a session torn down by an error, never leaves a tritonserver process behind."""
    request.addfinalizer(server.stop)
    try:
        server.start()
    except TritonNotAvailable as exc:
        # A missing server is a broken environment, not an optional feature: fail loudly.
        pytest.fail(str(exc), pytrace=False)
    return server

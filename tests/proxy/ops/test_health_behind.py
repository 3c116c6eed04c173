"""`triton-tap health` through a recording proxy whose upstream is down: the proxy answers the check itself,
and its words say Triton is what failed. (The check printed "connection refused (nothing listens there)", the
text of no proxy at all, for a proxy that was up.)

The upstream is serve's mock Triton, stopped under the proxy: the proxy's own answer is what is pinned here."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.lab.background import ProxyThread
from proxy.ops import health
from replay.tools.serve import MockTriton, load
from tests.support.loop_thread import BackgroundLoop
from tests.support.paths import DATA


def test_a_proxy_whose_triton_is_down_is_not_reported_as_nothing_listening(tmp_path: Path) -> None:
    loop = BackgroundLoop()
    upstream = MockTriton(load(DATA / "stream_cancel.jsonl"), speed=1.0)
    port = loop.run(upstream.start("127.0.0.1:0"))
    proxy = ProxyThread(f"127.0.0.1:{port}", tmp_path).start()
    try:
        loop.run(upstream.stop(0))
        with pytest.raises(health.NotServing) as info:
            health.check(proxy.url, 10)
        message = str(info.value)
        assert message.startswith(f"health check via {proxy.url} failed: UNAVAILABLE: triton-tap: upstream 127.0.0.1:{port}")
        assert message.endswith("(the proxy answered: Triton behind it did not)") and "nothing listens" not in message
    finally:
        proxy.stop()
        loop.close()

"""check-cancel's in-process proxy is stopped whatever ends the run, from the moment it started.

The run's steps around the proxy are replaced (no Triton is needed to show where an interrupt can
land): a Ctrl-C (KeyboardInterrupt) raised by the metrics check that runs right after the proxy
started, before any case, must still stop the proxy, so its capture ends and no thread is left.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from proxy.cancelcheck import protocol
from proxy.cancelcheck.options import CheckOptions


class _Proxy:
    started: ClassVar[list[_Proxy]] = []

    def __init__(self, *_: Any, **__: Any) -> None:
        self.stopped = 0
        self.proxy = SimpleNamespace(port=1, capture_path=None)

    def start(self) -> _Proxy:
        _Proxy.started.append(self)
        return self

    def stop(self) -> None:
        self.stopped += 1


@pytest.mark.parametrize("where", ["metrics", "baseline"])
def test_an_interrupt_right_after_the_proxy_started_stops_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, where: str
) -> None:
    config = SimpleNamespace(model_transaction_policy=SimpleNamespace(decoupled=True))
    monkeypatch.setattr(protocol, "_connect", lambda opts: (config, "2.51"))
    monkeypatch.setattr(protocol, "recipe", lambda config, length: {})
    monkeypatch.setattr(protocol, "build_inputs", lambda config, values: [])
    monkeypatch.setattr("proxy.lab.background.ProxyThread", _Proxy)

    def interrupted(*_: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(protocol, "metrics_or_none" if where == "metrics" else "baseline", interrupted)
    _Proxy.started.clear()
    opts = CheckOptions(target="127.0.0.1:1", model="m", through_proxy=True, capture_dir=tmp_path,
                        metrics_url="http://127.0.0.1:1/metrics")  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        protocol.run_check(opts)
    assert [p.stopped for p in _Proxy.started] == [1]

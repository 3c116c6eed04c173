"""check-cancel's in-process proxy is stopped whatever ends the run, from the moment it started.

The run's steps around the proxy are replaced (no Triton is needed to show where an interrupt can
land): a Ctrl-C (KeyboardInterrupt) raised by the metrics check that runs right after the proxy
started, before any case, must still stop the proxy, so its capture ends and no thread is left.
"""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from proxy.cancelcheck import protocol
from proxy.cancelcheck.options import CheckOptions
from proxy.cli import main


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
    monkeypatch.setattr(protocol, "_connect", lambda opts, tls: (config, "2.51"))
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


def test_a_sigterm_during_the_run_stops_the_proxy_as_ctrl_c_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """`check-cancel` under a harness's timeout (SIGTERM, here sent by the baseline step to this very
    process) stops its in-process proxy and exits 130, as Ctrl-C does; the handler it installed is gone
    afterwards. The test's own SIGTERM handler stands in for the default action (which would end pytest)."""
    config = SimpleNamespace(model_transaction_policy=SimpleNamespace(decoupled=True), backend="python", platform="")
    monkeypatch.setattr(protocol, "_connect", lambda opts, tls: (config, "2.51"))
    monkeypatch.setattr(protocol, "recipe", lambda config, length: {})
    monkeypatch.setattr(protocol, "build_inputs", lambda config, values: [])
    monkeypatch.setattr("proxy.lab.background.ProxyThread", _Proxy)
    steps: list[str] = []

    def terminated(*_: Any) -> float:
        os.kill(os.getpid(), signal.SIGTERM)
        steps.append("after the signal")  # reached only when SIGTERM did not interrupt the run
        return 1.0

    monkeypatch.setattr(protocol, "baseline", terminated)
    monkeypatch.setattr(protocol, "executing_case", lambda setup: pytest.fail("the run went on after SIGTERM"))
    monkeypatch.setattr(protocol, "queued_case", lambda setup: pytest.fail("the run went on after SIGTERM"))
    untouched: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda sig, _frame: untouched.append(sig))
    try:
        _Proxy.started.clear()
        code = main(["check-cancel", "--target", "127.0.0.1:1", "--model", "m", "--through-proxy",
                     "--capture-dir", str(tmp_path)])  # fmt: skip
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert (code, steps, [p.stopped for p in _Proxy.started]) == (130, [], [1])
    assert untouched == [signal.SIGTERM]  # the handler before the run is restored after it

"""``--event-loop``: what each choice resolves to, and that the loop used is the one recorded."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from typing import Any

import pytest

from proxy.ops import eventloop
from replay.errors import UserError


def _without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "uvloop" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_auto_is_uvloop_when_installed_else_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    assert eventloop.resolve("auto") == "uvloop"  # a dependency of triton-tap on Linux
    assert eventloop.resolve("asyncio") == "asyncio"
    _without_uvloop(monkeypatch)
    assert eventloop.resolve("auto") == "asyncio"


def test_uvloop_asked_for_but_missing_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_uvloop(monkeypatch)
    with pytest.raises(UserError, match=r"--event-loop uvloop: uvloop is not installed"):
        eventloop.resolve("uvloop")
    with pytest.raises(UserError, match=r"choose one of auto, uvloop, asyncio"):
        eventloop.resolve("trio")


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_run_uses_the_loop_asked_for(kind: str) -> None:
    async def name() -> str:
        await asyncio.sleep(0)
        return eventloop.running_loop_name()

    assert eventloop.run(name(), kind) == kind


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_capture_start_records_the_loop(kind: str, tmp_path: Path) -> None:
    """The proxy (in its own loop thread) on each loop: capture_start says which one ran it."""
    from proxy.lab.background import ProxyThread
    from replay.capture import events as ev
    from replay.capture.reader import read_capture
    from tests.support.fake_triton import start_fake
    from tests.support.loop_thread import BackgroundLoop

    bg = BackgroundLoop()
    server, port = bg.run(start_fake(0))
    try:
        proxy = ProxyThread(f"127.0.0.1:{port}", tmp_path / "captures", event_loop=kind).start()
        proxy.stop()
    finally:
        bg.run(server.stop(None))
        bg.close()
    (start,) = [r for _, r in read_capture(tmp_path / "captures") if isinstance(r, ev.CaptureStarted)]
    assert start.options["event_loop"] == kind

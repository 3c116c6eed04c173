"""Log lines go to stderr as it is when written, and a broken stderr never breaks the caller."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator

import pytest
import structlog

from proxy.ops import logs


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    """configure() is process-wide: later tests capture logs with structlog's defaults."""
    yield
    structlog.reset_defaults()


def _fake_stderr() -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8")


def test_closed_stderr_drops_the_line_instead_of_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer thread logs from its loop: a closed stderr must not raise into it (it killed the
    writer task, and with it the capture, before)."""
    first = _fake_stderr()
    monkeypatch.setattr(sys, "stderr", first)
    logs.configure("info")
    first.close()
    structlog.get_logger("t").warning("after_close", n=1)  # must not raise
    second = _fake_stderr()
    monkeypatch.setattr(sys, "stderr", second)
    structlog.get_logger("t").warning("to_the_new_stderr", n=2)
    second.flush()
    assert b"to_the_new_stderr" in second.buffer.getvalue()  # type: ignore[attr-defined]

"""structlog set-up: console rendering on a TTY, JSON lines otherwise; always to stderr."""

from __future__ import annotations

import logging
import sys
from typing import Any

import orjson
import structlog


class _Stderr:
    """stderr as it is at each write, not as it was at :func:`configure`, and never an exception.

    A log line is never worth a lost record: the writer thread and the relay log from their hot
    paths, and a closed or swapped stderr (a daemon whose terminal went away, a test runner that
    captured and closed it) must not kill them. What cannot be written is dropped.
    """

    def __init__(self, binary: bool) -> None:
        self._binary = binary

    def write(self, data: Any) -> None:
        try:
            (sys.stderr.buffer if self._binary else sys.stderr).write(data)
        except (OSError, ValueError, AttributeError):
            pass

    def flush(self) -> None:
        try:
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass


def configure(level: str = "info") -> None:
    """Configure structlog once for a CLI process."""
    tty = sys.stderr.isatty()
    # Off a TTY (services, containers) lines are JSON made by orjson into bytes: the proxy logs one
    # line per call, and the stdlib json path cost ~18 us of a unary call's budget.
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer(colors=False) if tty else structlog.processors.JSONRenderer(serializer=orjson.dumps)
    )
    factory: Any = (
        structlog.PrintLoggerFactory(file=_Stderr(binary=False))  # type: ignore[arg-type]
        if tty
        else structlog.BytesLoggerFactory(file=_Stderr(binary=True))  # type: ignore[arg-type]
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )

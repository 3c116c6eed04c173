"""structlog set-up: console rendering on a TTY, JSON lines otherwise; always to stderr."""

from __future__ import annotations

import logging
import sys
from typing import Any

import orjson
import structlog


def configure(level: str = "info") -> None:
    """Configure structlog once for a CLI process."""
    tty = sys.stderr.isatty()
    # Off a TTY (services, containers) lines are JSON made by orjson into bytes: the proxy logs one
    # line per call, and the stdlib json path cost ~18 us of a unary call's budget.
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer(colors=False) if tty else structlog.processors.JSONRenderer(serializer=orjson.dumps)
    )
    factory: Any = (
        structlog.PrintLoggerFactory(file=sys.stderr) if tty else structlog.BytesLoggerFactory(file=sys.stderr.buffer)
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

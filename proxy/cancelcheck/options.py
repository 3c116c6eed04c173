"""What ``check-cancel`` takes (:class:`CheckOptions`) and what one run carries between its cases (:class:`Setup`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class CheckOptions:
    """What ``check-cancel`` takes."""

    target: str
    model: str
    method: str = "stream"  # stream | future | aio
    inputs: dict[str, Any] | None = None
    probe_inputs: dict[str, Any] | None = None
    length: int = 300
    allowance_ms: float = 300.0
    window_s: float = 6.0
    start_wait_ms: float = 300.0
    cases: tuple[str, ...] = ("executing", "queued")
    log_path: Path | None = None
    metrics_url: str | None = None
    through_proxy: bool = False
    capture_dir: Path | None = None
    # TLS to Triton (--ca, --server-name, --cert, --key): none without ca.
    ca: Path | None = None
    server_name: str | None = None
    cert: Path | None = None
    key: Path | None = None


@dataclass
class Setup:
    """One run: where the clients connect, the options, the model config and what was learned so far."""

    url: str
    opts: CheckOptions
    config: Any
    long_inputs: Callable[[], list[Any]]
    probe_inputs: Callable[[], list[Any]]
    baseline_ms: float = 0.0
    notes: list[str] = field(default_factory=list)
    metrics_ok: bool = True  # False when --metrics did not answer before the run
    #: tritonclient's keyword arguments for ``url`` (TLS to a TLS Triton; none through the proxy's h2c).
    client_kw: dict[str, Any] = field(default_factory=dict)

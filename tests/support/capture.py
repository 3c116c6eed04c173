"""Reading a capture in tests without the replay reader (so proxy tests do not depend on it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson


def records(path: Path) -> list[dict[str, Any]]:
    """Every line of a capture file as a dict."""
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line]


def of_kind(recs: list[dict[str, Any]], kind: str, call: str | None = None) -> list[dict[str, Any]]:
    """Records of one kind, optionally of one call."""
    return [r for r in recs if r["kind"] == kind and (call is None or r.get("call") == call)]


def calls_by_method(recs: list[dict[str, Any]], suffix: str) -> list[str]:
    """Call ids whose method path ends with ``suffix``, in start order."""
    return [r["call"] for r in recs if r["kind"] == "call_start" and r["method"].endswith(suffix)]

"""A captured status name as grpc's own code (what ``feed`` raises and ``serve`` answers with)."""

from __future__ import annotations

import grpc


def status_code(name: str) -> grpc.StatusCode:
    """``"CANCELLED"`` -> ``grpc.StatusCode.CANCELLED``; a name grpc does not know is ``UNKNOWN``."""
    try:
        return grpc.StatusCode[name]
    except KeyError:
        return grpc.StatusCode.UNKNOWN

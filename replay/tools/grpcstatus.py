"""A captured call's end as grpc shows it to a client: the status code, its details, the metadata
(what ``feed`` raises and ``serve`` answers with)."""

from __future__ import annotations

import base64

import grpc

#: What gRPC core reports when a status came without a message of its own.
DEFAULT_DETAILS = {"DEADLINE_EXCEEDED": "Deadline Exceeded"}
# Headers gRPC consumes itself and never shows as metadata.
_RESERVED = frozenset({"content-type", "te", "grpc-status", "grpc-message", "grpc-encoding", "grpc-accept-encoding",
                       "grpc-status-details-bin"})  # fmt: skip


def status_code(name: str) -> grpc.StatusCode:
    """``"CANCELLED"`` -> ``grpc.StatusCode.CANCELLED``; a name grpc does not know is ``UNKNOWN``."""
    try:
        return grpc.StatusCode[name]
    except KeyError:
        return grpc.StatusCode.UNKNOWN


def status_details(status: str, details: str | None) -> str:
    """What the client's gRPC would have reported for a status that came without a message."""
    return details if details is not None else DEFAULT_DETAILS.get(status, "")


def grpc_metadata(pairs: list[list[str]] | None) -> grpc.aio.Metadata:
    """Captured header pairs (initial metadata or trailers) as the metadata a grpc client sees: pseudo and
    reserved headers left out, ``-bin`` values decoded from the capture's base64."""
    out = grpc.aio.Metadata()
    for key, value in pairs or ():
        if key.startswith(":") or key in _RESERVED:
            continue
        out.add(key, base64.b64decode(value + "==") if key.endswith("-bin") else value)
    return out

"""Errors named by who is at fault, so every boundary can translate them into one clear line."""

from __future__ import annotations


class TritonTapError(Exception):
    """Base of every error triton-tap reports to a user as one line."""


class UserError(TritonTapError):
    """The user asked for something impossible (bad flag, unwritable directory)."""


class UpstreamError(TritonTapError):
    """The Triton server (upstream) is unreachable or misbehaved."""


class CaptureError(TritonTapError):
    """A capture file cannot be read as a capture."""

    def __init__(self, path: str, line: int | None, reason: str) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


class CaptureTooNew(CaptureError):
    """The capture was written by a newer triton-tap whose schema this version does not know."""


class UnknownKind(CaptureError):
    """A record of a kind this version does not know (written by a newer triton-tap of the same schema)."""

    def __init__(self, path: str, line: int | None, kind: str, seq: int) -> None:
        super().__init__(path, line, f"unknown record kind {kind!r}")
        self.kind = kind
        self.seq = seq

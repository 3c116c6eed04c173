"""Errors named by who is at fault, so every boundary can translate them into one clear line."""

from __future__ import annotations


class TritonTapError(Exception):
    """Base of every error triton-tap reports to a user as one line."""


class UserError(TritonTapError):
    """The user asked for something impossible (bad flag, unwritable directory)."""


class UpstreamError(TritonTapError):
    """The Triton server (upstream) is unreachable or misbehaved."""


class RecordingIncomplete(TritonTapError):
    """What the proxy recorded could not all be written (a full disk, a removed capture directory): its capture
    ended without its ``capture_end``. Not the user's input nor the upstream: the recording's own failure."""


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


class Damaged(CaptureError):
    """Damage the reader can skip and read on past, reporting it as a hole, when asked to (``--skip-damaged``)."""

    #: What ``--skip-damaged`` would do with it: the error without the flag names the flag.
    skip_hint = "--skip-damaged reads on past damaged lines, reporting each as a hole"


class DamagedLine(Damaged):
    """One line of a capture file is not a record (not JSON, a wrong field, cut short before a later
    file): the reader can skip it and read on, reporting it as a hole, when asked to."""


class DamagedFrame(Damaged):
    """A compressed frame (zstd frame, gzip member) in the middle of a file does not decode: the reader
    can skip to the next frame that does, reporting the bytes skipped as one hole, when asked to."""

    skip_hint = "--skip-damaged reads on from the next frame that decodes, reporting the bytes skipped as a hole"


class UnknownKind(CaptureError):
    """A record of a kind this version does not know (written by a newer triton-tap of the same schema)."""

    def __init__(self, path: str, line: int | None, kind: str, seq: int) -> None:
        super().__init__(path, line, f"unknown record kind {kind!r}")
        self.kind = kind
        self.seq = seq


# -- exit codes: one definition for every command of both CLIs ------------------------------------

#: The command ran and found nothing wrong (no violation, equivalent, SERVING, work stopped).
EXIT_OK = 0
#: The command ran and found something (violations, differences, work that went on), or the
#: upstream failed it (:class:`UpstreamError`).
EXIT_FINDINGS = 1
#: The user's input is at fault (bad flag, unreadable capture, impossible request): nothing ran.
EXIT_USAGE = 2
#: Ctrl-C (the shell's convention, 128 + SIGINT).
EXIT_INTERRUPTED = 130


def exit_code_for(error: TritonTapError) -> int:
    """The exit code of a command that ended with ``error``: who is at fault decides it."""
    return EXIT_USAGE if isinstance(error, UserError | CaptureError) else EXIT_FINDINGS

"""The side file of the live capture file: ``--payload full`` message bytes, raw, referenced by offset.

With ``--payload-store side`` (the default of ``--payload full``) a message's stored bytes (after
``--redact-input`` and ``--payload-cap``) are not base64 inside its JSON line: the relay hands them
to the writer in the record's ``payload_at`` field (a ``bytes`` value, on the way only), and the
writer thread appends them to the capture file's side file (``<name>.payload``, the rule in
:mod:`replay.capture.naming`) and writes ``payload_at: [offset, length]`` into the line instead.
Base64, its text and compressing it were three quarters of the proxy's time on a 100 MB tensor
(bench/README.md, issue 18); the side file is written with one ``os.writev`` of the batch's message
bytes (no join, no copy: a long message stays the list of pieces the assembler kept), raw and uncompressed (tensors are mostly incompressible).

Order and failure: a batch's message bytes are written *before* its lines, so a line never points
at bytes not yet written (a crash leaves at most unreferenced bytes at the side file's end); when
either write fails both files are truncated back to the last complete batch (the writer's failure
policy: the batch becomes a gap). The side file is created with the first message that has bytes
to store, so captures without them have none. Writer thread only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from replay.capture import events as ev
from replay.capture import naming

#: At most this many buffers per ``writev`` (IOV_MAX on Linux).
IOV_MAX = 1024


#: What a record brings for the side file: the message's bytes, or (a long message, never joined)
#: the pieces they came in.
Pending = bytes | list[bytes]


def pending_bytes(record: Any) -> Pending | None:
    """The bytes a record brings for the side file (a ``message`` whose ``payload_at`` holds ``bytes``
    or a list of ``bytes``), else None."""
    if type(record) is ev.MessageSeen:
        body: Any = record.payload_at
        if type(body) is bytes or (type(body) is list and body and type(body[0]) is bytes):
            return body
    return None


def pending_len(body: Pending) -> int:
    """How many bytes ``body`` puts in the side file."""
    return sum(map(len, body)) if isinstance(body, list) else len(body)


def flat(bodies: list[Pending | None]) -> list[bytes]:
    """The buffers of a batch's side-file bytes, in order, for one ``writev``."""
    out: list[bytes] = []
    for body in bodies:
        if body is None:
            continue
        if isinstance(body, list):
            out.extend(body)
        else:
            out.append(body)
    return out


def writev_all(fd: int, parts: list[bytes]) -> None:
    """Write every byte of ``parts`` in order (``writev`` may write fewer bytes than asked)."""
    i, n = 0, len(parts)
    while i < n:
        chunk = parts[i : i + IOV_MAX]
        written = os.writev(fd, chunk)
        for buf in chunk:
            size = len(buf)
            if written < size:
                if written:  # a buffer written in part: the rest of it, then writev goes on after it
                    rest = memoryview(buf)[written:]
                    while rest:
                        rest = rest[os.write(fd, rest) :]
                    i += 1
                break
            written -= size
            i += 1


class SideFile:
    """The live capture file's side file (created on first use) and how much of it is committed."""

    __slots__ = ("fd", "offset", "path")

    def __init__(self) -> None:
        self.fd = -1
        #: Bytes of complete batches: where the next batch's bytes start, and where a rollback cuts.
        self.offset = 0
        self.path: Path | None = None

    def follow(self, capture: Path) -> None:
        """A new capture file was opened: its side file (not created yet) starts empty."""
        self.close()
        self.path = capture.with_name(naming.side_name(capture.name))
        self.offset = 0

    def write(self, parts: list[bytes]) -> None:
        """Append ``parts`` (creating the file first if needed); OSError as the writer's write does."""
        if self.fd < 0:
            assert self.path is not None
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        writev_all(self.fd, parts)

    def rollback(self) -> None:
        """Cut what a failed batch wrote (truncate back to the last complete batch)."""
        if self.fd >= 0:
            try:
                os.ftruncate(self.fd, self.offset)
            except OSError:
                pass

    def close(self, sync: bool = False) -> None:
        """Close the live side file, if one was created (``sync``: fsync first, at shutdown)."""
        if self.fd < 0:
            return
        if sync:
            try:
                os.fsync(self.fd)
            except OSError:
                pass
        os.close(self.fd)
        self.fd = -1

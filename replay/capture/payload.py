"""A captured message's stored bytes, wherever the capture keeps them: :func:`payload_bytes`.

``--payload full`` stores a message's bytes (after ``--redact-input``, cut at ``--payload-cap``)
either base64 in the line (``payload``; ``--payload-store inline`` and captures written before the
side file) or raw in the capture file's side file (``payload_at: [offset, length]``; the side
file's name is :func:`replay.capture.naming.side_name` of the capture file's). Every tool that reads
message bytes goes through :func:`payload_bytes`, so it does not matter which.

The reader (:mod:`replay.capture.reader`) resolves ``payload_at`` while it reads: the record's list
becomes a :class:`PayloadAt` that also knows its side file (:class:`SideRefs`). What a side file may
be: longer than what its lines point at (the writer writes bytes before lines: a crash leaves
unreferenced bytes); missing, or shorter than a line of a file that a later one follows: a
:class:`~replay.errors.CaptureError` naming the side file; shorter at the very end of a capture
(the proxy died mid-write, or a live capture was copied side file first): like a cut last line,
the messages whose bytes are complete are read, the others read as "not captured" (``payload_at``
null) and a warning says how many.
"""

from __future__ import annotations

import base64
import os
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from replay.capture import events as ev
from replay.capture import naming
from replay.errors import CaptureError


class PayloadAt(list[int]):
    """A read record's ``payload_at``: ``[offset, length]`` (equal to that list), and its side file."""

    __slots__ = ("side",)

    def __init__(self, at: list[int], side: Path) -> None:
        super().__init__(at)
        self.side = side


def has_payload(rec: ev.MessageSeen) -> bool:
    """The capture holds bytes of this message (``--payload full``; maybe cut: see ``payload_truncated``)."""
    return rec.payload is not None or rec.payload_at is not None


def payload_bytes(rec: ev.MessageSeen) -> bytes | None:
    """The message's stored bytes (cut at ``--payload-cap`` when ``payload_truncated``), or None when
    the capture holds none. :class:`~replay.errors.CaptureError` when its side file cannot give them."""
    if rec.payload is not None:
        return base64.b64decode(rec.payload)
    at = rec.payload_at
    if at is None:
        return None
    if not isinstance(at, PayloadAt):
        raise CaptureError("<records>", None, f"message {rec.index} ({rec.dir}) of call {rec.call} keeps its bytes in "
                           "a side file (payload_at), and these records were not read from a capture file")  # fmt: skip
    offset, length = at
    try:
        fd = os.open(at.side, os.O_RDONLY)
    except OSError as e:
        raise CaptureError(str(at.side), None, f"cannot read the side file: {e.strerror or e}") from None
    try:
        data = os.pread(fd, length, offset)
    except OSError as e:
        raise CaptureError(str(at.side), None, f"cannot read the side file: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) != length:
        raise CaptureError(str(at.side), None, f"side file is short: {length} bytes at offset {offset} were "
                           f"expected, {len(data)} are there (changed since it was read?)")  # fmt: skip
    return data


def message_bytes(rec: ev.MessageSeen) -> bytes | None:
    """A gRPC message's bytes as its receiver read them: the stored bytes (``--payload full``), inflated when it
    was sent compressed; None when the capture holds no whole copy of it: none stored (``meta``), cut at
    ``--payload-cap``, or compressed bytes that do not inflate.

    The record does not name the encoding: it is in the call's headers, a response's only in ``call_end``,
    after the messages. gzip and deflate (zlib's format, as grpc writes it), the encodings grpc knows, tell
    themselves apart by their first bytes. (An HTTP body is another matter: its encoding is its call's
    ``Content-Encoding``, read by :func:`http_body`; an answer is served as stored, with its captured headers.)
    """
    if not has_payload(rec) or rec.payload_truncated:
        return None
    data = payload_bytes(rec)
    if data is None or not rec.compressed:
        return data
    return inflate(data)


def http_encoding(headers: Iterable[tuple[bytes | str, bytes | str]] | Iterable[list[str]]) -> str | None:
    """The ``Content-Encoding`` an HTTP body was sent with (its last such header), lowercased; None for none or
    identity. The recorder's labels, ``--redact-input`` and ``serve`` read a body's encoding with this one rule."""
    found: bytes | str | None = None
    for k, v in headers:
        if (k.decode("latin-1") if isinstance(k, bytes) else k).lower() == "content-encoding":
            found = v
    if found is None:
        return None
    enc = (found.decode("latin-1") if isinstance(found, bytes) else found).strip().lower()
    return None if enc in ("", "identity") else enc


def decompress_body(body: bytes, encoding: str, cap: int | None) -> tuple[bytes, bool, str | None]:
    """``(plain, cut, error)``: an HTTP body sent with Content-Encoding ``encoding`` (:func:`http_encoding`)
    decompressed, at most ``cap`` + 1 bytes of it (None: all); ``cut`` when more followed (or the compressed
    stream ended early); ``error`` when it is not that encoding at all, or one not known here (only gzip and
    deflate are: Triton's own)."""
    if encoding == "gzip" or encoding == "x-gzip":
        modes = [16 + zlib.MAX_WBITS]
    elif encoding == "deflate":
        # HTTP's "deflate" is the zlib format; some senders use raw deflate: both are read.
        modes = [zlib.MAX_WBITS, -zlib.MAX_WBITS]
    else:
        return b"", False, f"Content-Encoding {encoding!r}: body not decoded"
    why = ""
    for wbits in modes:
        d = zlib.decompressobj(wbits)
        try:
            plain = d.decompress(body, 0 if cap is None else cap + 1)
        except zlib.error as e:
            why = str(e)
            continue
        return plain, (cap is not None and len(plain) > cap) or not d.eof, None
    return b"", False, f"{encoding} body does not decompress: {why}"


def http_body(body: bytes, encoding: str | None) -> tuple[bytes | None, str | None]:
    """``(plain, error)``: a whole HTTP body as its receiver reads it, by the labels' rule (:func:`decompress_body`):
    as sent without an encoding, gzip or deflate decompressed; ``(None, why)`` for another encoding, or bytes that
    do not decompress, or not whole."""
    if encoding is None:
        return body, None
    plain, cut, why = decompress_body(body, encoding, None)
    if why is not None:
        return None, why
    if cut:
        return None, f"{encoding} body cut short: its compressed stream does not end"
    return plain, None


def inflate(data: bytes) -> bytes | None:
    """``data`` inflated: a gzip stream or a deflate one (zlib's format, as grpc and tritonclient write it, or
    raw, as some HTTP clients send ``Content-Encoding: deflate``); None when it is neither, whole."""
    for wbits in (32 + zlib.MAX_WBITS, -zlib.MAX_WBITS):  # a gzip or a zlib header, whichever it has; none
        d = zlib.decompressobj(wbits)
        try:
            plain = d.decompress(data)
        except zlib.error:
            continue
        if d.eof and not d.unused_data:
            return plain
    return None


class SideRefs:
    """One capture file's references into its side file, checked as the reader reads them."""

    __slots__ = ("_capture", "_cut", "_last", "_missing", "_needed", "_size", "path")

    def __init__(self, capture: Path, last: bool, *, needed: bool = True) -> None:
        self._capture = str(capture)
        self._last = last
        #: False: the reader's user never reads the bytes (check, report): a missing side file is no error.
        self._needed = needed
        self._missing = 0  # references into a side file that is not there (only when not needed)
        self.path = capture.with_name(naming.side_name(capture.name))
        self._size = self._stat()
        self._cut = 0

    def _stat(self) -> int:
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            if not self._needed:
                return -1
            raise CaptureError(str(self.path), None, f"side file missing: {self._capture} keeps its --payload full "
                               "message bytes there (payload_at); keep the two files together") from None  # fmt: skip
        except OSError as e:
            raise CaptureError(str(self.path), None, f"cannot read the side file: {e.strerror or e}") from None

    def attach(self, rec: ev.MessageSeen, line: int) -> None:
        """Give ``rec``'s ``payload_at`` its side file (or, past the end of a cut side file, drop it)."""
        at: Any = rec.payload_at
        if len(at) != 2 or at[0] < 0 or at[1] < 0:
            raise CaptureError(self._capture, line, f"message record: field 'payload_at' must be [offset, length], got {at!r}")
        if self._size < 0:
            self._missing += 1
            object.__setattr__(rec, "payload_at", None)  # (as below: the bytes are not there to read)
            return
        end = at[0] + at[1]
        if end > self._size:
            self._size = self._stat()  # a live capture: the writer wrote the bytes before the line
        if end > self._size:
            if not self._last:
                raise CaptureError(str(self.path), None, f"side file is short: {self._size} bytes, and line {line} of "
                                   f"{self._capture} points at bytes up to {end} (a later capture file follows)")  # fmt: skip
            self._cut += 1
            value: list[int] | None = None  # read as "not captured": the capture claims nothing it cannot show
        else:
            value = PayloadAt(at, self.path)
        # The record was just decoded and nobody holds it yet: setting the field in place costs
        # nothing per record (dataclasses.replace would rebuild its 25 fields).
        object.__setattr__(rec, "payload_at", value)

    def warning(self) -> str | None:
        """What the end of the file says about its side file (None: every reference was complete)."""
        if self._missing:
            return (f"{self.path}: side file missing: the bytes of {self._missing} message(s) of {self._capture} "
                    "are not there (copied without it?); not needed here, read as not captured")  # fmt: skip
        if not self._cut:
            return None
        return (f"{self.path}: side file cut short at {self._size} bytes: the bytes of the last {self._cut} "
                "message(s) are not there (the proxy stopped mid-write?); read as not captured")  # fmt: skip

"""One write batch as lines (and side-file bytes): encoding, the rotation cut, the admin tap's lines (pure).

The writer thread owns the state (the file's sparse :class:`~replay.capture.schema.Encoder`, the next
``seq``, the side file's committed size); these functions only compute from it.
"""

from __future__ import annotations

from typing import Any

from proxy.capture.sidefile import Pending, pending_bytes, pending_len
from replay.capture.schema import Encoder
from replay.capture.schema import encode as encode_one


def encode(encoder: Encoder, records: list[Any], seq: int, side_at: int) -> tuple[list[bytes], list[Pending | None] | None]:
    """The batch's lines from record number ``seq`` on, and (when some message brings bytes for the
    side file, whose committed size is ``side_at``) each line's bytes, else None.

    Hot loop (every record written): a message's side-file place is assigned here, so a rest of a
    batch encoded again for the next file (a rotation cut) gets that file's offsets.
    """
    lines = []
    bodies: list[Pending | None] = []
    found = False
    enc = encoder.encode
    for r in records:
        body = pending_bytes(r)
        if body is None:
            lines.append(enc(r, seq))
        else:
            n = pending_len(body)
            lines.append(enc(r, seq, [side_at, n]))
            side_at += n
            found = True
        bodies.append(body)
        seq += 1
    return lines, bodies if found else None


def cut(lines: list[bytes], bodies: list[Pending | None] | None, size: int, rotate: int, *,
        line_bytes: bool = True) -> int:  # fmt: skip
    """How many lines go into a file of ``size`` bytes (its side file's included) before it reaches ``rotate``
    bytes (at least one). A cut must be followed by the rotation, because the rest is encoded again for the
    next file (its sparse encoding starts fresh there).

    ``line_bytes``: line lengths are file bytes (plain files). A compressed file's are not known before its
    frame is made: only its side file's bytes (stored raw) count, and the file rotates after the batch that
    took its lines past the size (one batch of compressed lines over, at most).
    """
    for i, line in enumerate(lines):
        if line_bytes:
            size += len(line)
        if bodies is not None and (body := bodies[i]) is not None:
            size += pending_len(body)  # rotation counts the side file too
        if size >= rotate:
            return i + 1
    return len(lines)


def self_contained(records: list[Any], first: int, bodies: list[Pending | None] | None, side_at: int) -> list[bytes]:
    """The records as lines a reader may start at (sticky fields spelled out), for ``record --admin``'s Tail."""
    if bodies is None:
        return [encode_one(r, first + i) for i, r in enumerate(records)]
    out = []
    for i, (r, body) in enumerate(zip(records, bodies, strict=True)):
        n = pending_len(body) if body is not None else 0
        out.append(encode_one(r, first + i, None if body is None else [side_at, n]))
        side_at += n
    return out

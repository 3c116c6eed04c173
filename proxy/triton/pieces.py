"""A message kept as the pieces it came in (``--payload full``, side file): is its head all labels need?

Labels of a long message are read from its head (its first MiB), as ``--payload meta`` does. That
equals decoding the whole message only when nothing but tensor bytes follows the head's fields:
protobuf writers put ``raw_input_contents`` / ``raw_output_contents`` last, but any field order is
valid. :func:`only_field_from` checks it by walking the tail's field tags across the pieces (a few
tags: one per tensor), without joining them. Pure.
"""

from __future__ import annotations

import bisect
import itertools

from proxy.triton.labels import varint


def only_field_from(parts: list[bytes], pos: int, field: int) -> bool:
    """From byte ``pos`` of the message ``b"".join(parts)`` to its end there are only length-delimited
    fields numbered ``field`` (and nothing is cut)."""
    ends = list(itertools.accumulate(map(len, parts)))
    size = ends[-1] if ends else 0
    want = field << 3 | 2
    while pos < size:
        head = _peek(parts, ends, pos)
        try:
            tag, i = varint(head, 0)
            if tag != want:
                return False
            length, i = varint(head, i)
        except IndexError:
            return False
        pos += i + length
    return pos == size


def _peek(parts: list[bytes], ends: list[int], pos: int, n: int = 20) -> bytes:
    """Up to ``n`` bytes of the message from ``pos`` (a tag and a length fit in 20)."""
    k = bisect.bisect_right(ends, pos)
    out = b""
    while len(out) < n and k < len(parts):
        start = ends[k] - len(parts[k])
        out += parts[k][pos + len(out) - start : pos + n - start]
        k += 1
    return out


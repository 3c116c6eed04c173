"""gRPC messages cut out of a stream's DATA: the 5-byte length prefix, then the body.

Pure and synchronous, like :mod:`proxy.wire.frames`: the relay feeds it the DATA payload of each
frame as read, in whatever pieces the peer chose, and gets whole messages back. Per call it keeps
at most ``keep`` bytes of a message (labels only need the head; tensor bytes come last) and, when
asked, hashes all of it. With ``split_at``, a message of that many bytes or more that arrived in
several pieces is handed over as the list of its pieces, not joined: ``--payload full`` writes them
to the side file with one ``writev`` (joining a 100 MB message costs ~80 ms of CPU for nothing).
"""

from __future__ import annotations

import hashlib
from typing import Any

from replay.compiled import load_compiled

_C = load_compiled("proxy.wire._cut")
#: The whole messages at the start of a chunk, cut in C (``_cut.c``) when there is no hashing; None:
#: the Python loop alone, with the same messages (tests/proxy/wire/test_cut.py).
_messages: Any = _C.messages if _C is not None else None

#: A message's kept bytes: joined, or (``split_at``) the pieces as they came.
Body = bytes | list[bytes]


class Assembler:
    """Cuts one direction of a stream's DATA into gRPC messages (5-byte prefix + body)."""

    __slots__ = ("_flag", "_hash", "_hdr", "_keep", "_kept", "_length", "_parts", "_remaining", "_split_at")

    def __init__(self, keep: int, hashing: bool, split_at: int | None = None) -> None:
        self._hdr = bytearray()
        self._remaining = -1
        self._flag = 0
        self._length = 0
        self._parts: list[Any] = []
        self._kept = 0
        self._keep = keep
        self._hash: Any = hashlib.sha256() if hashing else None
        self._split_at = split_at if split_at is not None else 2**63

    @property
    def partial(self) -> bool:
        """Bytes of an unfinished message are buffered."""
        return bool(self._hdr) or self._remaining >= 0

    def feed(self, data: bytes | memoryview) -> list[tuple[int, int, Body, bool, str | None]]:
        """Complete messages in ``data``: ``(flag, length, kept bytes, truncated, sha256)``; the kept
        bytes are a list of pieces (see ``split_at``) only for a long message that came in several."""
        out: list[tuple[int, int, Body, bool, str | None]] = []
        i = 0
        n = len(data)
        if _messages is not None and self._remaining < 0 and not self._hdr and self._hash is None:
            # The whole messages first, in C (_cut.c): what the fast path below would do for them.
            i = _messages(data, 0, self._keep, out)
        while i < n:
            if self._remaining < 0:
                hdr = self._hdr
                if not hdr and n - i >= 5:
                    self._flag = data[i]
                    self._length = int.from_bytes(data[i + 1 : i + 5], "big")
                    i += 5
                    # Fast path: the whole message is inside this chunk.
                    if self._length <= n - i and self._length <= self._keep:
                        body = bytes(data[i : i + self._length])
                        i += self._length
                        digest = None
                        if self._hash is not None:
                            digest = hashlib.sha256(body).hexdigest()
                        out.append((self._flag, self._length, body, False, digest))
                        continue
                else:
                    take = min(5 - len(hdr), n - i)
                    hdr += data[i : i + take]
                    i += take
                    if len(hdr) < 5:
                        break
                    self._flag = hdr[0]
                    self._length = int.from_bytes(hdr[1:5], "big")
                    hdr.clear()
                self._remaining = self._length
                self._parts = []
                self._kept = 0
                if self._hash is not None:
                    self._hash = hashlib.sha256()
            take = min(self._remaining, n - i)
            if take:
                chunk = data[i : i + take]
                if self._kept < self._keep:
                    k = min(take, self._keep - self._kept)
                    # A copy: a view would keep the whole read buffer alive until the message ends.
                    self._parts.append(bytes(chunk if k == take else chunk[:k]))
                    self._kept += k
                if self._hash is not None:
                    self._hash.update(chunk)
                i += take
                self._remaining -= take
            if self._remaining == 0:
                parts = self._parts
                kept: Body = parts if self._length >= self._split_at and len(parts) > 1 else b"".join(parts)
                digest = self._hash.hexdigest() if self._hash is not None else None
                out.append((self._flag, self._length, kept, self._length > self._kept, digest))
                self._remaining = -1
                self._parts = []
        return out

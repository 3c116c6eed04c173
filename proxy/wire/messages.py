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
from typing import Any, Final

#: The longest view whose whole messages are read from a copy of it (a long frame's payload beyond it
#: takes the general loop: copying it whole for a small first message would cost more than it saves).
_COPIED_VIEW: Final = 65536

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
        if self._remaining < 0 and not self._hdr and self._hash is None and n >= 5:
            # The common case first (once per message of a stream): whole messages at the start of
            # the chunk, read from bytes (compiled, a byte is a C array read; a memoryview's is a
            # call). A view (a long frame's payload) is copied only once its first message is known
            # to be whole in it.
            if type(data) is bytes:
                i = self._whole(data, out)
            elif n <= _COPIED_VIEW:
                head = bytes(data[:5])
                length = head[1] << 24 | head[2] << 16 | head[3] << 8 | head[4]
                if length <= n - 5 and length <= self._keep:
                    i = self._whole(bytes(data), out)
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

    def detached(self, keep: int) -> Assembler:
        """A new assembler that goes on from where this one is, keeping the first ``keep`` bytes of a message (of
        the pieces that came so far: shared, not copied), without hashing or splitting: a cancelled call's late
        watch reads the rest of a message that this one's call then records as cut, forgetting it here. (Only
        its head: a watch may live long, and this one may have kept a whole 100 MB message so far.) Never more
        than this one keeps: past that, it kept no more of the message, and the head must be the message's."""
        keep = min(keep, self._keep)
        other = Assembler(keep, False)
        other._hdr = bytearray(self._hdr)
        other._remaining = self._remaining
        other._flag = self._flag
        other._length = self._length
        kept = 0
        for piece in self._parts:
            if kept >= keep:
                break
            if kept + len(piece) > keep:
                piece = piece[: keep - kept]
            other._parts.append(piece)
            kept += len(piece)
        other._kept = kept
        return other

    def take_unfinished(self) -> tuple[int, int | None, int, list[bytes], str | None] | None:
        """The message whose end has not come, as far as it came, forgotten (bytes after it start a new one):
        ``(flag, declared length, body bytes that arrived, the kept bytes as the pieces they came in, sha256 of
        the bytes that arrived)``; the length is None while its 5-byte prefix is incomplete. None when no
        message is unfinished."""
        got: tuple[int, int | None, int, list[bytes], str | None] | None = None
        if self._remaining >= 0:
            digest = self._hash.hexdigest() if self._hash is not None else None
            got = self._flag, self._length, self._length - self._remaining, self._parts, digest
        elif self._hdr:
            got = self._hdr[0], None, 0, [], None
        self._hdr.clear()
        self._remaining = -1
        self._parts = []
        return got

    def _whole(self, buf: bytes, out: list[tuple[int, int, Body, bool, str | None]]) -> int:
        """Appends the whole messages at the start of ``buf`` (each at most ``keep`` bytes, no
        hashing) to ``out``, as the loop of :meth:`feed` would; returns the index it stopped at."""
        i = 0
        n = len(buf)
        keep = self._keep
        while n - i >= 5:
            length = buf[i + 1] << 24 | buf[i + 2] << 16 | buf[i + 3] << 8 | buf[i + 4]
            if length > keep or length > n - i - 5:
                break
            out.append((buf[i], length, buf[i + 5 : i + 5 + length], False, None))
            i += 5 + length
        return i

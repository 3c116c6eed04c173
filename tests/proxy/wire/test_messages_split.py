"""``Assembler(split_at=...)``: a long message that came in pieces is handed over unjoined (the side file)."""

from __future__ import annotations

import hashlib

from proxy.wire.messages import Assembler


def _framed(body: bytes) -> bytes:
    return b"\x00" + len(body).to_bytes(4, "big") + body


def test_a_long_message_in_pieces_is_the_list_of_its_pieces() -> None:
    body = bytes(range(256)) * 40  # 10,240 bytes
    wire = _framed(body) + _framed(b"short") + _framed(body)
    asm = Assembler(2**62, True, split_at=4096)
    out = []
    for i in range(0, len(wire), 1000):
        out += asm.feed(wire[i : i + 1000])
    assert [type(m[2]) for m in out] == [list, bytes, list]
    for flag, length, kept, truncated, digest in out:
        whole = b"".join(kept) if isinstance(kept, list) else kept
        assert (flag, length, truncated) == (0, len(whole), False) and digest == hashlib.sha256(whole).hexdigest()
    assert b"".join(out[0][2]) == body and out[1][2] == b"short"


def test_a_long_message_in_one_piece_or_without_split_is_joined_bytes() -> None:
    body = b"x" * 10_000
    assert type(Assembler(2**62, False, split_at=4096).feed(_framed(body))[0][2]) is bytes
    asm = Assembler(2**62, False)
    wire = _framed(body)
    out = asm.feed(wire[:3000]) + asm.feed(wire[3000:])
    assert out[0][2] == body

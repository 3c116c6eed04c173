"""gRPC message framing over arbitrary DATA chunking (proxy.wire.messages.Assembler)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.wire.messages import Assembler


def _frame(body: bytes, flag: int = 0) -> bytes:
    return bytes([flag]) + len(body).to_bytes(4, "big") + body


@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=8),
    st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=50),
    st.integers(min_value=1, max_value=400),
)
def test_any_chunking_yields_the_same_messages(bodies: list[bytes], cuts: list[int], keep: int) -> None:
    """However DATA is split, every message comes out once, whole or cut at `keep` (and says so)."""
    wire = b"".join(_frame(b) for b in bodies)
    asm = Assembler(keep=keep, hashing=True)
    out = []
    i = 0
    for c in cuts * (len(wire) // max(1, sum(cuts)) + 1):
        if i >= len(wire):
            break
        out += asm.feed(wire[i : i + c])
        i += c
    out += asm.feed(wire[i:])
    assert [(length, body, trunc) for _, length, body, trunc, _ in out] == [
        (len(b), b[:keep], len(b) > keep) for b in bodies
    ]
    assert not asm.partial

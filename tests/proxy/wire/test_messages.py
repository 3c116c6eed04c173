"""gRPC message framing over arbitrary DATA chunking (proxy.wire.messages.Assembler)."""

from __future__ import annotations

from hypothesis import example, given
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


@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=6),
    st.integers(min_value=0, max_value=2000),
    st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=20),
    st.integers(min_value=1, max_value=400),
    st.integers(min_value=1, max_value=400),
)
@example([bytes(200)], 150, [7], 400, 10)  # (the copy keeps only its own head of what came so far)
def test_a_detached_assembler_goes_on_where_its_original_stopped(
    bodies: list[bytes], at: int, cuts: list[int], keep: int, late_keep: int
) -> None:
    """A cancel's late watch reads on from a copy: fed what follows, the copy yields the messages the original
    would have (heads of at most its own ``keep``), while the original, forgetting its unfinished one, yields
    what it got of that message once."""
    wire = b"".join(_frame(b) for b in bodies)
    at %= len(wire) + 1
    asm = Assembler(keep=keep, hashing=True)
    before = []
    for i in range(0, at, cuts[0]):
        before += asm.feed(wire[i : min(i + cuts[0], at)])
    late = asm.detached(late_keep)
    unfinished = asm.take_unfinished()
    assert (unfinished is not None) == late.partial and not asm.partial
    after = []
    for i in range(at, len(wire), cuts[-1]):
        after += late.feed(wire[i : i + cuts[-1]])
    got = [(length, body, trunc) for _, length, body, trunc, _ in before] + [
        (length, body if isinstance(body, bytes) else b"".join(body), trunc) for _, length, body, trunc, _ in after
    ]
    n = len(before)
    heads = min(keep, late_keep)  # (never more than the original kept: the head must be contiguous)
    want = [(len(b), b[:keep], len(b) > keep) for b in bodies[:n]] + [
        (len(b), b[:heads], len(b) > heads) for b in bodies[n:]
    ]
    assert got == want and not late.partial
    if unfinished is not None:
        _, _, arrived, kept, _ = unfinished
        done = sum(5 + len(b) for b in bodies[:n])
        assert arrived == max(0, at - done - 5) and b"".join(kept) == bodies[n][: min(arrived, keep)]

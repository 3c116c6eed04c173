"""The capture file-name rule: what the writer builds, the reader parses back."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from replay.capture import naming

# Unix epoch ns from 1970 to the end of year 9999: the stamp keeps four year digits.
_T_NS = st.integers(0, 253_402_300_799 * 10**9)


@given(_T_NS, st.integers(0, 2**31), st.integers(0, 10**6), st.booleans())
def test_any_built_name_parses_back(t_ns: int, pid: int, index: int, gzipped: bool) -> None:
    """stamp/pid/index/gz -> name -> the same stamp, pid, index, gz and stem."""
    stamp = naming.stamp(t_ns)
    stem = naming.stem(stamp, pid)
    name = naming.file_name(stem, index, gzipped=gzipped)
    assert naming.parse(name) == naming.CaptureName(stem=stem, stamp=stamp, pid=pid, index=index, gzipped=gzipped)
    assert naming.looks_like_capture(name)


@given(_T_NS, _T_NS)
@example(a=253_402_300_798_999_969_792, b=253_402_300_799_000_000_000)  # a float a / 1e9 rounds up to b's second
@example(a=1_780_000_000 * 10**9 - 1, b=1_780_000_000 * 10**9)  # the same within 1 ns, in 2026
def test_name_order_is_time_order(a: int, b: int) -> None:
    """A directory's name order is its captures' start order (to the second)."""
    sa, sb = naming.stamp(a), naming.stamp(b)
    if a // 10**9 < b // 10**9:
        assert sa < sb
    assert len(sa) == len(sb) == 15


def test_known_names() -> None:
    """The writer's first and rotated names, and names that are not the writer's."""
    assert naming.stamp(1_700_000_000 * 10**9) == "20231114T221320"
    assert naming.stamp(1_700_000_000 * 10**9 - 1) == "20231114T221319"  # the second it started in
    assert naming.file_name("capture-20231114T221320-42", 0) == "capture-20231114T221320-42.jsonl"
    assert naming.file_name("capture-20231114T221320-42", 3, gzipped=True) == "capture-20231114T221320-42-0003.jsonl.gz"
    got = naming.parse("capture-20231114T221320-42-0003.jsonl.gz")
    assert got is not None and (got.stem, got.index, got.gzipped) == ("capture-20231114T221320-42", 3, True)
    for other in ("mine.jsonl", "capture-20231114T221320-42-003.jsonl", "capture-20231114T221320-42.json",
                  "capture-2023111T221320-42.jsonl", "x-capture-20231114T221320-42.jsonl"):  # fmt: skip
        assert naming.parse(other) is None
    assert naming.looks_like_capture("mine.jsonl") and not naming.looks_like_capture("mine.json")


def test_worker_names_parse_into_their_set() -> None:
    """A worker's file names its chain (stem with .w<k>) and its set; old names have no set or worker."""
    stem = naming.worker_stem("capture-20260101T000000-12", 3)
    got = naming.parse(naming.file_name(stem, 2, gzipped=True))
    assert got is not None and got.stem == stem and got.index == 2 and got.gzipped
    assert got.capture_set == "capture-20260101T000000-12" and got.worker == 3 and got.pid == 12
    old = naming.parse("capture-20260101T000000-12-0001.jsonl")
    assert old is not None and old.worker is None and old.capture_set == "" and old.index == 1


def test_capture_name_is_one_per_capture_set_or_chain() -> None:
    """Rotated files and the workers' chains of a set share the name; another file is its own, suffix cut."""
    assert {naming.capture_name(n) for n in ("capture-20231114T221320-42.jsonl", "capture-20231114T221320-42-0003.jsonl.gz",
            "capture-20231114T221320-42.w1.jsonl.zst", "capture-20231114T221320-42.w0-0001.jsonl")} == {
        "capture-20231114T221320-42"}  # fmt: skip
    assert naming.capture_name("mine.jsonl.zst") == "mine" and naming.capture_name("mine.jsonl") == "mine"
    assert naming.capture_name("notes.txt") == "notes.txt" and naming.capture_name(".jsonl") == ".jsonl"

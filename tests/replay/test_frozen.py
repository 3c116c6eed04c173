"""Instances built through a non-frozen twin, or by the compiled maker, are the frozen class's own (pure)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import frozen
from replay.capture import events as ev
from replay.frozen import building
from replay.machine.outcomes import RequestOutcome
from replay.machine.tracker import track
from tests.support.paths import DATA, ROOT


def test_outcomes_are_frozen_request_outcomes_equal_to_one_built_directly() -> None:
    """What check reports per request (built as the twin) has RequestOutcome's type, equality, hash, JSON
    and immutability."""
    got = track(DATA / "interleaved.jsonl").requests
    assert got
    for r in got:
        direct = RequestOutcome(**{f.name: getattr(r, f.name) for f in dataclasses.fields(RequestOutcome)})
        assert type(r) is RequestOutcome and r == direct and hash(r) == hash(direct)
        assert orjson.dumps(r.to_json()) == orjson.dumps(direct.to_json())
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.outcome = "completed"  # type: ignore[misc]
        assert type(r.outcome) is str  # the State's value, not the enum member


def test_a_twin_has_the_fields_defaults_and_slots_of_its_class() -> None:
    twin = building(RequestOutcome)
    assert twin.__slots__ == RequestOutcome.__slots__
    assert [f.name for f in dataclasses.fields(twin)] == [f.name for f in dataclasses.fields(RequestOutcome)]
    with pytest.raises(TypeError):
        twin(call="c")  # a missing field fails as it does for the class


# -- maker: compiled (replay/_frozen.c) and Python, the same instances -----------------------------

_LEADING = ("t_ns", "call", "dir", "index", "size", "compressed")
_OTHER = [f.name for f in dataclasses.fields(ev.MessageSeen) if f.name not in _LEADING]
_value = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=4), st.lists(st.text(max_size=2), max_size=2))


def _outcome(make: Any, values: list[Any], fields: dict[str, Any]) -> tuple[str, Any]:
    try:
        rec = make(*values, dict(fields))
    except TypeError as e:
        return "TypeError", str(e)
    return "ok", (type(rec), [getattr(rec, f.name) for f in dataclasses.fields(rec)])


@pytest.mark.skipif(frozen._C is None, reason="replay._frozen is not built here (or TRITON_TAP_PURE)")
@settings(max_examples=300)
@given(st.lists(_value, min_size=6, max_size=6),
       st.dictionaries(st.sampled_from([*_OTHER, *_LEADING, "nope"]), _value, max_size=8))  # fmt: skip
def test_the_compiled_maker_builds_what_the_python_one_builds(values: list[Any], fields: dict[str, Any]) -> None:
    """The same type and the very same field objects, or a TypeError for the same names (unknown, given
    twice); both without running the class's __init__."""
    fast = frozen.maker(ev.MessageSeen, _LEADING)
    slow = frozen.py_maker(ev.MessageSeen, _LEADING)
    assert fast is not slow and getattr(fast, "__self__", None) is not None  # the compiled one
    got, want = _outcome(fast, values, fields), _outcome(slow, values, fields)
    assert got[0] == want[0]
    if got[0] == "ok":
        assert got[1][0] is want[1][0] is ev.MessageSeen
        assert all(a is b for a, b in zip(got[1][1], want[1][1], strict=True))
    else:
        for name in fields:  # the same offending name in the message (texts differ in wording only)
            if (name in _LEADING or name not in _OTHER) and repr(name) in want[1]:
                assert repr(name) in got[1]


@pytest.mark.skipif(frozen._C is None, reason="replay._frozen is not built here (or TRITON_TAP_PURE)")
def test_the_compiled_maker_refuses_a_missing_field_and_bad_calls() -> None:
    make = frozen.maker(RequestOutcome, ("call",))
    with pytest.raises(TypeError, match="required"):
        make("c", {})  # RequestOutcome has required fields beyond "call"
    fast = frozen.maker(ev.MessageSeen, _LEADING)
    with pytest.raises(TypeError):
        fast(1, 2, 3, {})  # too few values
    with pytest.raises(TypeError):
        fast(1, 2, 3, 4, 5, 6, [])  # fields not a dict
    with pytest.raises(ValueError):
        frozen.maker(ev.MessageSeen, ("call", "t_ns"))  # not the first fields in order


def test_classes_it_cannot_fill_take_the_python_path() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Later:
        a: int
        b: list[int] = dataclasses.field(default_factory=list)

    make = frozen.maker(Later, ("a",))
    assert getattr(make, "__self__", None) is None  # a generated Python function
    rec = make(1, {})
    assert type(rec) is Later and rec == Later(a=1)


#: Static built-in types: from Python 3.12 their namespace is kept per interpreter, out of tp_dict.
_STATIC_TYPES = "int, str, object, type, tuple"


@pytest.mark.skipif(frozen._C is None, reason="replay._frozen is not built here (or TRITON_TAP_PURE)")
def test_the_compiled_maker_refuses_a_built_in_type_without_crashing() -> None:
    """A static built-in class has no plain slots to fill: TypeError, as on 3.11. On 3.12 and 3.13 the slot
    lookup read its tp_dict, which is NULL there, and the interpreter died (SIGSEGV): hence a child process,
    whose death fails this test instead of ending the run."""
    code = (
        "import replay._frozen as F\n"
        f"for cls in ({_STATIC_TYPES}):\n"
        "    try:\n"
        "        F.Maker(cls, ('real',), 0, (0,), object())\n"
        "    except TypeError as e:\n"
        "        print(e)\n"
        "    else:\n"
        "        print('accepted', cls)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    names = [n.strip() for n in _STATIC_TYPES.split(",")]
    assert proc.stdout.splitlines() == [f"Maker: 'real' is not a plain object slot of {n}" for n in names]

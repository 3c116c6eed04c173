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
from tests.support.child import run_python
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
    """The same type and the very same field objects, or a TypeError naming an offending name (unknown, or
    given twice: each says the first it meets); both without running the class's __init__."""
    fast = frozen.maker(ev.MessageSeen, _LEADING)
    slow = frozen.py_maker(ev.MessageSeen, _LEADING)
    assert fast is not slow and getattr(fast, "__self__", None) is not None  # the compiled one
    got, want = _outcome(fast, values, fields), _outcome(slow, values, fields)
    assert got[0] == want[0]
    if got[0] == "ok":
        assert got[1][0] is want[1][0] is ev.MessageSeen
        assert all(a is b for a, b in zip(got[1][1], want[1][1], strict=True))
    else:
        offending = [repr(name) for name in fields if name in _LEADING or name not in _OTHER]
        assert any(name in want[1] for name in offending) and any(name in got[1] for name in offending)


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


# -- the compiled maker and Python code it runs: hazards that crashed the interpreter ------------------
# Each runs in a child interpreter (tests/support/child.py): a crash fails the test, not the run.

_HOSTILE_KEYS = '''
import dataclasses
from replay import frozen

@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class R:
    a: object
    b: object = None
    c: object = None

class Value:  # a value nothing else holds: freed at once when the dict lets it go
    pass

def fields(key_type, names):
    d = {}
    class Key(key_type):
        __hash__ = key_type.__hash__
        def __eq__(self, other):  # runs inside the maker's name lookup
            d.clear()  # frees the dict's keys and values
            return key_type.__eq__(self, other)
    for name in names:
        d[Key(name)] = Value()
    return d

def outcome(make, key_type, names):
    try:
        rec = make(1, fields(key_type, names))
    except TypeError as e:
        return "TypeError", str(e).rsplit(" ", 1)[-1] if "unexpected" in str(e) else str(e)
    return "ok", type(rec).__name__, type(rec.b).__name__, type(rec.c).__name__

fast, slow = frozen.maker(R, ("a",)), frozen.py_maker(R, ("a",))
assert getattr(fast, "__self__", None) is not None  # the compiled one
class Hashable:
    def __init__(self, name): self.name = name
    def __hash__(self): return hash(self.name)
for key_type, names in ((str, ["b"]), (str, ["zz", "b"]), (str, ["c", "b"]), (Hashable, ["b"])):
    print(outcome(fast, key_type, names), outcome(slow, key_type, names))
'''


@pytest.mark.skipif(frozen._C is None, reason="replay._frozen is not built here (or TRITON_TAP_PURE)")
def test_a_key_whose_eq_empties_the_fields_dict_gives_what_the_python_maker_gives() -> None:
    """The maker read the dict's key and value borrowed across the name lookup, where a str subclass's
    __eq__ (or a non-str key's) runs: one that empties the dict freed them before they were stored
    (use after free: SIGSEGV with freed memory overwritten). Now it holds them, refuses non-str keys as
    a call with ``**fields`` does, and answers what the Python maker answers."""
    out = run_python(_HOSTILE_KEYS).splitlines()
    assert len(out) == 4
    for line in out:
        got, want = line.split(") (")
        assert got + ")" == "(" + want, line
    assert out[0].startswith("('ok', 'R', 'Value', 'NoneType')")
    assert "keywords must be strings" in out[3]


_UNINITIALISED = '''
from replay._frozen import Maker

class R:
    __slots__ = ("a",)

def attempt(what):
    try:
        what()
    except TypeError as e:
        print("TypeError:", e)
    else:
        print("accepted")

attempt(lambda: Maker.__new__(Maker).make({}))  # no __init__ at all
m = Maker(R, ("a",), 0, (None,), object())
attempt(lambda: m.__init__(R, ("a",), 0, (None,), object()))  # a second __init__ leaked the first's tables
half = Maker.__new__(Maker)
attempt(lambda: half.__init__(R, ("a", "nope"), 0, (None, None), object()))  # fails at "nope"
attempt(lambda: half.make({}))  # the half-made plan: its offset for "nope" was -1
'''


@pytest.mark.skipif(frozen._C is None, reason="replay._frozen is not built here (or TRITON_TAP_PURE)")
def test_a_maker_not_or_twice_initialised_refuses_with_type_error() -> None:
    """``Maker.__new__(Maker).make({})`` read the class of a plan never made (NULL: SIGSEGV); a second
    ``__init__`` replaced the first's tables without freeing them."""
    assert run_python(_UNINITIALISED).splitlines() == [
        "TypeError: make(): the Maker was not initialised",
        "TypeError: Maker: already initialised",
        "TypeError: Maker: 'nope' is not a plain object slot of R",
        "TypeError: make(): the Maker was not initialised",
    ]

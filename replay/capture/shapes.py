"""The decoder's fast path: one decoder per line *shape* (record kind + the keys the line has), as tables.

Why: ``replay check`` must read >= 200k records/s and almost every line of a capture has one of a
handful of shapes (a sparse `s2c` response: ``v seq kind t_ns call dir index size request_id
final``). For a shape seen once, :func:`compile_shape` makes a :class:`LineShape`: per field, where
its value is in the line, exactly the type checks of the fields the line has (the same checks as the
generic decoder, from the same tables) and what the line omits. Its one loop, compiled by mypyc
(replay/compiled.py), runs those tables for every shape. Anything it does not accept (an older
version, a missing required field, a wrong type...) returns ``None`` and the caller decodes the line
the generic way, which raises the one-line error naming file and line: the fast path never has error
messages of its own.

Record construction: a frozen slotted dataclass's ``__init__`` sets every field through
``object.__setattr__`` (a call per field: ~22 for a message record, most of the decode time).
The fast path builds the record's twin (replay/frozen.py: a plain dataclass with the very same
fields and ``__slots__``, so the same memory layout) with every value positionally, and then turns it
into the event class by ``__class__`` assignment (allowed by CPython between classes of equal
layout; the result is an ordinary, still frozen, instance of the event class). Tests keep it equal
to the generic decoder (tests/replay/capture/test_shapes.py, with Hypothesis).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

import orjson

from replay.frozen import twin

#: ``fn(raw, sticky) -> (seq, record)``, or None: decode this line the generic way.
Shape = Callable[[dict[str, Any], "dict[str, tuple[Any, ...]] | None"], "tuple[int, Any] | None"]

_NONE = type(None)


class OneOf:
    """The deep check of a ``Literal`` field (a callable like the other deep checks; inlined by shapes)."""

    __slots__ = ("shown", "values")

    def __init__(self, values: frozenset[Any]) -> None:
        self.values = values
        self.shown = ", ".join(sorted(repr(v) for v in values))

    def __call__(self, v: Any) -> str | None:
        return None if v in self.values else f"must be one of {self.shown}"


class SpecMemo:
    """Tensor lists seen before, by their exact JSON text: each checked and built once.

    Why: a model's inputs and output tensors repeat on every request and on every response that
    states them, and checking and building the specs took ~6.5 us of such a line's ~8 us decode
    (issue 15). The key is the list's JSON text, which is type-exact: ``[1]`` and ``[true]`` differ,
    as they must (as Python tuples they would be equal keys, and a cached ``[1]`` would let a
    ``[true]`` shape through). Each call returns a new list; the frozen specs in it are shared
    between records (like every record field, nothing changes them after decoding).
    """

    __slots__ = ("_build", "_seen", "limit")

    #: Distinct lists kept by default (``--redact-input`` makes every request's list distinct: those
    #: beyond :attr:`limit` are checked and built each time, as without the memo).
    LIMIT: Final = 4096

    def __init__(self, build: Callable[[list[Any]], list[Any] | None], limit: int = LIMIT) -> None:
        self._build = build  # the list's specs, or None when it is not a valid tensor list
        self._seen: dict[bytes, tuple[Any, ...]] = {}
        self.limit = limit

    def clear(self) -> None:
        """Forget every list (tests: a mutated check must not be answered from the memo)."""
        self._seen.clear()

    def __call__(self, v: Any) -> list[Any] | None:
        if type(v) is not list:
            return None
        try:
            key = orjson.dumps(v)
        except orjson.JSONEncodeError:  # not from a JSON line (an int beyond 64 bits): checked, not kept
            return self._build(v)
        made = self._seen.get(key)
        if made is None:
            built = self._build(v)
            if built is None:
                return None
            made = tuple(built)
            if len(self._seen) < self.limit:
                self._seen[key] = made
        return list(made)


def compile_shape(cls: type[Any], keys: tuple[str, ...], *, version: int,
                  checks: Mapping[str, tuple[frozenset[type], Callable[[Any], str | None] | None]],
                  omitted: Mapping[str, Any], always: object, sticky_names: Collection[str] = (),
                  tensor_lists: Collection[str] = (), to_specs: Callable[[Any], list[Any] | None] | None = None,
                  forget_sticky: bool = False) -> Shape:  # fmt: skip
    """The fast decoder of lines of record class ``cls`` having exactly ``keys`` (in this order).

    ``checks``/``omitted`` are the generic decoder's tables for ``cls`` (field -> allowed JSON
    types and deep check; field -> the value an omitted field reads as, ``always`` for required);
    ``tensor_lists``: fields ``to_specs`` checks and builds (``None``: not a valid tensor list);
    ``sticky_names``: fields an `s2c` message carries over from its call's previous one;
    ``forget_sticky``: the record ends its call (the carried-over state is dropped).
    """
    if any(omit is always and name not in keys for name, omit in omitted.items()) or not {"v", "seq", "kind"} <= set(keys):
        return generic  # a required field is missing: the generic decoder says which
    return LineShape(cls, keys, version, checks, omitted, sticky_names, tensor_lists, to_specs, forget_sticky)


#: A field's test in :class:`LineShape`: (index of its value in the line, its one allowed type besides
#: null or None, the allowed types, null allowed, a deeper check, the values of a ``Literal``).
_Test = tuple[int, "type | None", frozenset[type], bool, "Callable[[Any], str | None] | None", "frozenset[Any] | None"]


class LineShape:
    """The fast decoder of one line shape, as tables its one loop reads: the generic decoder's checks of
    the fields the line has, the values of those it omits, the sticky fields, the record's twin.

    Compiled (mypyc) once for every shape; its tables are built per shape from the generic decoder's
    own (schema.shape_tables), so the two cannot disagree on what a field allows.
    """

    __slots__ = (
        "_carried",
        "_cls",
        "_fill",
        "_forget",
        "_ical",
        "_idir",
        "_ikind",
        "_iseq",
        "_iv",
        "_kind",
        "_specs",
        "_sticky_at",
        "_tests",
        "_twin",
        "_version",
    )  # fmt: skip

    def __init__(self, cls: type[Any], keys: tuple[str, ...], version: int,
                 checks: Mapping[str, tuple[frozenset[type], Callable[[Any], str | None] | None]],
                 omitted: Mapping[str, Any], sticky_names: Collection[str], tensor_lists: Collection[str],
                 to_specs: Callable[[Any], list[Any] | None] | None, forget_sticky: bool) -> None:  # fmt: skip
        at = {name: i for i, name in enumerate(keys)}  # keys are data: they only index the line's values
        self._cls: type[Any] = cls
        self._twin: type[Any] = twin(cls)  # every field positional, in field order
        self._version = version
        self._kind: str = cls.kind
        self._iv, self._iseq, self._ikind = at["v"], at["seq"], at["kind"]
        self._ical = at.get("call", -1)
        self._idir = at.get("dir", -1)
        self._specs = to_specs
        self._forget = forget_sticky
        tests: list[_Test] = []
        for name, (allowed, deep) in checks.items():
            if name in at and name not in tensor_lists:  # tensor lists: checked by to_specs (a SpecMemo)
                kinds = allowed - {_NONE}
                only = next(iter(kinds)) if len(kinds) == 1 else None
                values = deep.values if isinstance(deep, OneOf) else None
                tests.append((at[name], only, allowed, _NONE in allowed, None if values is not None else deep, values))
        self._tests: tuple[_Test, ...] = tuple(tests)
        # Per field, in field order: (index of its value in the line or -1, the value when omitted, a tensor list)
        self._fill: tuple[tuple[int, Any, bool], ...] = tuple(
            (at.get(name, -1), omit, name in tensor_lists and name in at) for name, omit in omitted.items()
        )
        names = list(omitted)
        sticky = list(sticky_names)
        if (sticky and (self._ical < 0 or self._idir < 0)) or (forget_sticky and self._ical < 0):
            raise ValueError(f"{cls.kind}: sticky fields need the line's call and dir")  # pragma: no cover - schema's tables
        # The sticky fields' places among the fields, and which of them (by position among the sticky
        # fields) this line omits: those a call's previous `s2c` message carries over.
        self._sticky_at: tuple[int, ...] = tuple(names.index(n) for n in sticky)
        self._carried: tuple[int, ...] = tuple(k for k, n in enumerate(sticky) if n not in at)

    def __call__(self, raw: dict[str, Any], sticky: dict[str, tuple[Any, ...]] | None) -> tuple[int, Any] | None:
        xs = tuple(raw.values())
        v = xs[self._iv]
        if type(v) is not int or v != self._version:
            return None
        seq = xs[self._iseq]
        if type(seq) is not int or seq < 0:
            return None
        if xs[self._ikind] != self._kind:
            return None
        for i, only, allowed, nullable, deep, values in self._tests:
            x = xs[i]
            if only is not None:
                if type(x) is not only and (x is not None or not nullable):
                    return None
            elif type(x) not in allowed:
                return None
            if x is not None:
                if values is not None:
                    if x not in values:
                        return None
                elif deep is not None and deep(x) is not None:
                    return None
        out: list[Any] = []
        for i, omit, tensors in self._fill:
            if i < 0:
                out.append(omit)
            elif tensors:
                x = xs[i]
                if x is not None:
                    specs = self._specs
                    x = specs(x) if specs is not None else None
                    if x is None:
                        return None
                out.append(x)
            else:
                out.append(xs[i])
        sticky_at = self._sticky_at
        if sticky_at:
            if sticky is not None and xs[self._idir] == "s2c":
                call = xs[self._ical]
                carried = self._carried
                before = sticky.get(call) if carried else None
                if before is not None:
                    for k in carried:
                        out[sticky_at[k]] = before[k]
                if before is None or len(carried) != len(sticky_at):
                    # The call's first message, or one stating some of them: the state its next lines carry.
                    sticky[call] = tuple([out[j] for j in sticky_at])
        elif self._forget and sticky is not None:
            sticky.pop(xs[self._ical], None)
        o = self._twin(*out)  # one call: the twin's __init__ stores the slots
        o.__class__ = self._cls
        return seq, o


def generic(raw: dict[str, Any], sticky: dict[str, tuple[Any, ...]] | None) -> None:
    return None

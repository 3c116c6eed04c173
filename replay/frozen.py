"""Frozen dataclasses built at the cost of plain ones: :func:`building` (a leaf but for replay.compiled).

A frozen dataclass's ``__init__`` sets every field through ``object.__setattr__`` (a global lookup
and a call per field): ~4 us for 17-24 fields, against ~1 us for a plain slots dataclass.
:func:`building` makes a non-frozen twin of a frozen slots dataclass (same fields, same order, same
slots); an instance built as the twin then becomes an instance of the frozen class by assigning
``__class__``, which CPython allows between classes of identical layout. What leaves is an ordinary
frozen instance: its type, equality, hash, immutability and JSON are the frozen class's. Used where
one is made per message or per request: the relay's ``message`` records, ``check``'s request outcomes.

:func:`maker` goes one step further for the relay's records: with ``replay/_frozen.c`` built, the
instance is allocated and its slots filled by offset in one C call, with the twin as the Python path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from replay.compiled import load_compiled

_C = load_compiled("replay._frozen")


def building(cls: type[Any]) -> type[Any]:
    """A non-frozen slots dataclass with ``cls``'s fields, defaults and slot layout."""
    spec: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            spec.append((f.name, Any, dataclasses.field(default=f.default)))
        elif f.default_factory is not dataclasses.MISSING:
            spec.append((f.name, Any, dataclasses.field(default_factory=f.default_factory)))
        else:
            spec.append((f.name, Any, dataclasses.field()))
    twin = dataclasses.make_dataclass(f"Building{cls.__name__}", spec, kw_only=True, slots=True)
    if getattr(twin, "__slots__", None) != cls.__slots__:  # pragma: no cover - a dataclasses change, caught at import
        raise TypeError(f"{cls.__name__}: the building twin's slots differ")
    return twin


def maker(cls: type[Any], leading: tuple[str, ...]) -> Callable[..., Any]:
    """``make(*values, fields)``: a ``cls`` with the ``leading`` fields set from ``values``, the others from
    the dict ``fields`` or their defaults; TypeError as ``cls(...)`` for unknown, repeated or missing names.

    Compiled (``replay/_frozen.c``) when built and ``cls`` allows it (plain slots, no default factory,
    no ``__post_init__``); else the same through :func:`building`'s twin. tests/replay/test_frozen.py
    holds the two equal. ``leading`` must be ``cls``'s first fields, in order.
    """
    fields = dataclasses.fields(cls)
    names = tuple(f.name for f in fields)
    if names[: len(leading)] != leading or not all(n.isidentifier() for n in names):
        raise ValueError(f"{cls.__name__}: {leading} are not its first fields")
    if _C is not None and _fillable(cls, fields):
        missing = object()
        defaults = tuple(missing if f.default is dataclasses.MISSING else f.default for f in fields)
        try:
            make: Callable[..., Any] = _C.Maker(cls, names, len(leading), defaults, missing).make
        except TypeError:  # a slot the C code cannot fill (replay/_slots.h): the Python path
            return py_maker(cls, leading)
        return make
    return py_maker(cls, leading)


def py_maker(cls: type[Any], leading: tuple[str, ...]) -> Callable[..., Any]:
    """:func:`maker`'s Python path: the twin built with keywords, then given ``cls``."""
    env: dict[str, Any] = {"twin": building(cls), "cls": cls}
    args = ", ".join(leading)
    given = ", ".join(f"{n}={n}" for n in leading)
    # Generated so the call is the twin's own, as a hand-written one would be (no zip or dict per record).
    exec(f"def make({args}, fields):\n    rec = twin({given}, **fields)\n    rec.__class__ = cls\n    return rec", env)
    make: Callable[..., Any] = env["make"]
    return make


def _fillable(cls: type[Any], fields: tuple[dataclasses.Field[Any], ...]) -> bool:
    return (
        getattr(cls, "__slots__", None) == tuple(f.name for f in fields)
        and not hasattr(cls, "__post_init__")
        and all(f.default_factory is dataclasses.MISSING for f in fields)
    )

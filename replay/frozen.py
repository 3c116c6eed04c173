"""Frozen dataclasses built at the cost of plain ones: :func:`twin`, :func:`building`, :func:`maker`
(a leaf but for replay.compiled).

A frozen dataclass's ``__init__`` sets every field through ``object.__setattr__`` (a global lookup
and a call per field): ~4 us for 17-24 fields, against ~1 us for a plain slots dataclass.
:func:`twin` makes a non-frozen twin of a frozen slots dataclass (same fields, same order, same
slots); an instance built as the twin then becomes an instance of the frozen class by assigning
``__class__``, which CPython allows between classes of identical layout. What leaves is an ordinary
frozen instance: its type, equality, hash, immutability and JSON are the frozen class's. Used where
one is made per message, per request or per line read: the relay's records (:func:`maker`),
``check``'s request outcomes (:func:`building`), the capture decoder (replay/capture/shapes.py).
The twin is a dataclass itself: its ``__init__`` is the standard library's, made from the frozen
class's own fields, so there is no second list of fields to keep equal, and no code generated here.

:func:`maker` goes one step further for the relay's records: with ``replay/_frozen.c`` built, the
instance is allocated and its slots filled by offset in one C call, with the twin as the Python path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from replay.compiled import load_compiled

_C = load_compiled("replay._frozen")


#: (class, positional fields) -> its twin: every caller of one shape shares one class.
_TWINS: dict[tuple[type[Any], tuple[str, ...]], type[Any]] = {}


def twin(cls: type[Any], leading: tuple[str, ...] | None = None) -> type[Any]:
    """A non-frozen slots dataclass with ``cls``'s fields, in order, and its slot layout: the ``leading``
    fields (``cls``'s first ones, in order; None: all) are required positional parameters, the others
    take ``cls``'s defaults (so a missing or unknown one is the TypeError ``cls(...)`` raises)."""
    fields = dataclasses.fields(cls)
    names = tuple(f.name for f in fields)
    if leading is None:
        leading = names
    made = _TWINS.get((cls, leading))
    if made is not None:
        return made
    if names[: len(leading)] != leading:
        raise ValueError(f"{cls.__name__}: {leading} are not its first fields")
    if "__slots__" not in vars(cls) or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: a twin needs a slots dataclass without __post_init__")
    positional = len(leading)
    # The others are keyword-only only where they must be (a required field among them): CPython fills
    # positional parameters missing from a call from one tuple, keyword-only ones by a dict lookup each.
    rest = fields[positional:]
    kw_only = any(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING for f in rest)
    spec: list[tuple[str, Any, Any]] = []
    for i, f in enumerate(fields):
        if i < positional:
            spec.append((f.name, Any, dataclasses.field(kw_only=False)))
        elif f.default is not dataclasses.MISSING:
            spec.append((f.name, Any, dataclasses.field(default=f.default, kw_only=kw_only)))
        elif f.default_factory is not dataclasses.MISSING:
            spec.append((f.name, Any, dataclasses.field(default_factory=f.default_factory, kw_only=kw_only)))
        else:
            spec.append((f.name, Any, dataclasses.field(kw_only=True)))
    made = dataclasses.make_dataclass(f"Building{cls.__name__}", spec, slots=True)
    if getattr(made, "__slots__", None) != vars(cls)["__slots__"]:  # pragma: no cover - a dataclasses change
        raise TypeError(f"{cls.__name__}: the twin's slots differ")
    _TWINS[(cls, leading)] = made
    return made


def building(cls: type[Any]) -> type[Any]:
    """A non-frozen slots dataclass with ``cls``'s fields, defaults and slot layout (built with keywords)."""
    return twin(cls, ())


def maker(cls: type[Any], leading: tuple[str, ...]) -> Callable[..., Any]:
    """``make(*values, fields)``: a ``cls`` with the ``leading`` fields set from ``values``, the others from
    the dict ``fields`` or their defaults; TypeError as ``cls(...)`` for unknown, repeated or missing names.

    Compiled (``replay/_frozen.c``) when built and ``cls`` allows it (plain slots, no default factory,
    no ``__post_init__``); else the same through :func:`twin`. tests/replay/test_frozen.py
    holds the two equal. ``leading`` must be ``cls``'s first fields, in order.
    """
    fields = dataclasses.fields(cls)
    names = tuple(f.name for f in fields)
    if names[: len(leading)] != leading:
        raise ValueError(f"{cls.__name__}: {leading} are not its first fields")
    if _C is not None and _fillable(cls, fields):
        missing = object()
        defaults = tuple(missing if f.default is dataclasses.MISSING else f.default for f in fields)
        try:
            make: Callable[..., Any] = _C.Maker(cls, names, len(leading), defaults, missing).make
        except TypeError:  # a slot the C code cannot fill (_frozen.c field_slot): the Python path
            return py_maker(cls, leading)
        return make
    return py_maker(cls, leading)


def py_maker(cls: type[Any], leading: tuple[str, ...]) -> Callable[..., Any]:
    """:func:`maker`'s Python path: the twin built with the leading values positionally and the others as
    keywords (the standard library's ``__init__``), then given ``cls``."""
    made = twin(cls, leading)

    def make(*args: Any) -> Any:
        if not args or type(args[-1]) is not dict:
            raise TypeError(f"make({', '.join(leading)}, fields): fields must be a dict")
        if len(args) != len(leading) + 1:
            raise TypeError(f"make() takes {len(leading)} values and a dict of fields ({len(args)} arguments given)")
        rec = made(*args[:-1], **args[-1])
        rec.__class__ = cls
        return rec

    return make


def _fillable(cls: type[Any], fields: tuple[dataclasses.Field[Any], ...]) -> bool:
    return (
        getattr(cls, "__slots__", None) == tuple(f.name for f in fields)
        and not hasattr(cls, "__post_init__")
        and all(f.default_factory is dataclasses.MISSING for f in fields)
    )

"""Arrow columns derived from the event dataclasses' type hints: the capture format stays the one source of truth.

A new field of an event is a new column without touching this module. The rule, by type hint:

- ``int`` int64, ``float`` float64, ``bool`` bool, ``str`` and string ``Literal`` string;
- ``X | None`` the type of ``X``, nullable (a null stays null; nothing else is nullable);
- ``list[X]`` list of ``X``; a dataclass (``TensorSpec``) a struct of its own fields;
- ``dict[str, X]`` of a scalar ``X`` a map (``counts``, ``labels``, ``counters``);
- anything else, JSON text: ``Any`` (``capture_start.options``) and unions of several types (a request
  parameter as the client sent it: ``1``, ``true`` and ``"1"`` stay apart, as on the wire).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from operator import attrgetter
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

import orjson
import pyarrow as pa

#: What a Python value becomes before ``pa.array`` takes it (None: taken as it is).
Convert = Callable[[Any], Any] | None

_SCALARS: dict[Any, Any] = {int: pa.int64(), float: pa.float64(), bool: pa.bool_(), str: pa.string()}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Column:
    """One column: its name, Arrow type, whether it may be null, and how a field's value is converted."""

    name: str
    type: Any  # a pyarrow DataType (pyarrow ships no type stubs)
    nullable: bool
    convert: Convert = None

    def field(self) -> Any:
        """The ``pa.field`` of the schema."""
        return pa.field(self.name, self.type, nullable=self.nullable)


def columns(cls: type[Any]) -> list[Column]:
    """The columns of a dataclass, one per field, in field order."""
    hints = get_type_hints(cls, include_extras=True)
    return [column(f.name, hints[f.name]) for f in dataclasses.fields(cls)]


def column(name: str, hint: Any) -> Column:
    """The column of one field from its type hint (``Annotated`` documentation stripped)."""
    if get_origin(hint) is Annotated:
        hint = get_args(hint)[0]
    nullable = False
    if _is_union(hint) and type(None) in get_args(hint):
        nullable = True
        rest = tuple(a for a in get_args(hint) if a is not type(None))
        hint = rest[0] if len(rest) == 1 else typing.Union[rest]  # noqa: UP007 (built from a tuple)
    arrow, convert = arrow_type(hint)
    return Column(name=name, type=arrow, nullable=nullable, convert=None if convert is None else _last(convert))


def _is_union(hint: Any) -> bool:
    return get_origin(hint) in (typing.Union, types.UnionType)


def arrow_type(hint: Any) -> tuple[Any, Convert]:
    """The Arrow type of a (non-null) type hint, and the conversion its values need."""
    if hint in _SCALARS:
        return _SCALARS[hint], None
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal and all(isinstance(a, str) for a in args):
        return pa.string(), None
    if origin is list:
        item, convert = arrow_type(args[0])
        return pa.list_(item), None if convert is None else _each(convert)
    if origin is dict and args[0] is str and args[1] in _SCALARS:
        return pa.map_(pa.string(), _SCALARS[args[1]]), _items
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _struct(hint)
    return pa.string(), _json


def _last(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``convert`` remembering its last value: the reader hands the same object on while a sparse field repeats
    (a call's ``output_tensors`` on every response), so most conversions are one identity check."""
    last: list[Any] = [None, None]

    def once(v: Any) -> Any:
        if v is None:
            return None
        if v is not last[0]:
            last[0], last[1] = v, convert(v)
        return last[1]

    return once


def _each(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else list(map(convert, v))


def _items(v: Any) -> Any:
    return None if v is None else list(v.items())


def _json(v: Any) -> Any:
    return None if v is None else orjson.dumps(v).decode()


def _struct(cls: type[Any]) -> tuple[Any, Convert]:
    """A struct of the dataclass's fields; its values as tuples in field order (what ``pa.array`` takes fastest)."""
    cols = columns(cls)
    get = attrgetter(*(c.name for c in cols))
    converts = [c.convert for c in cols]
    if len(cols) > 1 and all(c is None for c in converts):
        return pa.struct([c.field() for c in cols]), get

    def convert(v: Any) -> Any:
        values = get(v) if len(cols) > 1 else (get(v),)
        return tuple(x if c is None else c(x) for x, c in zip(values, converts, strict=True))

    return pa.struct([c.field() for c in cols]), convert

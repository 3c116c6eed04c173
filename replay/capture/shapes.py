"""The decoder's fast path: one generated function per line *shape* (record kind + the keys the line has).

Why: ``replay check`` must read >= 200k records/s (issue 15) and almost every line of a capture has
one of a handful of shapes (a sparse `s2c` response: ``v seq kind t_ns call dir index size
request_id final``). For a shape seen once, :func:`compile_shape` writes straight-line code that
unpacks the line's values in key order, runs exactly the type checks of the fields the line has
(the same checks as the generic decoder, from the same tables), fills in what the line omits and
builds the record. Anything it does not accept (an older version, a missing required field, a
wrong type...) returns ``None`` and the caller decodes the line the generic way, which raises the
one-line error naming file and line: the fast path never has error messages of its own.

Record construction: a frozen slotted dataclass's ``__init__`` sets every field through
``object.__setattr__`` (a call per field: ~22 for a message record, most of the decode time).
The generated code builds a twin: an instance of a plain class with the very same ``__slots__``
(the same memory layout), sets the fields with ordinary slot stores and then turns it into the
event class by ``__class__`` assignment (allowed by CPython between classes of equal layout; the
result is an ordinary, still frozen, instance of the event class). Tests keep it equal to the
normal constructor (tests/replay/capture/test_shapes.py, with Hypothesis).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from typing import Any

import orjson

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

    __slots__ = ("_build", "_seen")

    #: Distinct lists kept (``--redact-input`` makes every request's list distinct: those beyond
    #: this are checked and built each time, as without the memo).
    LIMIT = 4096

    def __init__(self, build: Callable[[list[Any]], list[Any] | None]) -> None:
        self._build = build  # the list's specs, or None when it is not a valid tensor list
        self._seen: dict[bytes, tuple[Any, ...]] = {}

    def clear(self) -> None:
        """Forget every list (tests: a mutated check must not be answered from the memo)."""
        self._seen.clear()

    def from_text(self, text: bytes) -> list[Any] | None:
        """:meth:`__call__` of the list this JSON text holds (the compiled decoder's way: no parse when seen)."""
        made = self._seen.get(text)  # the writer spells a list as orjson.dumps does: the memo's own key
        if made is not None:
            return list(made)
        try:
            v = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        return self(v)

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
            if len(self._seen) < self.LIMIT:
                self._seen[key] = made
        return list(made)


_TWINS: dict[type[Any], type[Any]] = {}


def twin(cls: type[Any]) -> type[Any]:
    """A plain class with ``cls``'s slots: built, filled, then turned into ``cls`` by ``__class__`` assignment."""
    made = _TWINS.get(cls)
    if made is None:
        if not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__") or "__slots__" not in vars(cls):
            raise TypeError(f"{cls!r}: the fast constructor needs a slotted dataclass without __post_init__")
        made = type(f"_{cls.__name__}Twin", (), {"__slots__": vars(cls)["__slots__"]})
        probe = made()
        for f in dataclasses.fields(cls):
            setattr(probe, f.name, None)
        probe.__class__ = cls  # raises at import when the layouts ever differ
        _TWINS[cls] = made
    return made


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
    env: dict[str, Any] = {"_twin": twin(cls), "_cls": cls, "_specs": to_specs}
    local = {name: f"x{i}" for i, name in enumerate(keys)}  # keys are data: never written into the code
    body = [f"    {', '.join(local.values())}{',' if len(keys) == 1 else ''} = raw.values()",
            f"    if type({local['v']}) is not int or {local['v']} != {version}: return None",
            f"    if type({local['seq']}) is not int or {local['seq']} < 0: return None",
            f"    if {local['kind']} != {cls.kind!r}: return None"]  # fmt: skip
    for i, (name, (allowed, deep)) in enumerate(checks.items()):
        if name in local and name not in tensor_lists:  # tensor lists: checked by _specs (a SpecMemo)
            body.append(f"    if {_bad(local[name], allowed, deep, i, env)}: return None")
    values: dict[str, str] = {}
    for i, name in enumerate(omitted):
        if name not in local:
            omit = omitted[name]
            if omit is None or type(omit) is bool:
                values[name] = repr(omit)  # a constant in the code: cheaper than a global
            else:
                env[f"d{i}"] = omit
                values[name] = f"d{i}"
        elif name in tensor_lists:
            x = local[name]
            body.append(f"    if {x} is not None and ({x} := _specs({x})) is None: return None")
            values[name] = x
        else:
            values[name] = local[name]
    if sticky_names:
        call, direction = local["call"], local["dir"]
        for k, name in enumerate(sticky_names):
            body.append(f"    s{k} = {values[name]}")
            values[name] = f"s{k}"
        body.append(f"    if sticky is not None and {direction} == 's2c':")
        carried = [(k, n) for k, n in enumerate(sticky_names) if n not in local]
        now = f"sticky[{call}] = ({', '.join(f's{k}' for k in range(len(sticky_names)))},)"
        if len(carried) == len(sticky_names):  # the common response line: all carried, the state stays
            body.append(f"        before = sticky.get({call})")
            body.append("        if before is not None:")
            body.append(f"            {', '.join(f's{k}' for k, _ in carried)} = before")
            body.append(f"        else: {now}")
        elif carried:
            body.append(f"        before = sticky.get({call})")
            body.append("        if before is not None:")
            body.extend(f"            s{k} = before[{k}]" for k, _ in carried)
            body.append(f"        {now}")
        else:
            body.append(f"        {now}")
    elif forget_sticky:
        body.append(f"    if sticky is not None: sticky.pop({local['call']}, None)")
    body.append("    o = _twin()")
    body.extend(f"    o.{name} = {value}" for name, value in values.items())
    body.append("    o.__class__ = _cls")
    body.append(f"    return {local['seq']}, o")
    exec("\n".join(["def shape(raw, sticky):", *body]), env)  # code generated from our own field tables only
    fn: Shape = env["shape"]
    return fn


def _bad(x: str, allowed: frozenset[type], deep: Callable[[Any], str | None] | None, i: int, env: dict[str, Any]) -> str:
    """A condition true when value ``x`` fails the field's check (the generic decoder's, inlined)."""
    kinds = allowed - {_NONE}
    nullable = _NONE in allowed
    if len(kinds) == 1:
        (only,) = kinds
        env[f"t{i}"] = only
        cond = f"({x} is not None and type({x}) is not t{i})" if nullable else f"type({x}) is not t{i}"
        if only in (int, str, bool, float, list, dict):  # a builtin by its name: the same object, looked up faster
            cond = cond.replace(f"t{i}", only.__name__)
    else:
        env[f"a{i}"] = allowed
        cond = f"type({x}) not in a{i}"
    if deep is None:
        return cond
    if isinstance(deep, OneOf):
        env[f"l{i}"] = deep.values
        extra = f"{x} not in l{i}"
    else:
        env[f"p{i}"] = deep
        extra = f"p{i}({x}) is not None"
    return f"{cond} or ({x} is not None and {extra})"


def generic(raw: dict[str, Any], sticky: dict[str, tuple[Any, ...]] | None) -> None:
    return None

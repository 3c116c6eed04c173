"""The decoder's compiled fast path, when it was built: a line's bytes -> ``(seq, record)`` in one pass.

Why: ``replay check`` must read >= 200k records/s (issue 15). The Python path parses each line into a
dict (orjson) and then decodes the dict with the shape's generated function (shapes.py): ~21k
instructions a record, half of the command's work. ``_lines.c`` reads the bytes and stores the
values straight into the record's slots.

The C code knows nothing of the format. A line shape (record kind + the line's keys, in order) is
registered with it when the Python path first meets that shape (schema._shape), with a plan built
here from the very tables the Python fast path is generated from. It accepts a line only when it is
sure of the answer; anything else (an unregistered shape, invalid JSON, a failed check, an escape in
a key...) returns None and the line is decoded the Python way, which also raises the error a bad
line deserves. tests/replay/capture/test_lines.py holds the two paths equal.

Without the compiled module (no C compiler when the package was installed: the build marks it
optional), or with ``TRITON_TAP_PURE=1`` in the environment, :data:`TABLE` is None and every line
takes the Python path, with the same results, ~2x slower.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from types import ModuleType
from typing import Any

import orjson

from replay.capture.shapes import OneOf
from replay.compiled import load_compiled

#: Fields whose records the reader completes from the raw line (the side file of ``payload_at``):
#: lines having one always take the Python path.
PYTHON_ONLY = frozenset({"payload_at"})


def _load() -> ModuleType | None:
    return load_compiled("replay.capture._lines")


_C = _load()


def new_table() -> Any:
    """An empty table of shapes and its compiled decoder, or None without the compiled module."""
    return _C.Table(orjson.loads) if _C is not None else None


#: The registered shapes and their compiled decoder, or None (the Python path alone).
TABLE: Any = new_table()


def compiled() -> bool:
    """The compiled decoder is in use."""
    return TABLE is not None


def _mask(allowed: frozenset[type]) -> int | None:
    assert _C is not None
    bits = {int: _C.B_INT, str: _C.B_STR, bool: _C.B_BOOL, type(None): _C.B_NONE, float: _C.B_FLOAT,
            list: _C.B_LIST, dict: _C.B_DICT}  # fmt: skip
    mask = 0
    for t in allowed:
        if t not in bits:
            return None
        mask |= bits[t]
    return mask


def plan(cls: type[Any], keys: tuple[str, ...], *, version: int,
         checks: Mapping[str, tuple[frozenset[type], Callable[[Any], str | None] | None]],
         omitted: Mapping[str, Any], always: object, sticky_names: Collection[str] = (),
         tensor_lists: Collection[str] = (), to_specs: Callable[[Any], list[Any] | None] | None = None,
         forget_sticky: bool = False) -> tuple[Any, ...] | None:  # fmt: skip
    """The C decoder's plan for lines of ``cls`` with exactly ``keys``, or None when it must not take them.

    The arguments are :func:`replay.capture.shapes.compile_shape`'s, and mean the same.
    """
    if _C is None or PYTHON_ONLY & set(keys) or not {"v", "seq", "kind"} <= set(keys):
        return None
    if any(omit is always and name not in keys for name, omit in omitted.items()):
        return None  # a required field is missing: the Python path says which
    names = list(omitted)  # every field, in field order
    roles: list[tuple[int, int, int, Any, Any, bool]] = []
    envelope = {"v": _C.R_V, "seq": _C.R_SEQ, "kind": _C.R_KIND}
    for key in keys:
        if key in envelope:
            roles.append((envelope[key], -1, 0, None, None, False))
        elif key in checks:
            allowed, deep = checks[key]
            mask = _mask(allowed)
            if mask is None:
                return None
            oneof = deep.values if isinstance(deep, OneOf) else None
            check = None if isinstance(deep, OneOf) else deep
            roles.append((_C.R_FIELD, names.index(key), mask, oneof, check, key in tensor_lists))
        else:
            roles.append((_C.R_SKIP, -1, 0, None, None, False))  # a field of a newer writer: ignored
    slots = vars(cls)
    fields = tuple((slots[n], None if n in keys else omitted[n], keys.index(n) if n in keys else -1) for n in names)
    sticky = tuple((names.index(n), n in keys) for n in sticky_names)
    call = keys.index("call") if "call" in keys else -1
    direction = keys.index("dir") if "dir" in keys else -1
    if ((sticky or forget_sticky) and call < 0) or (sticky and direction < 0):
        return None
    # Tensor lists are read from their JSON text (SpecMemo.from_text: a list seen before is not parsed).
    from_text = getattr(to_specs, "from_text", None)
    if tensor_lists and from_text is None:
        return None
    return (cls, cls.kind, version, from_text, tuple(roles), fields, sticky, call, direction, forget_sticky)


def register(table: Any, cls: type[Any], keys: tuple[str, ...], **tables: Any) -> bool:
    """Let ``table`` (:data:`TABLE`) take lines of this shape (``tables``: as :func:`plan`); False when it does not."""
    if table is None:
        return False
    made = plan(cls, keys, **tables)
    return made is not None and bool(table.add(keys, made))

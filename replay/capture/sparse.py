"""The writer's fast path: a record's sparse dict (the JSON object of its capture line), from tables.

Why: the capture writer turns every record into a sparse dict (a field holding what a reader fills in
for an omitted one is left out) and orjson writes it, once per gRPC message on the proxy's hot path.
:class:`Sparse` is one loop over one record class's tables, built by replay/capture/schema.py from its
own field tables (what each field is omitted as), so writer and reader cannot disagree on what a
sparse line leaves out. Compiled by mypyc (replay/compiled.py); the same file runs as it is without a
compiler. Tests hold it to the decoder: every line it writes reads back as the record it was made from
(tests/replay/capture/test_encode.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

#: How a field is written. A required field always; a tensor list unless None (each tensor through
#: the table's function); a nullable field without a default unless None; a field with a default
#: unless it is that very object or equal to it.
ALWAYS: Final = 0
TENSORS: Final = 1
NULLABLE: Final = 2
DEFAULT: Final = 3


class Sparse:
    """``sparse(record, seq, skip)``: the record's sparse dict, envelope first (``v``, ``seq``, ``kind``),
    then its fields in order; a field whose bit (its index) is set in ``skip`` is left out (the sticky
    fields of a repeated `s2c` message) unread: the caller read them to know they repeat."""

    __slots__ = ("_defaults", "_kind", "_modes", "_names", "_tensor", "_version")

    def __init__(self, version: int, kind: str, names: Sequence[str], modes: Sequence[int],
                 defaults: Sequence[Any], tensor: Callable[[Any], dict[str, Any]]) -> None:  # fmt: skip
        if not len(names) == len(modes) == len(defaults) or not set(modes) <= {ALWAYS, TENSORS, NULLABLE, DEFAULT}:
            raise ValueError("Sparse: names, modes and defaults do not match")
        self._version = version
        self._kind = kind
        self._names: list[str] = list(names)
        self._modes: list[int] = list(modes)
        self._defaults: list[Any] = list(defaults)
        self._tensor = tensor

    def __call__(self, r: object, seq: int, skip: int) -> dict[str, Any]:
        d: dict[str, Any] = {"v": self._version, "seq": seq, "kind": self._kind}
        names, modes = self._names, self._modes
        for i in range(len(names)):
            if skip >> i & 1:
                continue
            name = names[i]
            v = getattr(r, name)
            mode = modes[i]
            if mode == ALWAYS:
                d[name] = v
            elif mode == NULLABLE:
                if v is not None:
                    d[name] = v
            elif mode == TENSORS:
                if v is not None:
                    tensor = self._tensor
                    d[name] = [tensor(t) for t in v]
            else:
                default = self._defaults[i]
                if v is not default and v != default:
                    d[name] = v
        return d

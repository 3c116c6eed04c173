"""The writer's fast path: a record's sparse dict (the JSON object of its capture line), from tables.

Why: the capture writer turns every record into a sparse dict (a field holding what a reader fills in
for an omitted one is left out) and orjson writes it, once per gRPC message on the proxy's hot path.
:class:`Sparse` is one loop over one record class's tables, built by replay/capture/schema.py from its
own field tables (what each field is omitted as), so writer and reader cannot disagree on what a
sparse line leaves out. :class:`Encoder` is the rest of a line's making, per record: a stream's
repeated sticky fields, the side file's place, orjson's bytes. Compiled by mypyc (replay/compiled.py);
the same file runs as it is without a compiler. Tests hold it to the decoder: every line it writes reads back as the record it was made from
(tests/replay/capture/test_encode.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import orjson

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


#: orjson's writer and its flag, read once: compiled code would look each up on the module per line.
_DUMPS: Final = orjson.dumps
_APPEND_NEWLINE: Final = orjson.OPT_APPEND_NEWLINE


# Compiled, each of a record's fields it reads costs a generic attribute lookup (~140 instructions,
# where the interpreter's specialised read of a slot costs ~20), but the interpreted method around them
# cost more: 0.3k instructions less per streamed response and 7k less per unary call (bench.icount),
# where records of several classes in turn left the interpreter's reads unspecialised.
class Encoder:
    """One capture file's lines: each record's :class:`Sparse` dict as orjson writes it, with an `s2c`
    message's sticky fields left out when they repeat its call's last `s2c` message in the file.

    ``build``: record class -> its :class:`Sparse`; ``message``, ``call_end``: the classes whose records
    hold and end a call's ``sticky`` fields (fields of ``message``'s :class:`Sparse` table). State
    is per file (a reader of one rotated file needs no other) and per open call (dropped at its end);
    :meth:`reset` forgets it, e.g. after a batch that was never written.
    """

    __slots__ = ("_build", "_call_end", "_last", "_message", "_sticky", "_sticky_skip")

    def __init__(self, build: Mapping[type, Sparse], message: type, call_end: type, sticky: Sequence[str]) -> None:
        names = build[message]._names
        self._build: dict[type, Sparse] = dict(build)
        self._message = message
        self._call_end = call_end
        self._sticky: list[str] = list(sticky)
        self._sticky_skip = sum(1 << names.index(name) for name in sticky)
        self._last: dict[str, list[Any]] = {}

    def reset(self) -> None:
        """Forget what earlier lines said: the next message of every call writes its sticky fields."""
        self._last.clear()

    def encode(self, record: object, seq: int, payload_at: list[int] | None = None) -> bytes:
        """One JSONL line (with newline) for ``record`` as record number ``seq``; ``payload_at``: the
        message's place in the side file, when the writer just put its bytes there."""
        r: Any = record  # a record of any kind: its fields are read once its class is known
        cls = type(r)
        skip = 0
        # Lists: the comprehension fills one in place, where a tuple would be built from it.
        now: list[Any] | None = None
        before: list[Any] | None = None
        if cls is self._message:
            if r.dir == "s2c":
                # Compared as the record holds them, before any dict is built: the labels cache shares
                # these lists between a stream's records, so a repeat is mostly identity tests.
                now = [getattr(r, name) for name in self._sticky]
                before = self._last.get(r.call)
                if now == before:
                    skip = self._sticky_skip
        elif cls is self._call_end:
            self._last.pop(r.call, None)
        d = self._build[cls].__call__(r, seq, skip)  # spelled out: compiled, a direct call
        if payload_at is not None:
            d["payload_at"] = payload_at
        if now is not None and not skip:
            # The reference of the call's next record, once this one's fields were written whole (one
            # that raised is none: its repeat must raise too, not be left out as a repeat).
            self._last[r.call] = now
            sticky = self._sticky
            if before is not None:
                for i in range(len(sticky)):
                    value = now[i]
                    if value == before[i]:
                        d.pop(sticky[i], None)
                    elif value is None:
                        d[sticky[i]] = None  # null after a non-null value must be said
            else:
                for name in sticky:
                    if name not in d:
                        d[name] = None  # a call's first: spelled out, whatever a reader knew before
        return _DUMPS(d, option=_APPEND_NEWLINE)

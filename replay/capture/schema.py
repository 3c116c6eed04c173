"""The capture format: version, encoding of records to JSONL lines, decoding back, documentation.

The record fields themselves are defined once, in :mod:`replay.capture.events`. This module adds the
envelope (``v``, ``seq``, ``kind``), the version policy and the generated section of docs/capture-format.md.

Version policy (mitmproxy-style): a reader accepts every version up to :data:`SCHEMA_VERSION`,
upgrading older records through :data:`_UPGRADES`, and refuses a newer one with a clear message.
Adding an optional field does not bump the version (readers ignore fields they do not know);
removing or changing the meaning of a field does.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

import orjson

from replay.capture import events as ev
from replay.capture.shapes import OneOf, Shape, SpecMemo, compile_shape
from replay.capture.shapes import generic as _generic
from replay.capture.sparse import ALWAYS, DEFAULT, NULLABLE, TENSORS, Sparse
from replay.capture.sparse import Encoder as _Encoder
from replay.errors import CaptureError, CaptureTooNew, UnknownKind

SCHEMA_VERSION = 4

KINDS: dict[str, type[Any]] = {cls.kind: cls for cls in ev.RECORD_TYPES}


def _v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    """v2 renamed the cancel record's ``executing`` to ``responded``: the proxy sees responses, not execution."""
    if raw.get("kind") == "cancel" and "executing" in raw:
        raw = dict(raw)
        raw["responded"] = raw.pop("executing")
    return raw


def _v2_to_v3(raw: dict[str, Any]) -> dict[str, Any]:
    """v3 is sparse (fields equal to their default are omitted); a dense v2 record is already a valid v3 one."""
    return raw


def _v3_to_v4(raw: dict[str, Any]) -> dict[str, Any]:
    """v4 records HTTP calls beside gRPC ones, and there ``call_end.status`` is an HTTP status code (`"200"`)
    and ``call_start.method`` a request line (`POST /v2/models/m/infer`): a v3 reader would misread
    them as gRPC, so it must refuse v4. The new fields are optional with gRPC defaults (``protocol``
    `grpc`, the rest null), so every v3 record, all of them gRPC, is already a valid v4 one.
    """
    return raw


# version n -> function upgrading a raw record dict from n to n + 1, one step per version.
_UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4}

#: Marks a field that is never omitted (required and not nullable).
_ALWAYS = object()


def _nullable(tp: Any) -> bool:
    return (typing.get_origin(tp) is typing.Union or isinstance(tp, types.UnionType)) and type(None) in typing.get_args(tp)


def _omitted_as(cls: type[Any]) -> dict[str, Any]:
    """field -> the value a sparse line omits (and a reader fills in): its default, else null when nullable."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif _nullable(hints[f.name]):
            out[f.name] = None
        else:
            out[f.name] = _ALWAYS
    return out


_OMITTED: dict[str, dict[str, Any]] = {k: _omitted_as(c) for k, c in KINDS.items()}
_TENSOR_LISTS = ("inputs", "output_tensors")
_STICKY = ev.MessageSeen.sticky


def _tensor(t: ev.TensorSpec) -> dict[str, Any]:
    d: dict[str, Any] = {"name": t.name, "datatype": t.datatype, "shape": t.shape}
    if t.size is not None:
        d["size"] = t.size
    if t.hmac_sha256 is not None:
        d["hmac_sha256"] = t.hmac_sha256
    return d


def _sparse(cls: type[Any]) -> Sparse:
    """``cls``'s sparse dict, made by the writer's fast path from what a reader fills in for each field."""
    omitted = _OMITTED[cls.kind]
    modes = [ALWAYS if o is _ALWAYS else TENSORS if name in _TENSOR_LISTS else NULLABLE if o is None else DEFAULT
             for name, o in omitted.items()]  # fmt: skip
    defaults = [None if o is _ALWAYS else o for o in omitted.values()]
    return Sparse(SCHEMA_VERSION, cls.kind, tuple(omitted), modes, defaults, _tensor)


#: record class -> ``build(record, seq, skip)``, its sparse dict (replay/capture/sparse.py).
_BUILD: dict[type[Any], Sparse] = {c: _sparse(c) for c in ev.RECORD_TYPES}
#: ``skip`` leaving out a ``message``'s sticky fields.
_STICKY_SKIP = sum(1 << list(_OMITTED["message"]).index(name) for name in _STICKY)


def encode(record: ev.Record, seq: int, payload_at: list[int] | None = None) -> bytes:
    """One JSONL line (with newline) for ``record`` as record number ``seq``, sparse but self-contained.

    Sticky fields are always written (a line read alone means what it says); :class:`Encoder` omits them.
    ``payload_at``: the message's place in the side file, when the writer just put its bytes there.
    """
    d = _BUILD[type(record)](record, seq, 0)
    if payload_at is not None:
        d["payload_at"] = payload_at
    if type(record) is ev.MessageSeen and record.dir == "s2c":
        for name in _STICKY:
            if name not in d:
                d[name] = None
    return orjson.dumps(d, option=orjson.OPT_APPEND_NEWLINE)


class Encoder:
    """Sparse encoding of one capture file: also omits an `s2c` message's sticky fields when they repeat.

    State is per file (a reader of one rotated file needs no other) and per open call (dropped at
    ``call_end``); :meth:`reset` forgets it, e.g. after a batch that was never written. The work is
    :class:`replay.capture.sparse.Encoder`'s, compiled, with this schema's tables: ``encode`` and ``reset``
    are its methods, so a line's making runs no interpreted code but the tensor function.
    """

    __slots__ = ("encode", "reset")

    def __init__(self) -> None:
        work = _Encoder(_BUILD, ev.MessageSeen, ev.CallEnded, _STICKY)
        #: One JSONL line (with newline) for ``record`` as record number ``seq`` (``payload_at``: as :func:`encode`).
        self.encode = work.encode
        #: Forget what earlier lines said: the next message of every call writes its sticky fields.
        self.reset = work.reset


def _required(cls: type[Any]) -> frozenset[str]:
    return frozenset(
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )


_REQUIRED: dict[str, frozenset[str]] = {k: frozenset(n for n, o in _OMITTED[k].items() if o is _ALWAYS) for k in KINDS}
# Nullable fields without a default: a sparse line omits them when null, the reader fills null in.
_NULLS: dict[str, tuple[str, ...]] = {
    k: tuple(n for n, o in _OMITTED[k].items() if o is None and n in _required(c)) for k, c in KINDS.items()
}

# A field's check: the exact JSON types it may have (``type(v) in types``: JSON gives exactly int,
# float, str, bool, None, list and dict, and an exact test keeps ``true`` out of int fields), then an
# optional deeper check of a non-null value returning what is wrong with it (None: fine).
_Deep = Callable[[Any], str | None]
_JSON_NAMES = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null",
               list: "array", dict: "object"}  # fmt: skip


def _types_of(tp: Any) -> tuple[frozenset[type], _Deep | None]:
    """The JSON types a field of Python type ``tp`` may have, and its deeper check."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or isinstance(tp, types.UnionType):
        allowed: set[type] = set()
        deeps: dict[type, _Deep] = {}
        for arg in typing.get_args(tp):
            t, deep = _types_of(arg)
            allowed |= t
            if deep is not None:
                for one in t:
                    deeps[one] = deep
        if not deeps:
            return frozenset(allowed), None
        return frozenset(allowed), lambda v: deeps[type(v)](v) if type(v) in deeps else None
    if origin is typing.Literal:
        values = frozenset(typing.get_args(tp))
        return frozenset(type(v) for v in values), OneOf(values)
    if origin is list:
        (item,) = typing.get_args(tp)
        if item is ev.TensorSpec:
            return frozenset({list}), _tensor_list
        item_types, item_deep = _types_of(item)
        return frozenset({list}), _items(item_types, item_deep)
    if origin is dict:
        _, value = typing.get_args(tp)
        if value is Any:
            return frozenset({dict}), None
        value_types, value_deep = _types_of(value)
        return frozenset({dict}), _values(value_types, value_deep)
    if tp is Any:
        return frozenset(_JSON_NAMES), None
    if tp is float:
        return frozenset({float, int}), None  # a JSON number written without a fraction is still a number
    if tp in _JSON_NAMES:
        return frozenset({tp}), None
    raise TypeError(f"no JSON check for field type {tp!r}")  # pragma: no cover - caught at import


def _describe(allowed: frozenset[type]) -> str:
    return " or ".join(sorted(_JSON_NAMES[t] for t in allowed))


def _items(allowed: frozenset[type], deep: _Deep | None) -> _Deep:
    def check(v: list[Any]) -> str | None:
        # Fast path (C-level iteration); the loop below only runs to say what is wrong.
        if allowed.issuperset(map(type, v)) and (deep is None or all(deep(item) is None for item in v)):
            return None
        for i, item in enumerate(v):
            if type(item) not in allowed:
                return f"item {i} must be {_describe(allowed)}, got {_JSON_NAMES.get(type(item), '?')}"
            if deep is not None and (why := deep(item)) is not None:
                return f"item {i}: {why}"
        return None

    return check


def _values(allowed: frozenset[type], deep: _Deep | None) -> _Deep:
    def check(v: dict[str, Any]) -> str | None:
        for k, item in v.items():
            if type(item) not in allowed:
                return f"value of {k!r} must be {_describe(allowed)}, got {_JSON_NAMES.get(type(item), '?')}"
            if deep is not None and (why := deep(item)) is not None:
                return f"value of {k!r}: {why}"
        return None

    return check


def _checks(cls: type[Any]) -> tuple[tuple[str, frozenset[type], _Deep | None], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, *_types_of(hints[f.name])) for f in dataclasses.fields(cls))


_TENSOR_CHECKS = _checks(ev.TensorSpec)
_TENSOR_FIELDS = tuple(name for name, _, _ in _TENSOR_CHECKS)


def _field_error(checks: tuple[tuple[str, frozenset[type], _Deep | None], ...], raw: dict[str, Any],
                 out: dict[str, Any]) -> str | None:  # fmt: skip
    """Copy the known fields of ``raw`` into ``out``; what is wrong with the first bad one, else None."""
    for name, allowed, deep in checks:
        if name not in raw:
            continue
        v = raw[name]
        if type(v) not in allowed:
            return f"field {name!r} must be {_describe(allowed)}, got {_JSON_NAMES.get(type(v), '?')} {_short(v)}"
        if deep is not None and v is not None and (why := deep(v)) is not None:
            return f"field {name!r}: {why}"
        out[name] = v
    return None


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _tensor_list(v: list[Any]) -> str | None:
    required = _TENSOR_REQUIRED
    if all(type(item) is dict and required <= item.keys() and _field_error(_TENSOR_CHECKS, item, {}) is None
           for item in v):  # fmt: skip
        return None
    for i, item in enumerate(v):
        if type(item) is not dict:
            return f"item {i} must be a tensor object, got {_JSON_NAMES.get(type(item), '?')}"
        missing = [name for name in _TENSOR_REQUIRED if name not in item]
        if missing:
            return f"item {i} lacks {', '.join(sorted(missing))}"
        why = _field_error(_TENSOR_CHECKS, item, {})
        if why is not None:
            return f"item {i}: {why}"
    return None


_TENSOR_REQUIRED = _required(ev.TensorSpec)
_Checks = tuple[tuple[str, frozenset[type], _Deep | None], ...]
#: kind -> per field (name, allowed JSON types, deeper check), computed once from the type hints.
_CHECKS: dict[str, _Checks] = {k: _checks(c) for k, c in KINDS.items()}


#: Per file: call -> the decoded sticky fields of its last `s2c` message (see :class:`Encoder`).
Sticky = dict[str, tuple[Any, ...]]

#: kind -> field name -> (allowed JSON types, deeper check): the lookup the decoder's loop uses.
_CHECK_MAP: dict[str, dict[str, tuple[frozenset[type], _Deep | None]]] = {
    k: {name: (allowed, deep) for name, allowed, deep in checks} for k, checks in _CHECKS.items()
}


def _envelope(raw: Any, path: str, line: int | None) -> tuple[int, str, dict[str, Any]]:
    """``(seq, kind, upgraded raw)``, or what is wrong with the envelope."""
    if not isinstance(raw, dict):
        raise CaptureError(path, line, "a capture line must be a JSON object")
    v = raw.get("v")
    if type(v) is not int or v < 1:
        raise CaptureError(path, line, f"missing or invalid schema version 'v': {v!r}")
    if v > SCHEMA_VERSION:
        raise CaptureTooNew(path, line, f"capture schema version {v} is newer than this triton-tap understands "
                            f"({SCHEMA_VERSION}); upgrade triton-tap to read it")  # fmt: skip
    while v < SCHEMA_VERSION:
        raw = _UPGRADES[v](raw)
        v += 1
    seq = raw.get("seq")
    if type(seq) is not int or seq < 0:
        raise CaptureError(path, line, f"missing or invalid 'seq': {seq!r}")
    kind = raw.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        if isinstance(kind, str) and kind:
            raise UnknownKind(path, line, kind, seq)
        raise CaptureError(path, line, f"missing or invalid record kind {kind!r}")
    return seq, kind, raw


def decode(raw: Any, *, path: str = "<capture>", line: int | None = None,
           sticky: Sticky | None = None) -> tuple[int, ev.Record]:  # fmt: skip
    """``(seq, record)`` from one parsed JSON line; :class:`CaptureError` says what is wrong.

    ``sticky``: the state of the file being read (one dict per file), so sparse `s2c` messages get
    the sticky fields their line omitted; without it a line is decoded on its own.
    """
    # Hot loop (every record of every read): a line of a shape seen before is one dict lookup and
    # its fast decoder (replay/capture/shapes.py); the rest, and every error, the generic way.
    if type(raw) is dict:
        keys = tuple(raw)
        fast = _SHAPES.get(keys)
        if fast is None:
            fast = _shape(raw, keys)
        done = fast(raw, sticky)
        if done is not None:
            return done
    return _decode(raw, path, line, sticky)


def _decode(raw: Any, path: str, line: int | None, sticky: Sticky | None) -> tuple[int, ev.Record]:
    """The generic decoder: the reference the fast path (:mod:`replay.capture.shapes`) must equal, and every error."""
    # Only the keys the line has are visited (sparse lines have few), and carried sticky fields
    # are reused already decoded, not checked again.
    seq, kind, raw = _envelope(raw, path, line)
    missing = [name for name in _REQUIRED[kind] if name not in raw]
    if missing:
        raise CaptureError(path, line, f"{kind} record lacks field(s) {', '.join(sorted(missing))}")
    checks = _CHECK_MAP[kind]
    fields: dict[str, Any] = {}
    for name, value in raw.items():
        check = checks.get(name)
        if check is None:
            continue  # the envelope, or a field added by a newer writer
        allowed, deep = check
        if type(value) not in allowed:
            raise CaptureError(path, line, f"{kind} record: field {name!r} must be {_describe(allowed)}, got "
                               f"{_JSON_NAMES.get(type(value), '?')} {_short(value)}")  # fmt: skip
        if deep is not None and value is not None and (why := deep(value)) is not None:
            raise CaptureError(path, line, f"{kind} record: field {name!r}: {why}")
        fields[name] = value
    for name in _NULLS[kind]:
        if name not in fields:
            fields[name] = None
    if kind == "message":
        for name in _TENSOR_LISTS:
            specs = fields.get(name)
            if specs:
                # Already checked (the field's deep check); this keeps the known keys only.
                fields[name] = _specs(specs)
        if sticky is not None and fields["dir"] == "s2c":
            before = sticky.get(fields["call"])
            if before is not None:
                for name, old in zip(_STICKY, before, strict=True):
                    if name not in raw:
                        fields[name] = old
            get = fields.get
            sticky[fields["call"]] = (get("model"), get("model_version"), get("outputs"), get("output_tensors"))
    elif sticky is not None and kind == "call_end":
        sticky.pop(fields["call"], None)
    return seq, KINDS[kind](**fields)


def _specs(specs: list[dict[str, Any]]) -> list[ev.TensorSpec]:
    return [ev.TensorSpec(**{k: t[k] for k in _TENSOR_FIELDS if k in t}) for t in specs]


#: The fast path's tensor lists: checked as the field's deep check does, built by _specs, memoized.
_SPECS = SpecMemo(lambda v: None if _tensor_list(v) is not None else _specs(v))


def _shape(raw: dict[str, Any], keys: tuple[str, ...]) -> Shape:
    """The fast decoder of lines with ``keys`` and ``raw``'s kind (kept for the next ones while there is room)."""
    kind = raw.get("kind")
    if type(kind) is not str or kind not in KINDS:
        return _generic
    tables = shape_tables(kind)
    fast = compile_shape(KINDS[kind], keys, **tables)
    if len(_SHAPES) < _MAX_SHAPES:
        _SHAPES[keys] = fast
    return fast


def shape_tables(kind: str) -> dict[str, Any]:
    """What the fast path of ``kind``'s lines is made from (compile_shape's arguments)."""
    message = kind == "message"
    return {"version": SCHEMA_VERSION, "checks": _CHECK_MAP[kind], "omitted": _OMITTED[kind], "always": _ALWAYS,
            "sticky_names": _STICKY if message else (), "tensor_lists": _TENSOR_LISTS if message else (),
            "to_specs": _SPECS, "forget_sticky": kind == "call_end"}  # fmt: skip


#: line keys (in order) -> its fast decoder, which also checks the kind it was made for (another
#: kind with the same keys takes the generic way); at most _MAX_SHAPES (odd lines beyond: generic).
_SHAPES: dict[tuple[str, ...], Shape] = {}
_MAX_SHAPES = 256


def to_dict(record: ev.Record) -> dict[str, Any]:
    """The record as the JSON object a capture line holds (without ``v``/``seq``)."""
    d: dict[str, Any] = orjson.loads(orjson.dumps(record))
    return {"kind": record.kind, **d}

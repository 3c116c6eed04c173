"""The capture format: version, encoding of records to JSONL lines, decoding back, documentation.

The record fields themselves are defined once, in :mod:`replay.events`. This module adds the
envelope (``v``, ``seq``, ``kind``), the version policy and the generated README section.

Version policy (mitmproxy-style): a reader accepts every version up to :data:`SCHEMA_VERSION`,
upgrading older records through :data:`_UPGRADES`, and refuses a newer one with a clear message.
Adding an optional field does not bump the version (readers ignore fields they do not know);
removing or changing the meaning of a field does.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Callable
from typing import Any

import orjson

from replay import events as ev
from replay.errors import CaptureError, CaptureTooNew, UnknownKind

SCHEMA_VERSION = 1

KINDS: dict[str, type[Any]] = {cls.kind: cls for cls in ev.RECORD_TYPES}

# version n -> function upgrading a raw record dict from n to n + 1 (none yet: v1 is the first).
_UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}

_HEADS: dict[str, bytes] = {}


def encode(record: ev.Record, seq: int) -> bytes:
    """One JSONL line (with newline) for ``record`` as record number ``seq``."""
    kind = record.kind
    head = _HEADS.get(kind)
    if head is None:
        head = _HEADS[kind] = b',"kind":"' + kind.encode() + b'",'
    # orjson serialises the slotted dataclass directly; splice the envelope in front of its
    # fields instead of building an intermediate dict on the hot path.
    body = orjson.dumps(record)
    return b'{"v":%d,"seq":%d%s%s\n' % (SCHEMA_VERSION, seq, head, body[1:])


def _required(cls: type[Any]) -> frozenset[str]:
    return frozenset(
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )


_FIELDS: dict[str, frozenset[str]] = {k: frozenset(f.name for f in dataclasses.fields(c)) for k, c in KINDS.items()}
_REQUIRED: dict[str, frozenset[str]] = {k: _required(c) for k, c in KINDS.items()}


def decode(raw: Any, *, path: str = "<capture>", line: int | None = None) -> tuple[int, ev.Record]:
    """``(seq, record)`` from one parsed JSON line; :class:`CaptureError` says what is wrong."""
    if not isinstance(raw, dict):
        raise CaptureError(path, line, "a capture line must be a JSON object")
    v = raw.get("v")
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise CaptureError(path, line, f"missing or invalid schema version 'v': {v!r}")
    if v > SCHEMA_VERSION:
        raise CaptureTooNew(
            path,
            line,
            f"capture schema version {v} is newer than this triton-tap understands "
            f"({SCHEMA_VERSION}); upgrade triton-tap to read it",
        )
    while v < SCHEMA_VERSION:
        raw = _UPGRADES[v](raw)
        v += 1
    seq = raw.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise CaptureError(path, line, f"missing or invalid 'seq': {seq!r}")
    kind = raw.get("kind")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        if isinstance(kind, str) and kind:
            raise UnknownKind(path, line, kind, seq)
        raise CaptureError(path, line, f"missing or invalid record kind {kind!r}")
    missing = _REQUIRED[kind] - raw.keys()
    if missing:
        raise CaptureError(path, line, f"{kind} record lacks field(s) {', '.join(sorted(missing))}")
    fields = {k: raw[k] for k in _FIELDS[kind] if k in raw}
    if cls is ev.MessageSeen:
        for name in ("inputs", "output_tensors"):
            if fields.get(name) is not None:
                try:
                    fields[name] = [ev.TensorSpec(**t) for t in fields[name]]
                except TypeError as e:
                    raise CaptureError(path, line, f"bad {name!r} in message record: {e}") from None
    try:
        return seq, cls(**fields)
    except TypeError as e:  # pragma: no cover - guarded by the field checks above
        raise CaptureError(path, line, str(e)) from None


def to_dict(record: ev.Record) -> dict[str, Any]:
    """The record as the JSON object a capture line holds (without ``v``/``seq``)."""
    d: dict[str, Any] = orjson.loads(orjson.dumps(record))
    return {"kind": record.kind, **d}


def _type_text(tp: Any) -> str:
    text = str(tp).replace("typing.", "").replace("replay.events.", "")
    text = text.replace("<class '", "").replace("'>", "")
    return text.replace("NoneType", "null").replace(" | ", " or ")


def markdown() -> str:
    """The README's capture-schema section, generated from :mod:`replay.events`."""
    out = [
        f"Schema version **{SCHEMA_VERSION}**. Every line: `v` (schema version), `seq` (record number, "
        "gap-free across the whole capture, rotated files included), `kind`, then the fields below.",
        "",
    ]
    classes: tuple[type[Any], ...] = (*ev.RECORD_TYPES, ev.TensorSpec)
    for cls in classes:
        hints = typing.get_type_hints(cls, include_extras=True)
        title = "tensor spec (items of `inputs` and `output_tensors`)" if cls is ev.TensorSpec else f"`{cls.kind}`"
        out.append(f"#### {title}: {cls.__doc__}")
        out.append("")
        out.append("| field | type | meaning |")
        out.append("|---|---|---|")
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            base, doc = typing.get_args(hint)[0], hint.__metadata__[0]
            opt = "" if f.default is dataclasses.MISSING else " (optional)"
            out.append(f"| `{f.name}` | `{_type_text(base)}`{opt} | {doc} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    if sys.argv[1:] == ["--markdown"]:
        print(markdown())
    else:
        print("usage: python -m replay.schema --markdown", file=sys.stderr)
        sys.exit(2)

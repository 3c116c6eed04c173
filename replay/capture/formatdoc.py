"""docs/capture-format.md's records section, generated from :mod:`replay.capture.events` and the schema's tables.

``python -m replay.capture.formatdoc --markdown`` prints it; tests/replay/capture/test_schema_encoding.py
fails when the page and the code disagree.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from typing import Any

import orjson

from replay.capture import events as ev
from replay.capture import schema


def _type_text(tp: Any) -> str:
    text = str(tp).replace("typing.", "").replace("replay.capture.events.", "")
    text = text.replace("<class '", "").replace("'>", "")
    return text.replace("NoneType", "null").replace(" | ", " or ")


def _omitted_text(cls: type[Any], name: str) -> str:
    if cls is ev.TensorSpec:
        return "null" if name in ("size", "hmac_sha256") else "never"
    omit = schema._OMITTED[cls.kind][name]
    text = "never" if omit is schema._ALWAYS else "null" if omit is None else f"`{orjson.dumps(omit).decode()}`"
    if cls is ev.MessageSeen and name in schema._STICKY:
        text += "; on `s2c`: equal to the call's previous `s2c` message in the file"
    return text


def markdown() -> str:
    """docs/capture-format.md's records section, generated from :mod:`replay.capture.events`."""
    out = [
        f"Schema version **{schema.SCHEMA_VERSION}**. Every line: `v` (schema version), `seq` (record number, "
        "gap-free across the whole capture, rotated files included), `kind`, then the fields below. "
        "Lines are sparse: a field is left out when its value is the one in the *omitted when* column, "
        "and a reader fills that value in (a line may also spell it out: versions 1 and 2 always did).",
        "",
    ]
    classes: tuple[type[Any], ...] = (*ev.RECORD_TYPES, ev.TensorSpec)
    for cls in classes:
        hints = typing.get_type_hints(cls, include_extras=True)
        title = "tensor spec (items of `inputs` and `output_tensors`)" if cls is ev.TensorSpec else f"`{cls.kind}`"
        out.append(f"#### {title}: {cls.__doc__}")
        out.append("")
        out.append("| field | type | omitted when | meaning |")
        out.append("|---|---|---|---|")
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            base, doc = typing.get_args(hint)[0], hint.__metadata__[0]
            out.append(f"| `{f.name}` | `{_type_text(base)}` | {_omitted_text(cls, f.name)} | {doc} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    if sys.argv[1:] == ["--markdown"]:
        print(markdown())
    else:
        print("usage: python -m replay.capture.formatdoc --markdown", file=sys.stderr)
        sys.exit(2)

"""A protobuf message as the plain JSON a script reads (``--json`` of the admin commands): :func:`message_dict`.

protobuf's own JSON mapping (``MessageToDict``) suits another protobuf reader, not ``jq``: it leaves out
every field at its default (a counter at 0, a flag off, an empty list), so ``.counters.dropped`` reads
null, and it writes 64-bit integers as strings, so ``.next_seq > 9`` compares a string.
"""

from __future__ import annotations

from typing import Any, cast

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

#: The 64-bit integer types, which the proto3 JSON mapping writes as strings.
_INT64 = frozenset({
    FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64,
})  # fmt: skip


def message_dict(message: Message) -> dict[str, Any]:
    """``message`` as a dict of its proto field names: every field, default-valued ones included (a
    field with presence, such as an ``optional`` or a message field, only when set), 64-bit integers
    as ints."""
    # The option's name changed in protobuf 5.26; the old one is gone from 6.
    try:
        out = MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    except TypeError:
        old: dict[str, Any] = {"preserving_proto_field_name": True, "including_default_value_fields": True}
        out = MessageToDict(message, **old)
    # The stubs type DESCRIPTOR as upb's Descriptor or the pure-Python one; both read alike.
    _ints(out, cast(Descriptor, message.DESCRIPTOR))
    return out


def _ints(out: dict[str, Any], descriptor: Descriptor) -> None:
    """Turn the 64-bit integers of ``out`` (``descriptor``'s message as MessageToDict wrote it) back into ints."""
    for field in descriptor.fields:
        if field.name not in out:
            continue
        value = out[field.name]
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            # A map's keys are JSON object keys, strings whatever their type; its values are converted.
            value_field = entry.fields_by_name["value"]
            for key, item in value.items():
                value[key] = _convert(value_field, item)
        elif isinstance(value, list):
            out[field.name] = [_convert(field, item) for item in value]
        else:
            out[field.name] = _convert(field, value)


def _convert(field: FieldDescriptor, value: Any) -> Any:
    """One value of ``field`` (an element, for a repeated field or a map's values)."""
    if field.type in _INT64:
        return int(value)
    # A well-known type (Timestamp, Duration, wrappers ...) has a JSON form of its own: kept as written.
    if field.message_type is not None and not field.message_type.full_name.startswith("google.protobuf."):
        _ints(value, field.message_type)
    return value

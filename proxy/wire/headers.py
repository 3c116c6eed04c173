"""gRPC header blocks as the capture records them, and the status blocks the proxy sends itself.

Pure: a header list is the ``[(name, value), ...]`` of bytes that :class:`proxy.wire.frames.FrameReader`
decodes (raw, as on the wire).
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote, unquote

Headers = list[tuple[bytes, bytes]]


class Block(list[tuple[bytes, bytes]]):
    """A decoded header block as :class:`proxy.wire.frames.FrameReader` hands it out.

    The reader hands out the same Block again for the same block bytes while the HPACK table stays
    as it was (a client's calls repeat their headers), so what is derived from one is worked out once
    and kept in ``derived``: by :func:`pairs` and :func:`grpc_status` here, by the relay for a call's
    start. What is kept there is shared by every record made from it, so it is never changed.
    """

    __slots__ = ("derived",)

    def __init__(self, fields: Any = ()) -> None:
        super().__init__(fields)
        self.derived: dict[str, Any] = {}


def pairs(headers: Headers) -> list[list[str]]:
    """A header list as the capture records it: ``[[name, value], ...]`` strings, in wire order."""
    if type(headers) is Block:
        got: list[list[str]] | None = headers.derived.get("pairs")
        if got is None:
            got = headers.derived["pairs"] = _pairs(headers)
        return got
    return _pairs(headers)


def _pairs(headers: Headers) -> list[list[str]]:
    return [[k.decode("latin-1"), text(k, v)] for k, v in headers]


def text(name: bytes, value: bytes) -> str:
    """A header value as recorded. Binary (``-bin``) values sent in gRPC's "true binary" form (a NUL
    then raw bytes, used when both peers advertise it in SETTINGS) are recorded in the usual
    unpadded base64 form, so a capture reads the same whichever form the peers agreed on."""
    if value[:1] == b"\0" and name.endswith(b"-bin"):
        return base64.b64encode(value[1:]).decode("ascii").rstrip("=")
    return value.decode("latin-1")


def header(headers: Headers, name: bytes) -> bytes | None:
    """The value of the first header called ``name``, or None."""
    for k, v in headers:
        if k == name:
            return v
    return None


def grpc_status(headers: Headers) -> tuple[bytes | None, str | None]:
    """The raw ``grpc-status`` and the percent-decoded ``grpc-message`` of a trailer block."""
    if type(headers) is Block:
        got: tuple[bytes | None, str | None] | None = headers.derived.get("grpc_status")
        if got is None:
            got = headers.derived["grpc_status"] = _grpc_status(headers)
        return got
    return _grpc_status(headers)


def _grpc_status(headers: Headers) -> tuple[bytes | None, str | None]:
    msg = header(headers, b"grpc-message")
    return header(headers, b"grpc-status"), unquote(msg.decode("latin-1")) if msg is not None else None


def status_trailers(code: int, message: str, with_response_headers: bool) -> Headers:
    """A gRPC status of the proxy's own: trailers, preceded by the response headers when the client
    has not had any yet (a trailers-only response)."""
    out: Headers = []
    if with_response_headers:
        out += [(b":status", b"200"), (b"content-type", b"application/grpc")]
    out += [(b"grpc-status", str(code).encode()), (b"grpc-message", grpc_message(message))]
    return out


# Printable ASCII but ``%`` itself: what a grpc-message carries as it is.
_GRPC_MESSAGE_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if c != 0x25)


def grpc_message(message: str) -> bytes:
    """``message`` as a grpc-message value: percent-encoded (UTF-8) outside printable ASCII and for ``%``
    itself, as gRPC's spec asks: clients decode it so, and a raw byte above 0x7E is no valid header text.
    A lone surrogate (an OS error's undecodable file name) goes as its ``\\udcXX`` escape."""
    return quote(message, safe=_GRPC_MESSAGE_SAFE, errors="backslashreplace").encode()

"""``--redact-input`` for HTTP request bodies: the named inputs' data cut out before a body reaches a capture.

Pure, the HTTP twin of :mod:`proxy.triton.redact`: one whole request body in (as sent, maybe
compressed), the body to store and the input specs out, or why it cannot be redacted for sure (the
caller then stores no bytes at all). What is cut, and what stays:

- ``infer`` (KServe v2): an input named in ``names`` keeps its name, datatype and shape; its
  ``data`` key is removed from the JSON, or, with the binary-data extension, its slice of the raw
  bytes after the JSON part is left out and its ``binary_data_size`` becomes 0. It gets the
  :data:`~proxy.triton.redact.MARK` parameter (``hmac-sha256:<hex>;size=<n>``), as a gRPC input does.
- ``generate`` / ``generate_stream`` and the OpenAI-compatible endpoints: the inputs are the JSON
  object's top-level fields; a named field is removed and listed under the top-level
  :data:`~proxy.triton.redact.MARK` object (field -> the same ``hmac-sha256:...;size=...`` text).
- Every other byte stays: the other inputs' JSON and raw slices, parameters, id. The JSON part is
  written again (compact), so its length is no longer the request's ``Inference-Header-Content-Length``:
  a reader takes the stored body's first JSON value, then the raw slices of the inputs whose
  ``binary_data_size`` is not 0, in input order.

The keyed hash (HMAC-SHA256 with the capture's redaction salt) is over the tensor's bytes as sent:
a raw slice as it is; a JSON value (``data``, or a generate field) as compact JSON
(``orjson.dumps``, so ``"hi"`` is hashed as the four bytes ``"hi"``). Equal values under one salt
give equal hashes, so requests stay matchable.

A ``gzip`` or ``deflate`` body is decompressed (at most :data:`INFLATE_CAP` bytes), redacted, and
compressed again with the same encoding (deflate in the zlib format), so the stored bytes are still a body its headers describe.
Anything else (another encoding, a body that does not decompress or decompresses beyond the cap,
JSON that does not parse, raw slices that do not add up to the bytes after the JSON) cannot be
proven free of the named data: the caller stores none of it, with the reason.
"""

from __future__ import annotations

import gzip
import hashlib
import hmac
import zlib
from dataclasses import dataclass, replace
from typing import Any

import orjson

from proxy.triton.http_labels import Headers, content_encoding, header, tensor_spec
from proxy.triton.redact import MARK
from replay.capture.events import TensorSpec
from replay.capture.methods import OPENAI, http_call
from replay.capture.payload import decompress_body

#: The most bytes a compressed request body may decompress to for redaction; a bigger one is withheld
#: (a small compressed body can inflate without bound, and the relay holds the result).
INFLATE_CAP = 64 << 20
#: The request kinds whose inputs are the body's top-level JSON fields.
_FIELD_KINDS = frozenset({"generate", "generate_stream", *OPENAI})
#: Top-level fields never redacted: the request id and the parameters are what the offline tools match on.
_ENVELOPE = frozenset({"id", "parameters"})


@dataclass(frozen=True, slots=True)
class Redacted:
    """A request body with the named inputs' data cut out."""

    #: The bytes to store (``body`` itself, same object, when no input matched).
    body: bytes
    #: Specs of the inputs (infer: every input; generate: the redacted fields), None when none was redacted.
    inputs: list[TensorSpec] | None


@dataclass(frozen=True, slots=True)
class Withheld:
    """A body that cannot be proven free of the named data: why (the ``decode_error``)."""

    why: str


def _mark(key: bytes, data: bytes) -> tuple[str, str]:
    digest = hmac.new(key, data, hashlib.sha256).hexdigest()
    return digest, f"hmac-sha256:{digest};size={len(data)}"


def _deflate(plain: bytes, encoding: str) -> bytes:
    """``plain`` compressed again (deflate: the zlib format, HTTP's meaning of the name, whichever was read)."""
    if encoding in ("gzip", "x-gzip"):
        return gzip.compress(plain, mtime=0)
    return zlib.compress(plain)


def redact_http_request(
    method: str, headers: Headers, body: bytes, names: frozenset[str], key: bytes
) -> Redacted | Withheld:
    """``body`` (the whole request body of the call ``method``, as sent) with the data of the inputs named in
    ``names`` cut out, or :class:`Withheld` when that cannot be proven. Not an inference call, an empty
    body, or no input named: the body comes back unchanged (same object)."""
    call = http_call(method)
    if call is None or not body or (call.kind != "infer" and call.kind not in _FIELD_KINDS):
        return Redacted(body, None)
    enc = content_encoding(headers)
    plain = body
    if enc is not None:
        plain, cut, why = decompress_body(body, enc, INFLATE_CAP)
        if why is not None:
            return Withheld(f"payload withheld: cannot redact: {why}")
        if cut:
            return Withheld(f"payload withheld: cannot redact: {enc} body cut short or over {INFLATE_CAP} bytes plain")
    icl = header(headers, "inference-header-content-length")
    if icl is not None:
        try:
            n = int(icl.strip())
        except ValueError:
            return Withheld(f"payload withheld: cannot redact: Inference-Header-Content-Length is not a number: {icl!r}")
        if not 0 <= n <= len(plain):
            return Withheld(f"payload withheld: cannot redact: body shorter than Inference-Header-Content-Length {n}")
        head, rest = plain[:n], plain[n:]
    else:
        head, rest = plain, b""
    try:
        doc = orjson.loads(head)
    except orjson.JSONDecodeError as e:
        return Withheld(f"payload withheld: cannot redact: body is not JSON: {e}")
    if type(doc) is not dict:
        return Withheld("payload withheld: cannot redact: body is not a JSON object")
    if call.kind == "infer":
        out = _infer(doc, rest, names, key)
    else:
        out = _fields(doc, rest, names, key)
    if isinstance(out, Withheld):
        return out
    if out is None:
        return Redacted(body, None)
    stored, specs = out
    if enc is not None:
        stored = _deflate(stored, enc)
    return Redacted(stored, specs)


def _infer(doc: dict[str, Any], rest: bytes, names: frozenset[str], key: bytes
           ) -> tuple[bytes, list[TensorSpec]] | Withheld | None:  # fmt: skip
    """A KServe v2 infer body: its JSON ``doc`` and the raw bytes after it (``rest``)."""
    inputs = doc.get("inputs")
    if type(inputs) is not list:
        return Withheld("payload withheld: cannot redact: infer body without an inputs list")
    kept: list[bytes] = []
    specs: list[TensorSpec] = []
    at = 0
    hit = False
    for t in inputs:
        if type(t) is not dict or type(t.get("name")) is not str:
            return Withheld("payload withheld: cannot redact: an input without a name")
        params = t.get("parameters")
        if params is not None and type(params) is not dict:
            return Withheld(f"payload withheld: cannot redact: input {t['name']!r} has non-object parameters")
        size = (params or {}).get("binary_data_size")
        piece: bytes | None = None
        if size is not None:
            if type(size) is not int or size < 0 or at + size > len(rest):
                return Withheld(f"payload withheld: cannot redact: binary_data_size of {t['name']!r} is beyond the body")
            piece = rest[at : at + size]
            at += size
        spec = tensor_spec(t)
        assert spec is not None  # (it has a name)
        if t["name"] not in names:
            if piece is not None:
                kept.append(piece)
            specs.append(spec)
            continue
        hit = True
        if piece is not None:
            data = piece
            params = dict(params or {})
            params["binary_data_size"] = 0
        else:
            data = orjson.dumps(t["data"]) if "data" in t else b""
            params = dict(params or {})
        digest, mark = _mark(key, data)
        params[MARK] = mark
        t.pop("data", None)
        t["parameters"] = params
        specs.append(replace(spec, size=len(data), hmac_sha256=digest))
    if at != len(rest):
        return Withheld("payload withheld: cannot redact: the binary_data_size values do not add up to the raw bytes")
    if not hit:
        return None
    return orjson.dumps(doc) + b"".join(kept), specs


def _fields(doc: dict[str, Any], rest: bytes, names: frozenset[str], key: bytes
            ) -> tuple[bytes, list[TensorSpec]] | Withheld | None:  # fmt: skip
    """A generate (or OpenAI) body: its inputs are the top-level fields."""
    if rest:
        return Withheld("payload withheld: cannot redact: raw bytes after a generate body's JSON")
    hit = [k for k in doc if k in names and k not in _ENVELOPE]
    if not hit:
        return None
    marks: dict[str, str] = {}
    specs: list[TensorSpec] = []
    for name in hit:
        data = orjson.dumps(doc.pop(name))
        digest, marks[name] = _mark(key, data)
        specs.append(TensorSpec(name=name, datatype="", shape=[], size=len(data), hmac_sha256=digest))
    doc[MARK] = marks
    return orjson.dumps(doc), specs

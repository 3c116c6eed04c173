"""Cutting named input tensors out of a ModelInferRequest before it reaches a capture.

Pure: bytes of one request in, the redacted request bytes and its input specs out. A redacted
input keeps its name, datatype and shape in the message; its data is replaced by nothing and a
keyed hash (HMAC-SHA256 with the capture's redaction salt) is recorded in its :class:`TensorSpec`,
so two captures taken with the same salt can still be matched request by request without either
holding the data (a prompt, typically).
"""

from __future__ import annotations

import hashlib
import hmac

from tritonclient.grpc import service_pb2 as pb

from replay.capture.events import TensorSpec

#: Input parameter set on each redacted input inside the stored message, so the stored bytes say
#: themselves that data is missing (and which keyed hash it had).
MARK = "triton_tap_redacted"


def redact_request(body: bytes, names: frozenset[str], key: bytes) -> tuple[bytes, list[TensorSpec]] | None:
    """``(stored bytes, input specs)`` with the data of inputs named in ``names`` removed.

    Returns None when ``body`` is not a complete ModelInferRequest (cut, compressed or garbage):
    the caller must then store no payload at all, since it cannot prove the data is gone.
    When no input matches, ``body`` comes back unchanged (same object).
    """
    try:
        r = pb.ModelInferRequest.FromString(body)
    except Exception:
        return None
    raw = r.raw_input_contents
    hit = False
    specs: list[TensorSpec] = []
    for i, t in enumerate(r.inputs):
        spec = TensorSpec(name=t.name, datatype=t.datatype, shape=list(t.shape))
        if t.name in names:
            if len(raw) > i:
                data = raw[i]
                raw[i] = b""
            else:
                # Typed contents (no raw_input_contents): hash their serialized form.
                data = t.contents.SerializeToString() if t.HasField("contents") else b""
                t.ClearField("contents")
            digest = hmac.new(key, data, hashlib.sha256).hexdigest()
            t.parameters[MARK].string_param = f"hmac-sha256:{digest};size={len(data)}"
            spec = TensorSpec(name=t.name, datatype=t.datatype, shape=list(t.shape), size=len(data), hmac_sha256=digest)
            hit = True
        specs.append(spec)
    if not hit:
        return body, specs
    return r.SerializeToString(), specs

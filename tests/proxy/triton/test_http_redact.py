"""--redact-input on HTTP request bodies (proxy/triton/http_redact.py): what is cut, what stays, when it withholds."""

from __future__ import annotations

import gzip
import hashlib
import hmac
import zlib
from typing import Any

import orjson
import pytest

from proxy.triton.http_redact import Redacted, Withheld, redact_http_request
from proxy.triton.redact import MARK

KEY = b"salt"
SECRET = "confidential-4711"
INFER = "POST /v2/models/m/infer"
NAMES = frozenset({"PROMPT"})


def _hmac(data: bytes) -> str:
    return hmac.new(KEY, data, hashlib.sha256).hexdigest()


def _binary(doc: dict[str, object], raw: bytes) -> tuple[list[tuple[str, str]], bytes]:
    head = orjson.dumps(doc)
    return [("Inference-Header-Content-Length", str(len(head)))], head + raw


def _redacted(got: Redacted | Withheld) -> Redacted:
    assert isinstance(got, Redacted), got
    return got


def test_json_infer_input_data_cut_shape_datatype_hash_kept() -> None:
    doc = {"id": "r1", "inputs": [
        {"name": "PROMPT", "shape": [1], "datatype": "BYTES", "data": [SECRET]},
        {"name": "MAX_TOKENS", "shape": [1], "datatype": "INT32", "data": [3]},
    ]}  # fmt: skip
    body = orjson.dumps(doc)
    got = _redacted(redact_http_request(INFER, [], body, NAMES, KEY))
    assert SECRET.encode() not in got.body
    stored = orjson.loads(got.body)
    prompt, max_tokens = stored["inputs"]
    data = orjson.dumps([SECRET])
    assert "data" not in prompt and prompt["shape"] == [1] and prompt["datatype"] == "BYTES"
    assert prompt["parameters"][MARK] == f"hmac-sha256:{_hmac(data)};size={len(data)}"
    assert max_tokens == doc["inputs"][1] and stored["id"] == "r1"  # type: ignore[index]
    assert got.inputs is not None
    spec = {t.name: t for t in got.inputs}
    assert (spec["PROMPT"].size, spec["PROMPT"].hmac_sha256, spec["PROMPT"].shape) == (len(data), _hmac(data), [1])
    assert spec["MAX_TOKENS"].hmac_sha256 is None and spec["MAX_TOKENS"].datatype == "INT32"


def test_binary_infer_slice_cut_other_slices_kept_in_order() -> None:
    first, secret, last = b"\x01\x02\x03", len(SECRET).to_bytes(4, "little") + SECRET.encode(), b"\xff" * 8
    doc = {"inputs": [
        {"name": "A", "shape": [3], "datatype": "UINT8", "parameters": {"binary_data_size": 3}},
        {"name": "PROMPT", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": len(secret)}},
        {"name": "J", "shape": [1], "datatype": "INT32", "data": [7]},
        {"name": "B", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": 8}},
    ]}  # fmt: skip
    headers, body = _binary(doc, first + secret + last)
    got = _redacted(redact_http_request(INFER, headers, body, NAMES, KEY))
    assert SECRET.encode() not in got.body
    head, end = orjson.loads(got.body[: got.body.index(b"}]}") + 3]), got.body.index(b"}]}") + 3
    assert got.body[end:] == first + last
    prompt = head["inputs"][1]
    assert prompt["parameters"] == {"binary_data_size": 0, MARK: f"hmac-sha256:{_hmac(secret)};size={len(secret)}"}
    assert head["inputs"][3]["parameters"] == {"binary_data_size": 8}
    assert got.inputs is not None and got.inputs[1].hmac_sha256 == _hmac(secret) and got.inputs[1].size == len(secret)


@pytest.mark.parametrize("kind", ["generate", "generate_stream"])
def test_generate_top_level_field_cut(kind: str) -> None:
    body = orjson.dumps({"id": "g1", "PROMPT": SECRET, "MAX_TOKENS": 5, "parameters": {"stream": True}})
    got = _redacted(redact_http_request(f"POST /v2/models/tokens/{kind}", [], body, NAMES, KEY))
    stored = orjson.loads(got.body)
    data = orjson.dumps(SECRET)
    assert SECRET.encode() not in got.body
    assert stored == {"id": "g1", "MAX_TOKENS": 5, "parameters": {"stream": True},
                      MARK: {"PROMPT": f"hmac-sha256:{_hmac(data)};size={len(data)}"}}  # fmt: skip
    assert got.inputs is not None and [(t.name, t.size, t.hmac_sha256) for t in got.inputs] == [
        ("PROMPT", len(data), _hmac(data))]  # fmt: skip


@pytest.mark.parametrize(("path", "field", "value"), [
    ("/v1/completions", "prompt", SECRET),
    ("/v1/chat/completions", "messages", [{"role": "user", "content": SECRET}]),
])  # fmt: skip
def test_openai_top_level_field_cut_model_and_stream_kept(path: str, field: str, value: Any) -> None:
    """OpenAI-compatible requests: the named field (the prompt or the messages) is cut like a generate
    field; ``model`` and ``stream``, which the offline tools read, stay."""
    body = orjson.dumps({"model": "llm", field: value, "stream": True, "max_tokens": 4})
    got = _redacted(redact_http_request(f"POST {path}", [], body, frozenset({field}), KEY))
    data = orjson.dumps(value)
    assert SECRET.encode() not in got.body
    assert orjson.loads(got.body) == {"model": "llm", "stream": True, "max_tokens": 4,
                                      MARK: {field: f"hmac-sha256:{_hmac(data)};size={len(data)}"}}  # fmt: skip


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_body_redacted_and_compressed_again(encoding: str) -> None:
    plain = orjson.dumps({"inputs": [{"name": "PROMPT", "shape": [1], "datatype": "BYTES", "data": [SECRET]}]})
    body = gzip.compress(plain) if encoding == "gzip" else zlib.compress(plain)
    got = _redacted(redact_http_request(INFER, [("Content-Encoding", encoding)], body, NAMES, KEY))
    stored = gzip.decompress(got.body) if encoding == "gzip" else zlib.decompress(got.body)
    assert SECRET.encode() not in stored and MARK.encode() in stored
    assert got.inputs is not None and got.inputs[0].hmac_sha256 == _hmac(orjson.dumps([SECRET]))


def test_raw_deflate_body_read_and_stored_as_zlib_deflate() -> None:
    plain = orjson.dumps({"PROMPT": SECRET})
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    body = c.compress(plain) + c.flush()
    got = _redacted(redact_http_request("POST /v2/models/m/generate", [("content-encoding", "deflate")], body,
                                        NAMES, KEY))  # fmt: skip
    assert SECRET.encode() not in zlib.decompress(got.body)


@pytest.mark.parametrize(("headers", "body", "why"), [
    ([("Content-Encoding", "br")], b"\x0b\x00", "'br'"),
    ([("Content-Encoding", "gzip")], b"not gzip at all", "does not decompress"),
    ([("Content-Encoding", "gzip")], gzip.compress(orjson.dumps({"PROMPT": SECRET}), mtime=0)[:-12], "cut short"),
    ([], b'{"inputs": [', "not JSON"),
    ([], b"[1, 2]", "not a JSON object"),
    ([("Inference-Header-Content-Length", "x")], b"{}", "not a number"),
    ([("Inference-Header-Content-Length", "99")], b"{}", "shorter than"),
    (*_binary({"inputs": [{"name": "PROMPT", "parameters": {"binary_data_size": 4}}]}, b"abcdefgh"), "add up"),
    (*_binary({"inputs": [{"name": "PROMPT", "parameters": {"binary_data_size": 9}}]}, b"abcdefgh"), "beyond"),
    ([], b'{"inputs": [{"shape": [1]}]}', "without a name"),
])  # fmt: skip
def test_what_cannot_be_proven_is_withheld(headers: list[tuple[str, str]], body: bytes, why: str) -> None:
    method = "POST /v2/models/m/generate" if b"PROMPT" in body and b"inputs" not in body else INFER
    got = redact_http_request(method, headers, body, NAMES, KEY)
    assert isinstance(got, Withheld) and got.why.startswith("payload withheld: cannot redact") and why in got.why


def test_nothing_named_or_not_inference_comes_back_unchanged() -> None:
    body = orjson.dumps({"inputs": [{"name": "OTHER", "shape": [1], "datatype": "INT32", "data": [1]}]})
    got = _redacted(redact_http_request(INFER, [], body, NAMES, KEY))
    assert got.body is body and got.inputs is None
    load = b'{"parameters": {"PROMPT": "x"}}'
    assert _redacted(redact_http_request("POST /v2/repository/models/m/load", [], load, NAMES, KEY)).body is load
    assert _redacted(redact_http_request(INFER, [], b"", NAMES, KEY)).body == b""


def test_equal_values_equal_hashes_across_json_and_generate() -> None:
    a = _redacted(redact_http_request("POST /v2/models/t/generate", [], orjson.dumps({"PROMPT": SECRET}), NAMES, KEY))
    b = _redacted(redact_http_request("POST /v2/models/t/generate_stream", [], orjson.dumps({"PROMPT": SECRET}),
                                      NAMES, KEY))  # fmt: skip
    c = _redacted(redact_http_request("POST /v2/models/t/generate", [], orjson.dumps({"PROMPT": "other"}), NAMES, KEY))
    assert a.inputs and b.inputs and c.inputs
    assert a.inputs[0].hmac_sha256 == b.inputs[0].hmac_sha256 != c.inputs[0].hmac_sha256

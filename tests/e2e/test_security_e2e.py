"""TLS listening and input redaction in front of the real tritonserver, with the real tritonclient."""

from __future__ import annotations

import hashlib
import hmac
import queue
from pathlib import Path
from typing import Any

import tritonclient.grpc as grpcclient

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer
from tests.support.capture import calls_by_method, of_kind, records, stored_payload
from tests.support.tls import make_pki
from tests.support.triton_client import describe, token_inputs

PROMPT = "confidential-prompt-4711"


def _run_stream(client: grpcclient.InferenceServerClient, rid: str) -> list[tuple[Any, ...]]:
    q: queue.Queue[tuple[Any, ...]] = queue.Queue()
    client.start_stream(callback=lambda result, error: q.put(describe(result, error)))
    client.async_stream_infer("tokens", token_inputs(PROMPT, 3, 1), request_id=rid, enable_empty_final_response=True)
    out = []
    while not out or (out[-1][0] != "error" and out[-1][2] is not True):
        out.append(q.get(timeout=60))
    client.stop_stream()
    client.close()
    return out


def test_tls_listen_in_front_of_real_tritonserver(triton: TritonServer, tmp_path: Path) -> None:
    """tritonclient ssl=True -> proxy (TLS, ALPN h2) -> tritonserver (h2c): the same stream as direct, recorded."""
    pki = make_pki(tmp_path / "pki")
    direct = _run_stream(grpcclient.InferenceServerClient(triton.grpc_url), "direct")
    with ProxyThread(
        triton.grpc_url, tmp_path / "cap", payload="meta", tls_cert=pki.server_cert, tls_key=pki.server_key
    ) as proxy:
        client = grpcclient.InferenceServerClient(proxy.url, ssl=True, root_certificates=str(pki.ca))
        via = _run_stream(client, "direct")
    assert via == direct and len(via) == 4 and via[-1][2] is True
    recs = records(proxy.capture_path)
    assert recs[0]["options"]["tls_listen"] is True
    (call,) = calls_by_method(recs, "ModelStreamInfer")
    (end,) = of_kind(recs, "call_end", call)
    assert end["cause"] == "ok"


def test_redacted_prompt_never_stored_but_matchable(triton: TritonServer, tmp_path: Path) -> None:
    """--payload full --redact-input PROMPT against tokens: requests hold no prompt; HMAC(salt, data) is recorded.

    (tokens echoes the prompt in its TEXT outputs; outputs are not redacted, so only requests are searched.)
    """
    with ProxyThread(
        triton.grpc_url, tmp_path / "cap", payload="full", redact_inputs=("PROMPT",), redact_salt="s3"
    ) as proxy:
        got = _run_stream(grpcclient.InferenceServerClient(proxy.url), "red")
    assert [e[3] for e in got[:3]] == [(f"{PROMPT}-{i}",) for i in range(3)]  # Triton got the real prompt
    recs = records(proxy.capture_path)
    (call,) = calls_by_method(recs, "ModelStreamInfer")
    (req,) = [m for m in of_kind(recs, "message", call) if m["dir"] == "c2s"]
    assert PROMPT.encode() not in stored_payload(proxy.capture_path, req) and PROMPT not in str(req)
    spec = {t["name"]: t for t in req["inputs"]}
    data = len(PROMPT).to_bytes(4, "little") + PROMPT.encode()
    assert spec["PROMPT"]["size"] == len(data) and spec["PROMPT"]["shape"] == [1]
    assert spec["PROMPT"]["hmac_sha256"] == hmac.new(b"s3", data, hashlib.sha256).hexdigest()
    assert spec["MAX_TOKENS"]["hmac_sha256"] is None

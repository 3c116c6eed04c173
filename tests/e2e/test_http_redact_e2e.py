"""``record --payload full --redact-input`` on Triton's HTTP port, against the real CPU tritonserver with
clients nobody here wrote: tritonclient.http (binary data off and on) and httpx on ``generate_stream``.
The capture holds no byte of the redacted input, keeps its shape, datatype, size and keyed hash, and
``replay check`` reads it clean.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import orjson

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer
from tests.support.capture import of_kind, read_bytes, records, side_bytes, stored_payload
from tests.support.triton_client import http_client

PROMPT = "confidential-prompt-8086"
SALT = "s4"


def _mac(data: bytes) -> str:
    return hmac.new(SALT.encode(), data, hashlib.sha256).hexdigest()


def test_http_bodies_redacted_json_binary_and_generate_stream(triton: TritonServer, tmp_path: Path) -> None:
    import tritonclient.http as httpclient

    with ProxyThread(triton.grpc_url, tmp_path / "cap", payload="full", redact_inputs=("PROMPT",), redact_salt=SALT,
                     http_listen="127.0.0.1:0", http_upstream=triton.http_url.removeprefix("http://")) as proxy:  # fmt: skip
        url = f"127.0.0.1:{proxy.proxy.http_port}"
        with http_client(url) as c:
            for binary in (False, True):
                prompt = httpclient.InferInput("PROMPT", [1], "BYTES")
                prompt.set_data_from_numpy(np.array([PROMPT.encode()], dtype=np.object_), binary_data=binary)
                steps = httpclient.InferInput("MAX_TOKENS", [1], "INT32")
                steps.set_data_from_numpy(np.array([3], dtype=np.int32), binary_data=binary)
                r = c.infer("steps_unary", [prompt, steps], request_id=f"bin-{binary}")
                assert r.as_numpy("TEXT")[0] == f"{PROMPT}-3".encode()  # Triton got the real prompt
        # A decoupled model that sends no text back, so nothing in the capture may hold the prompt.
        with httpx.stream("POST", f"http://{url}/v2/models/silent/generate_stream", timeout=60,
                          json={"id": "gs-1", "PROMPT": PROMPT, "DELAY_MS": 10}) as resp:  # fmt: skip
            assert resp.status_code == 200
            resp.read()
    path = proxy.capture_path
    recs = records(path)
    requests = {m["request_id"]: m for m in of_kind(recs, "message") if m["dir"] == "c2s"}
    assert set(requests) == {"bin-False", "bin-True", "gs-1"}
    for m in requests.values():
        stored = stored_payload(path, m)
        assert m["decode_error"] is None and not m["payload_truncated"] and PROMPT.encode() not in stored
        assert m["payload_sha256"] == hashlib.sha256(stored).hexdigest()
        assert PROMPT not in json.dumps(m)
    # The hash is over the tensor's bytes as sent: JSON data as compact JSON, binary data raw.
    as_sent = {"bin-False": orjson.dumps([PROMPT]), "bin-True": len(PROMPT).to_bytes(4, "little") + PROMPT.encode(),
               "gs-1": orjson.dumps(PROMPT)}  # fmt: skip
    for rid, data in as_sent.items():
        spec = {t["name"]: t for t in requests[rid]["inputs"]}["PROMPT"]
        assert (spec["size"], spec["hmac_sha256"]) == (len(data), _mac(data))
        if rid != "gs-1":
            assert (spec["datatype"], spec["shape"]) == ("BYTES", [1])
            other = {t["name"]: t for t in requests[rid]["inputs"]}["MAX_TOKENS"]
            assert other["hmac_sha256"] is None and other["datatype"] == "INT32"
    # The unredacted input stays usable: MAX_TOKENS's 3 in JSON, its 4 raw bytes after the JSON part.
    assert b'"data":[3]' in stored_payload(path, requests["bin-False"])
    assert stored_payload(path, requests["bin-True"]).endswith((3).to_bytes(4, "little"))
    # steps_unary echoes the prompt in its reply (outputs are not redacted); the stream's capture is clean.
    silent = [r["call"] for r in of_kind(recs, "call_start") if r["method"].endswith("silent/generate_stream")]
    lines = [json.dumps(r) for r in recs if r.get("call") in silent]
    assert lines and not any(PROMPT in line for line in lines)
    # The file and its side file as written, and every stored body decoded: the prompt is only in the
    # two steps_unary replies' TEXT (base64 in their lines).
    assert PROMPT.encode() not in read_bytes(path) + side_bytes(path)
    replies = [stored_payload(path, m) for m in of_kind(recs, "message") if m["dir"] == "s2c" and m["size"]]
    assert sum(PROMPT.encode() in r for r in replies) == 2
    check = subprocess.run([sys.executable, "-m", "replay", "check", str(path)], capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert "0 violation(s)" in check.stdout
    # `replay send` refuses a redacted HTTP request as it does a gRPC one: its data is not in the capture.
    send = subprocess.run([sys.executable, "-c", "import sys; from proxy.cli import main; sys.exit(main(sys.argv[1:]))",
                           "replay", "send", str(path), "--http-target",
                           triton.http_url.removeprefix("http://"), "--out", str(tmp_path / "sent")],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert send.returncode == 2 and "3 with an input removed by --redact-input" in send.stderr, send.stderr
    assert not (tmp_path / "sent").exists()

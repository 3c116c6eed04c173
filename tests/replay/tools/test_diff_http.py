"""`diff` on HTTP and mixed gRPC + HTTP captures: HTTP requests paired and compared; never paired across protocols.

The captures are tests/data/http's goldens and ones built by the golden Builder from the real Triton 2.51
exchanges of tests/proxy/triton/data/http.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from replay.cli.main import main
from replay.tools.captured import match_kind, summarize
from replay.tools.diff import diff
from tests.data.make_golden import STREAM, Builder
from tests.proxy.triton.http_wire import Exchange, exchanges
from tests.support.paths import DATA

HTTP = DATA / "http"


def test_a_mixed_capture_against_itself_is_equivalent_with_every_request_paired() -> None:
    s = summarize(HTTP / "mixed.jsonl")
    assert [c.key.kind for c in s.http_candidates] == ["http infer", "http generate_stream"]
    assert [c.key.kind for c in s.candidates] == ["stream"]
    result = diff(s, summarize(HTTP / "mixed.jsonl"))
    assert len(result.pairs) == 3 and not result.only_a and not result.only_b
    assert result.equivalent
    assert {(p.a.call, p.b.call, p.by) for p in result.pairs} == {("c1.1", "c1.1", "id"), ("c2.1", "c2.1", "id"),
                                                                  ("c2.2", "c2.2", "id")}  # fmt: skip


def test_an_http_request_changed_from_completed_to_cancelled_is_a_change() -> None:
    result = diff(summarize(HTTP / "generate_stream_completed.jsonl"), summarize(HTTP / "generate_stream_cancelled.jsonl"))
    # Different ids (gs-1, 04a-mid): paired in capture order, and every difference named.
    (pair,) = result.pairs
    assert pair.by == "order"
    changed = {c.field: (c.a, c.b) for c in pair.changes}
    assert changed["outcome"] == ("completed", "disconnected")
    assert changed["final"] == (True, False)
    assert changed["cause"] == ("ok", "client_disconnect")
    assert not result.equivalent


def test_an_error_under_200_is_a_change_from_completed() -> None:
    a = Builder().start(grpc=False, http=True)
    a.http_exchange("c1.1", exchanges("03e_generate_nonstreaming")[1])  # one response: 200, completed
    b = Builder().start(grpc=False, http=True)
    b.http_exchange("c1.1", exchanges("03e_generate_nonstreaming")[0])  # two responses: 200 with an error JSON
    result = diff(summarize(a.finish().records), summarize(b.finish().records))
    (pair,) = result.pairs
    changed = {c.field: (c.a, c.b) for c in pair.changes}
    assert changed["outcome"] == ("completed", "error")
    assert "status" not in changed  # both 200: the error is in the body


def test_a_grpc_request_never_pairs_with_an_http_one() -> None:
    """Same model, same id, both completed: still only in A and only in B (the client saw different protocols)."""
    a = Builder().start()
    a.call("c1.1", STREAM)
    a.request("c1.1", "gs-1")
    a.response("c1.1", "gs-1", "hi-0", final=True)
    a.end("c1.1")
    result = diff(summarize(a.finish().records), summarize(HTTP / "generate_stream_completed.jsonl"))
    assert result.pairs == ()
    assert [r.request_id for r in result.only_a] == ["gs-1"]
    assert [r.request_id for r in result.only_b] == ["gs-1"]
    assert not result.equivalent


def test_match_kinds_keep_endpoints_apart() -> None:
    assert match_kind("/inference.GRPCInferenceService/ModelStreamInfer") == "stream"
    assert match_kind("/inference.GRPCInferenceService/ModelInfer") == "unary"
    assert match_kind("POST /v2/models/m/generate_stream") == "http generate_stream"
    assert match_kind("POST /v2/models/m/versions/2/infer") == "http infer"
    assert match_kind("POST /v1/chat/completions") == "http openai_chat"
    assert match_kind("GET /v2/health/ready") is None
    assert match_kind("/inference.GRPCInferenceService/ServerLive") is None


def test_http_health_calls_are_counted_by_method_and_status() -> None:
    xs = exchanges("05a_health_metadata")
    a = Builder().start(grpc=False, http=True)
    a.http_exchange("c1.1", xs[0])
    b = Builder().start(grpc=False, http=True)
    b.http_exchange("c1.1", xs[0])
    b.http_exchange("c1.2", xs[6])  # GET /v2/models/nosuch: 404
    result = diff(summarize(a.finish().records), summarize(b.finish().records))
    assert {c.field: (c.a, c.b) for c in result.calls} == {"GET /v2/models/nosuch 404": (0, 1)}



def _rerun(x: Exchange, rid: str) -> Exchange:
    """``x`` as another run of its client sends it: another ``"id"``, written last (the JSON's key order is no
    input either), the rest of the body (binary tensors included) and the reply unchanged."""
    head, end = json.JSONDecoder().raw_decode(x.body.decode("latin-1"))  # latin-1: one char per byte
    text = json.dumps({**{k: v for k, v in head.items() if k != "id"}, "id": rid}, separators=(",", ":")).encode()
    body = text + x.body[end:]
    sizes = {b"content-length": len(body), b"inference-header-content-length": len(text)}
    headers = [(k, b"%d" % sizes[k] if k in sizes else v) for k, v in x.headers]
    return dataclasses.replace(x, body=body, headers=headers)


def _binary_infer(tensor: bytes) -> Exchange:
    """The real binary-data infer exchange with other tensor bytes: only what follows the JSON part differs."""
    x = exchanges("01_unary_infer_tritonclient")[1]
    assert x.body.endswith(b"\x00\x01\x02\x03\x04") and len(tensor) == 5
    return dataclasses.replace(x, body=x.body[:-5] + tensor)


def _http_capture(*xs: Exchange) -> Builder:
    b = Builder(payload="full").start(grpc=False, http=True)
    for i, x in enumerate(xs):
        b.http_exchange(f"c1.{i + 1}", x)
    return b.finish()


def test_match_payload_pairs_http_requests_by_their_bodies_across_new_ids_and_another_order() -> None:
    """B re-sends A's requests under new ids in the reverse order: --match payload pairs each with the A request
    of the same inputs (JSON data; a binary-data body's tensor bytes), whatever the id and the JSON key order."""
    two, one = exchanges("03e_generate_nonstreaming")[:2]  # MAX_TOKENS 2 and 1: the inputs differ
    json_infer = exchanges("01_unary_infer_tritonclient")[0]
    low, high = _binary_infer(b"\x00\x01\x02\x03\x04"), _binary_infer(b"\x05\x06\x07\x08\x09")  # same JSON part
    a = _http_capture(two, one, json_infer, low, high)
    b = _http_capture(*(_rerun(x, f"run2-{i}") for i, x in enumerate([high, low, json_infer, one, two])))
    result = diff(summarize(a.records), summarize(b.records), strategies=["payload"])
    assert not result.only_a and not result.only_b
    assert {(p.a.call, p.b.call, p.by) for p in result.pairs} == {
        ("c1.1", "c1.5", "payload"), ("c1.2", "c1.4", "payload"), ("c1.3", "c1.3", "payload"),
        ("c1.4", "c1.2", "payload"), ("c1.5", "c1.1", "payload"),
    }  # fmt: skip
    assert result.equivalent  # each pair is the same request with the same captured reply


def test_match_payload_alone_on_http_captures_without_bytes_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """A meta capture of HTTP requests holds no body to hash: --match payload alone could pair nothing (exit 2)."""
    code = main(["diff", "--match", "payload", str(HTTP / "unary_json.jsonl"), str(HTTP / "unary_json.jsonl")])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1 and "holds no request payload bytes" in err


def test_match_payload_on_mixed_grpc_and_http_captures_pairs_each_protocol_by_its_inputs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:  # fmt: skip
    """One capture of gRPC stream requests and HTTP generate requests, re-run with new ids in another order:
    ``diff --match payload`` pairs every request with its own (gRPC by the ModelInferRequest's inputs, HTTP by
    the body's), never across protocols."""
    two, one = exchanges("03e_generate_nonstreaming")[:2]

    def capture(order: list[str], prefix: str) -> Path:
        b = Builder(payload="full").start(grpc=True, http=True)
        b.call("c1.1")
        for n, what in enumerate(order):
            if what.startswith("grpc"):
                b.request("c1.1", f"{prefix}{n}", prompt=what)
                b.response("c1.1", f"{prefix}{n}", None, final=True)
            else:
                x = _rerun(two if what == "http-two" else one, f"{prefix}{n}")
                b.http_exchange(f"c2.{n}", x)
        b.half_close("c1.1")
        b.end("c1.1")
        path = tmp_path / f"{prefix}.jsonl"
        path.write_bytes(b.finish().render())
        return path

    a = capture(["grpc-a", "http-two", "grpc-b", "http-one"], "a")
    b = capture(["http-one", "grpc-b", "http-two", "grpc-a"], "b")
    code = main(["diff", "--json", "--match", "payload", str(a), str(b)])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["only_a"], doc["only_b"]) == (0, [], [])
    pairs = {(r["a"]["request_id"], r["b"]["request_id"], r["matched_by"]) for r in doc["requests"]}
    # a0/b3: grpc-a; a1/b2: http-two; a2/b1: grpc-b; a3/b0: http-one
    assert pairs == {("a0", "b3", "payload"), ("a1", "b2", "payload"), ("a2", "b1", "payload"),
                     ("a3", "b0", "payload")}  # fmt: skip

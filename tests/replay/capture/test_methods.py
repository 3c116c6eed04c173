"""The one rule for what a call's method is: gRPC paths and HTTP request lines, their kinds and short names."""

from __future__ import annotations

import pytest

from replay.capture import methods as m


@pytest.mark.parametrize(
    ("method", "kind", "model", "version", "short", "inference", "streaming"),
    [
        ("POST /v2/models/echo/infer", "infer", "echo", "", "HTTP infer", True, False),
        ("POST /v2/models/echo/versions/2/infer", "infer", "echo", "2", "HTTP infer", True, False),
        ("POST /v2/models/tokens/generate", "generate", "tokens", "", "HTTP generate", True, False),
        ("POST /v2/models/tokens/generate_stream", "generate_stream", "tokens", "", "HTTP generate_stream", True, True),
        # as written: Triton does not percent-decode a model name (tritonserver 2.51 answers
        # `/v2/models/pct%41/infer` as model "pct%41", and refuses `sp%20ace` as unknown model 'sp%20ace')
        ("POST /v2/models/a%2Fb/versions/1/generate_stream?x=1", "generate_stream", "a%2Fb", "1",
         "HTTP generate_stream", True, True),
        ("POST /v2/models/pct%41/versions/%31/infer", "infer", "pct%41", "%31", "HTTP infer", True, False),
        ("POST /v2/models/sp%20ace/infer", "infer", "sp%20ace", "", "HTTP infer", True, False),
        ("POST /v1/completions", "openai_completions", None, None, "OpenAI completions", True, None),
        ("POST /v1/chat/completions", "openai_chat", None, None, "OpenAI chat/completions", True, None),
        ("GET /v2/health/ready", "other", None, None, "GET /v2/health/ready", False, False),
        ("GET /v2/models/echo/config?x=1", "other", "echo", "", "GET /v2/models/echo/config", False, False),
        ("GET /v2/models/echo", "other", "echo", "", "GET /v2/models/echo", False, False),
        ("GET /v2/models/echo/infer", "other", "echo", "", "GET /v2/models/echo/infer", False, False),
        ("POST /v2/repository/index", "other", None, None, "POST /v2/repository/index", False, False),
        ("HEAD /v2/health/ready", "other", None, None, "HEAD /v2/health/ready", False, False),
        ("GET /v1/completions", "other", None, None, "GET /v1/completions", False, False),
    ],
)  # fmt: skip
def test_http_calls(method: str, kind: str, model: str | None, version: str | None, short: str, inference: bool,
                    streaming: bool | None) -> None:  # fmt: skip
    call = m.http_call(method)
    assert call is not None
    assert (call.kind, call.model, call.version) == (kind, model, version)
    assert m.protocol(method) == "http"
    assert m.http_kind(method) == kind
    assert m.short_method(method) == short
    assert m.is_inference(method) is inference
    assert m.streaming(method) is streaming


@pytest.mark.parametrize(
    ("method", "short", "inference", "streaming"),
    [
        (m.STREAM_INFER, "ModelStreamInfer", True, True),
        (m.INFER, "ModelInfer", True, False),
        ("/inference.GRPCInferenceService/ServerLive", "ServerLive", False, False),
        ("/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Check", False, False),
    ],
)
def test_grpc_methods(method: str, short: str, inference: bool, streaming: bool) -> None:
    assert m.protocol(method) == "grpc"
    assert m.http_call(method) is None and m.http_kind(method) is None
    assert m.short_method(method) == short
    assert m.is_inference(method) is inference
    assert m.streaming(method) is streaming
    if method.startswith(m.PREFIX):
        assert m.path_of(short) == method


def test_target_kept_whole() -> None:
    """The call keeps the target as sent; the path is without its query."""
    call = m.http_call("POST /v2/models/m/infer?trace=1")
    assert call is not None and (call.verb, call.target, call.path) == ("POST", "/v2/models/m/infer?trace=1",
                                                                         "/v2/models/m/infer")  # fmt: skip


@pytest.mark.parametrize("method", ["", "POST", "POST ", " /x", "m"])
def test_not_a_request_line(method: str) -> None:
    assert m.http_call(method) is None

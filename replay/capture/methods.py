"""The gRPC method paths a capture names, and the one rule for their short names.

A capture records the full path (``call_start.method``); people read the short one. One rule for
every output (``check --json``, metrics, the report, ``serve``'s log): a method of Triton's own
service is shown by its name alone (``ModelInfer``), any other path stays whole
(``/grpc.health.v1.Health/Check``), so two services' ``Check`` never look the same.
"""

from __future__ import annotations

#: Triton's gRPC service, as grpc names it (``grpc.method_handlers_generic_handler``).
SERVICE = "inference.GRPCInferenceService"
#: The prefix of every method path of :data:`SERVICE`.
PREFIX = f"/{SERVICE}/"
STREAM_INFER = PREFIX + "ModelStreamInfer"
INFER = PREFIX + "ModelInfer"
#: The two methods that carry inference requests (what the request machine tracks).
INFERENCE = frozenset({STREAM_INFER, INFER})


def short_method(method: str) -> str:
    """``/inference.GRPCInferenceService/ModelInfer`` -> ``ModelInfer``; other services stay whole."""
    return method.removeprefix(PREFIX)


def path_of(name: str) -> str:
    """``ModelInfer`` -> ``/inference.GRPCInferenceService/ModelInfer`` (the inverse of :func:`short_method`)."""
    return PREFIX + name

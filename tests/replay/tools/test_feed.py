"""Feeding captured streams into client code exactly as tritonclient.grpc (sync and aio) delivers them."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc._infer_stream import _InferStream
from tritonclient.grpc._utils import get_cancelled_error

from replay import feed_stream, feed_stream_aio, read_capture
from replay.capture import events as ev
from replay.errors import UserError
from replay.tools import feed as feed_mod
from replay.tools.feed import DataNotCaptured, EndNotCaptured, stream_calls, terminal_error
from tests.support.paths import DATA
from tests.support.user_client import TextAssembler

# What gRPC reports to a tritonclient whose stream ended by each cause, when the capture has no details.
_GRPC_DETAILS = {"client_cancel": "Locally cancelled by application!", "deadline": "Deadline Exceeded"}


def _fed(name: str, **kw: Any) -> dict[str, Any]:
    client = TextAssembler()
    feed_stream(DATA / name, client, **kw)
    return client.state()


def test_user_client_assembles_text_per_request_from_interleaved_responses() -> None:
    """Interleaved responses reach the client in capture order and assemble per request id."""
    assert _fed("interleaved.jsonl") == {
        "text": {"a": "a-0a-1a-2", "b": "b-0b-1"},
        "responses": {"a": 4, "b": 3},
        "done": ["a", "b"],
        "errors": [],
        "stream_error": None,
    }


def test_user_client_sees_texts_then_the_in_band_error_without_final() -> None:
    """The error+final response arrives as error only (tritonclient drops its infer_response and final flag)."""
    state = _fed("error_midstream.jsonl")
    assert state["text"] == {"f1": "f-0f-1"}
    assert state["errors"] == ["fail_midstream: backend failure after 2 responses"]
    assert (state["done"], state["stream_error"]) == ([], None)


def test_user_client_sees_the_local_cancel_as_a_cancelled_error() -> None:
    """A stream-wide cancel ends with CANCELLED 'Locally cancelled by application!' after the delivered responses."""
    state = _fed("stream_cancel.jsonl")
    assert state["text"] == {"done": "d-0", "a": "a-0a-1"}
    assert state["done"] == ["done"]
    assert state["stream_error"] == ("StatusCode.CANCELLED", "Locally cancelled by application!")


def test_empty_final_only_completes_without_text() -> None:
    """`silent`: one empty final response, no text."""
    assert _fed("no_text.jsonl")["done"] == ["quiet"]
    assert _fed("no_text.jsonl")["text"] == {}


@pytest.mark.parametrize(
    ("name", "status", "message"),
    [
        ("deadline.jsonl", "StatusCode.DEADLINE_EXCEEDED", "Deadline Exceeded"),
        ("upstream_disconnect.jsonl", "StatusCode.UNAVAILABLE", "triton-tap: upstream connection lost"),
        ("proxy_shutdown.jsonl", "StatusCode.UNAVAILABLE", "triton-tap: proxy shutting down"),
        ("client_disconnect.jsonl", "StatusCode.CANCELLED", "Locally cancelled by application!"),
    ],
)
def test_terminal_status_is_the_last_callback(name: str, status: str, message: str) -> None:
    """A non-OK end is one last callback(result=None, error=...) with the status tritonclient reports."""
    calls: list[tuple[Any, Any]] = []
    feed_stream(DATA / name, lambda result=None, error=None: calls.append((result, error)))
    result, error = calls[-1]
    assert result is None
    assert (error.status(), error.message()) == (status, message)
    assert all(e is None for _, e in calls[:-1])


def test_meta_capture_results_have_names_and_flags_but_no_data() -> None:
    """With --payload meta the result is a real InferResult with id/final/output names; as_numpy refuses to invent data."""
    results: list[Any] = []
    feed_stream(DATA / "one_response.jsonl", lambda result=None, error=None: results.append(result))
    (result,) = results
    r = result.get_response()
    assert (r.id, r.model_name, r.parameters["triton_final_response"].bool_param) == ("r1", "tokens", True)
    assert [o.name for o in r.outputs] == ["TEXT"]
    with pytest.raises(DataNotCaptured, match="--payload meta"):
        result.as_numpy("TEXT")
    assert result.as_numpy("OTHER") is None


def test_call_selection_and_clear_errors() -> None:
    """call= picks a stream; no stream, an unknown id or a unary id is a one-line UserError."""
    assert stream_calls(DATA / "restart_after_cancel.jsonl") == ["c1.1", "c1.3"]
    seen: list[tuple[str, bool, Any]] = []

    def client(result: Any = None, error: Any = None) -> None:
        r = result.get_response()
        seen.append((r.id, r.parameters["triton_final_response"].bool_param, error))

    feed_stream(DATA / "restart_after_cancel.jsonl", client, call="c1.3")
    assert seen == [("job-1", False, None), ("job-1", True, None)]
    with pytest.raises(UserError, match="no ModelStreamInfer call"):
        feed_stream(DATA / "unary.jsonl", client)
    with pytest.raises(UserError, match="not a ModelStreamInfer call"):
        feed_stream(DATA / "unary.jsonl", client, call="c1.3")
    with pytest.raises(UserError, match=r"'c9\.9' is not in the capture \(stream calls: c1\.1, c1\.3\)"):
        feed_stream(DATA / "restart_after_cancel.jsonl", client, call="c9.9")


def test_records_are_accepted_instead_of_paths() -> None:
    """feed_stream takes an iterable of records (with or without seq) as well as paths."""
    records = [r for _, r in read_capture(DATA / "many_responses.jsonl")]
    client = TextAssembler()
    feed_stream(records, client)
    assert client.state()["text"] == {"r1": "hi-0hi-1hi-2hi-3hi-4"}


class _Clock:
    """A fake monotonic clock whose sleep advances it (pacing tests without real waiting)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


def test_pacing_follows_captured_timing_scaled_by_speed(monkeypatch: pytest.MonkeyPatch) -> None:
    """speed=2 waits half the captured gaps (from the call's start); speed=None never sleeps."""
    clock = _Clock()
    monkeypatch.setattr(feed_mod, "time", clock)
    feed_stream(DATA / "deadline.jsonl", lambda result=None, error=None: None, speed=2.0)
    # deadline.jsonl: request 1 ms after the call, responses +200 ms, +200 ms, cancel +99 ms, end +0.
    assert clock.sleeps == [0.1005, 0.1, 0.0495]
    clock.sleeps.clear()
    feed_stream(DATA / "deadline.jsonl", lambda result=None, error=None: None)
    assert clock.sleeps == []
    with pytest.raises(ValueError, match="speed must be > 0"):
        feed_stream(DATA / "deadline.jsonl", lambda result=None, error=None: None, speed=0)


def _aio_collect(name: str, **kw: Any) -> tuple[list[tuple[Any, Any]], BaseException | None]:
    async def run() -> tuple[list[tuple[Any, Any]], BaseException | None]:
        pairs: list[tuple[Any, Any]] = []
        try:
            async for pair in feed_stream_aio(DATA / name, **kw):
                pairs.append(pair)
        except (grpc.aio.AioRpcError, asyncio.CancelledError) as e:
            return pairs, e
        return pairs, None

    return asyncio.run(run())


def test_aio_yields_pairs_and_stops_on_ok() -> None:
    """The aio style yields (result, error) per response and simply stops after an OK end."""
    pairs, ended = _aio_collect("interleaved.jsonl")
    assert ended is None
    assert [(r.get_response().id, e) for r, e in pairs] == [
        ("a", None), ("b", None), ("a", None), ("b", None), ("b", None), ("a", None), ("a", None),
    ]  # fmt: skip
    pairs, ended = _aio_collect("error_midstream.jsonl")
    assert ended is None
    assert pairs[-1][0] is None and pairs[-1][1].message().startswith("fail_midstream")


def test_aio_raises_the_terminal_status_like_grpc_aio() -> None:
    """Non-OK ends raise AioRpcError (code, details); the client's own cancel raises CancelledError."""
    pairs, ended = _aio_collect("deadline.jsonl", speed=1000.0)
    assert len(pairs) == 2
    assert isinstance(ended, grpc.aio.AioRpcError)
    assert (ended.code(), ended.details()) == (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
    _, ended = _aio_collect("upstream_disconnect.jsonl")
    assert isinstance(ended, grpc.aio.AioRpcError)
    assert (ended.code(), ended.details()) == (grpc.StatusCode.UNAVAILABLE, "triton-tap: upstream connection lost")
    assert ended.initial_metadata() == grpc.aio.Metadata()
    pairs, ended = _aio_collect("stream_cancel.jsonl")
    assert len(pairs) == 4
    assert isinstance(ended, asyncio.CancelledError)


# -- equivalence with tritonclient's own stream reader ---------------------------------------------


class _RpcError(grpc.RpcError):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def debug_error_string(self) -> str:
        return "debug"


class _ResponseIterator:
    """What grpc hands tritonclient: the decoded responses, then the RpcError of a non-OK end."""

    def __init__(self, name: str) -> None:
        self.messages: list[Any] = []
        self.end: _RpcError | None = None
        for _, r in read_capture(DATA / name):
            if isinstance(r, ev.MessageSeen) and r.dir == "s2c":
                assert r.payload is not None
                self.messages.append(pb.ModelStreamInferResponse.FromString(base64.b64decode(r.payload)))
            elif isinstance(r, ev.CallEnded) and r.status != "OK":
                details = r.details if r.details is not None else _GRPC_DETAILS[r.cause]
                self.end = _RpcError(grpc.StatusCode[r.status], details)

    def __iter__(self) -> Iterator[Any]:
        yield from self.messages
        if self.end is not None:
            raise self.end

    def is_active(self) -> bool:
        return False

    def cancel(self) -> None:
        """Called by _InferStream.__del__; nothing to cancel here."""


def _normal(calls: list[tuple[Any, Any]]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for result, error in calls:
        res = None if result is None else (type(result).__name__, result.get_response().SerializeToString())
        err = None if error is None else (type(error).__name__, str(error), error.status(), error.message())
        out.append((res, err))
    return out


@pytest.mark.parametrize(
    "name",
    ["many_responses.jsonl", "interleaved.jsonl", "error_midstream.jsonl", "stream_cancel.jsonl", "no_text.jsonl"],
)
def test_callbacks_equal_what_tritonclients_own_stream_reader_produces(name: str) -> None:
    """feed_stream's callbacks equal tritonclient._InferStream._process_response's on the same wire messages."""
    theirs: list[tuple[Any, Any]] = []
    stream = _InferStream(lambda result=None, error=None: theirs.append((result, error)), verbose=False)
    stream._response_iterator = _ResponseIterator(name)
    stream._process_response()
    stream._handler = None
    ours: list[tuple[Any, Any]] = []
    feed_stream(DATA / name, lambda result=None, error=None: ours.append((result, error)))
    assert _normal(ours) == _normal(theirs)


def test_terminal_cancel_error_matches_tritonclients_helper() -> None:
    """A client cancel without details is exactly tritonclient's get_cancelled_error()."""
    mine, theirs = terminal_error("CANCELLED", None), get_cancelled_error(None)
    assert mine is not None
    assert (str(mine), mine.status(), mine.message()) == (str(theirs), theirs.status(), theirs.message())
    assert terminal_error("OK", None) is None


def test_a_call_whose_end_the_capture_lacks_raises_after_its_responses() -> None:
    """The capture ends with the stream open (the proxy was killed, or its end is in another file): both styles
    deliver the captured responses, then raise EndNotCaptured, where an OK end would end quietly; a captured
    cancel with its call_end lost still ends as the cancel."""
    from tests.data.make_golden import Builder

    b = Builder(payload="full").start()
    b.call("c1.1")
    b.request("c1.1", "r1", prompt="p")
    b.response("c1.1", "r1", "hi-0")
    b.response("c1.1", "r1", "hi-1")
    records = list(b.records)
    client = TextAssembler()
    with pytest.raises(EndNotCaptured, match=r"^call c1\.1: the capture ends before the call did"):
        feed_stream(records, client)
    assert client.state()["text"] == {"r1": "hi-0hi-1"} and client.state()["stream_error"] is None

    async def run() -> tuple[list[Any], BaseException | None]:
        pairs: list[Any] = []
        try:
            async for pair in feed_stream_aio(records):
                pairs.append(pair)
        except EndNotCaptured as e:
            return pairs, e
        return pairs, None

    pairs, raised = asyncio.run(run())
    assert len(pairs) == 2 and isinstance(raised, EndNotCaptured)
    b.cancel("c1.1", "client_cancel", rst_code=8)
    cancelled = TextAssembler()
    feed_stream(list(b.records), cancelled)  # (no call_end: the cancel says how it ended)
    assert cancelled.state()["stream_error"] is not None


def test_a_cancel_whose_call_end_the_capture_lacks_ends_with_the_status_of_its_reset_code() -> None:
    """A client that refused a response over its receive limit reset with ENHANCE_YOUR_CALM (11): with the
    call_end lost, the cancel says how it ended, and the client is fed the RESOURCE_EXHAUSTED it got, not a
    cancel of its own."""
    from tests.data.make_golden import Builder

    b = Builder(payload="full").start()
    b.call("c1.1")
    b.request("c1.1", "r1", prompt="p")
    b.response("c1.1", "r1", "hi-0")
    b.cancel("c1.1", "client_cancel", rst_code=11)
    client = TextAssembler()
    feed_stream(list(b.records), client)
    error = client.state()["stream_error"]
    assert error is not None and error[0] == "StatusCode.RESOURCE_EXHAUSTED"


def test_a_response_the_calls_end_cut_is_not_fed() -> None:
    """What arrived of a response when the client's cancel cut it is recorded, never labelled: the client never
    had it, so it is fed the responses before it, then its cancel. It was a UserError ("carries no Triton
    labels ... it cannot be fed")."""
    from tests.data.make_golden import cancelled_mid_response

    client = TextAssembler()
    feed_stream(cancelled_mid_response(), client)
    state = client.state()
    assert (state["text"], state["responses"]) == ({"r1": "hi-0"}, {"r1": 1})
    assert state["stream_error"] == ("StatusCode.CANCELLED", "Locally cancelled by application!")

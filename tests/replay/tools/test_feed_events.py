"""``replay.feed_events`` / ``feed_events_aio``: a captured HTTP generate_stream (SSE) call fed to a user's
callback. The captures are built from the real Triton 2.51 HTTP exchanges (tests/proxy/triton/data/http) by
tests/data/make_golden.py's Builder; the reference is the bytes Triton sent in that exchange, parsed as an
SSE reader does."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

import replay
from replay.errors import UserError
from tests.data.make_golden import Builder, http_stream_cut_in_second_event
from tests.proxy.triton.http_wire import Exchange, exchanges
from tests.support.paths import DATA


def _write(
    tmp_path: Path, x: Exchange, *, ms: float | list[float], payload: str = "full", cancel: bool = False
) -> Path:
    b = Builder(payload=payload).start(grpc=False, http=True)
    b.http_call("c1.1", x)
    b.http_request("c1.1", x)
    b.http_reply("c1.1", x, ms=ms)
    if cancel:
        b.http_cancel("c1.1", "client_disconnect", ms=0.3)
        b.http_end("c1.1", x, cause="client_disconnect", ms=0.2)
    else:
        b.http_end("c1.1", x)
    path = tmp_path / "c.jsonl"
    path.write_bytes(b.finish().render())
    return path


def _wire_events(x: Exchange) -> list[dict[str, Any]]:
    """What an SSE reader parses from the bytes Triton sent."""
    return [json.loads(block.removeprefix("data: ")) for block in x.reply.decode().split("\n\n") if block]


def _fed(path: Path, **kw: Any) -> list[tuple[dict[str, Any] | None, str | None]]:
    got: list[tuple[dict[str, Any] | None, str | None]] = []
    replay.feed_events([path], lambda event, error: got.append((event, error)), **kw)
    return got


def test_full_capture_feeds_each_event_as_triton_sent_it_then_a_clean_end(tmp_path: Path) -> None:
    x = exchanges("03a_generate_stream_completed_keepalive")[0]
    got = _fed(_write(tmp_path, x, ms=[4, 200, 200]))
    assert got == [(e, None) for e in _wire_events(x)] + [(None, None)]
    assert [e["TEXT"] for e, _ in got[:-1] if e is not None] == ["hi-0", "hi-1", "hi-2"]


def test_a_captured_disconnect_ends_with_the_connection_lost(tmp_path: Path) -> None:
    (x,) = exchanges("04a_disconnect_after_2_events_tokens")
    got = _fed(_write(tmp_path, x, ms=[14, 300], cancel=True))
    assert got[:-1] == [(e, None) for e in _wire_events(x)]
    assert got[-1] == (None, "the connection was lost before the end of the body (client_disconnect)")


def test_an_error_event_under_200_carries_its_error(tmp_path: Path) -> None:
    x = exchanges("03c_generate_stream_error_after_first")[0]
    got = _fed(_write(tmp_path, x, ms=[3, 200, 200]))
    error = "fail_midstream: backend failure after 2 responses"
    assert got[-2] == ({"error": error}, error) and got[-1] == (None, None)
    assert all(err is None for _, err in got[:-2])


@pytest.mark.parametrize("payload", ["full", "meta"])
def test_a_rejection_that_is_no_event_stream_is_fed_as_its_json_and_error(tmp_path: Path, payload: str) -> None:
    """Triton refuses a bad generate_stream with a plain JSON reply (404 unknown model, 400 missing input),
    no ``data:`` line: the callback gets that JSON and its error, then a clean end."""
    for x in exchanges("03f_generate_stream_rejections")[:2]:
        assert x.status in (400, 404)
        reply = json.loads(x.reply)
        got = _fed(_write(tmp_path, x, ms=2, payload=payload))
        assert got == [(reply, reply["error"]), (None, None)]


@pytest.mark.parametrize("payload", ["full", "meta"])
def test_an_event_the_cut_ended_is_not_fed(tmp_path: Path, payload: str) -> None:
    """The client's disconnect cut the stream inside its second event, whose head the capture holds (a
    recorder that keeps what arrived, marking it): an SSE reader drops an event no blank line ended, so the
    callback gets the first event, then the loss. ``full``: the bytes say it (no blank line at their end),
    whatever the record's text; ``meta``: the record's mark."""
    b, x, _ = http_stream_cut_in_second_event(payload, keep_bytes=payload == "full", mark=payload == "meta")
    path = tmp_path / "c.jsonl"
    path.write_bytes(b.finish().render())
    got = _fed(path)
    first = _wire_events(x)[0]
    assert len(got) == 2 and got[0][1] is None and got[0][0] is not None
    assert got[0][0] == (first if payload == "full" else {**first, "TEXT": None})
    assert got[1] == (None, "the connection was lost before the end of the body (client_disconnect)")


def test_meta_capture_rebuilds_events_and_openai_done_is_the_end_not_an_event() -> None:
    got = _fed(DATA / "http" / "generate_stream_completed.jsonl")
    assert got == [({"id": "gs-1", "model_name": "tokens", "model_version": "1", "TEXT": None}, None)] * 3 + [
        (None, None)
    ]
    got = _fed(DATA / "http" / "openai_stream.jsonl")
    assert len(got) == 3 and got[1][0] is not None and got[1][0]["choices"][0]["finish_reason"] == "length"
    assert got[-1] == (None, None)


def test_done_on_a_generate_stream_is_data_not_the_end(tmp_path: Path) -> None:
    """`data: [DONE]` ends an OpenAI stream only: in a captured generate_stream (Triton sends none, a
    scripted one here: no real server here produces it) it is an event whose data is no JSON, which
    feeding refuses in one line as for any such event, rather than dropping it as an end."""
    import dataclasses

    x = exchanges("03a_generate_stream_completed_keepalive")[0]
    done = b"data: [DONE]\n\n"
    x = dataclasses.replace(x, reply=x.reply + done, pieces=[*x.pieces, done])
    with pytest.raises(UserError, match=r"event 3 of call c1.1 is not JSON: '\[DONE\]'"):
        _fed(_write(tmp_path, x, ms=[4, 200, 200]))


def test_speed_paces_events_at_the_captured_gaps(tmp_path: Path) -> None:
    x = exchanges("03a_generate_stream_completed_keepalive")[0]
    path = _write(tmp_path, x, ms=[4, 200, 200])
    times: list[float] = []
    t0 = time.monotonic()
    replay.feed_events([path], lambda e, err: times.append(time.monotonic() - t0), speed=2.0)
    # Each event no earlier than its captured time (204 and 404 ms) at speed 2, counted from before the call:
    # lower bounds from the start, not gaps between events (the pacer keeps to the start, so an event a
    # loaded machine delays makes the next gap shorter).
    assert len(times) == 4 and times[1] >= 0.102 and times[2] >= 0.202  # three events, then the end


def test_aio_form_yields_the_same_pairs(tmp_path: Path) -> None:
    (x,) = exchanges("04a_disconnect_after_2_events_tokens")
    path = _write(tmp_path, x, ms=[14, 300], cancel=True)

    async def collect() -> list[tuple[dict[str, Any] | None, str | None]]:
        return [pair async for pair in replay.feed_events_aio([path])]

    assert asyncio.run(collect()) == _fed(path)


def test_a_capture_without_such_a_call_is_a_user_error() -> None:
    with pytest.raises(UserError, match="no HTTP generate_stream"):
        _fed(DATA / "http" / "unary_json.jsonl")
    with pytest.raises(UserError, match=r"'c9\.9' is not an HTTP generate_stream"):
        _fed(DATA / "http" / "mixed.jsonl", call="c9.9")

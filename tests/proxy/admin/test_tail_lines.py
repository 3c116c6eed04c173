"""`tail`'s human line per record: decoded with the capture schema, the facts the issue lists."""

from __future__ import annotations

from proxy.admin.tail import describe
from replay.capture import events as ev
from replay.capture.schema import encode


def test_a_message_line_shows_call_direction_model_id_final_and_error() -> None:
    """time, seq, kind, call, direction, model, request id, final flag, error."""
    rec = ev.MessageSeen(t_ns=1_700_000_000_123_000_000, call="c1.1", dir="s2c", index=0, size=9, compressed=False,
                         model="tokens", request_id="r1", final=True, error="boom")  # fmt: skip
    kind, text = describe(7, encode(rec, 7)[:-1])
    assert kind == "message"
    assert text == "22:13:20.123       7 message       c1.1 s2c model=tokens id='r1' final=true error='boom'"


def test_the_time_shown_is_the_millisecond_it_happened_in() -> None:
    """Truncated to the millisecond in integers: 1 ns before a second is shown in that second, not in the
    next one (as a float t_ns / 1e9 would round it)."""
    for t_ns, shown in ((1_780_000_000 * 10**9 - 1, "20:26:39.999"), (1_780_000_000 * 10**9, "20:26:40.000"),
                        (1_700_000_000_123_999_999, "22:13:20.123")):  # fmt: skip
        _, text = describe(1, encode(ev.HalfClosed(t_ns=t_ns, call="c1.1"), 1)[:-1])
        assert text.startswith(shown + " "), text


def test_mark_end_and_unknown_kinds() -> None:
    """A mark shows its note and labels; a call_end its cause; an unknown kind is named, not an error."""
    _, mark = describe(3, encode(ev.MarkRecorded(t_ns=0, note="load 3", labels={"run": "3"}), 3)[:-1])
    assert mark.endswith("mark          'load 3' run=3")
    end = ev.CallEnded(t_ns=0, call="c1.1", status="CANCELLED", details=None, cause="client_cancel", trailers=None,
                       initial_metadata=None, duration_ms=2.5, messages_c2s=1, messages_s2c=0)  # fmt: skip
    assert "c1.1 cause=client_cancel status=CANCELLED 2.5ms" in describe(4, encode(end, 4)[:-1])[1]
    assert describe(5, b'{"v":1,"seq":5,"kind":"future_thing"}') == ("future_thing", "      5 future_thing (unknown to this triton-tap)")


def _golden_lines(name: str) -> list[str]:
    from replay.capture.reader import read_capture
    from tests.support.paths import DATA

    return [describe(seq, encode(rec, seq)[:-1])[1][13:] for seq, rec in read_capture(DATA / "http" / name)]


def test_http_records_read_as_http() -> None:
    """An HTTP-only capture names its HTTP pair; a call its request line and version; events their final flag."""
    lines = _golden_lines("generate_stream_cancelled.jsonl")
    assert lines[0] == "      0 capture_start file_index=0 http_listen=127.0.0.1:8010 http_upstream=127.0.0.1:8000"
    assert lines[1] == "      1 call_start    c1.1 POST /v2/models/tokens/generate_stream HTTP/1.1 peer=127.0.0.1:50100"
    assert lines[4] == "      4 message       c1.1 s2c model=tokens id='04a-mid' final=false"
    assert lines[5] == "      5 cancel        c1.1 cause=client_disconnect in_flight=['04a-mid'] forwarded=true"
    assert lines[6] == "      6 call_end      c1.1 cause=client_disconnect status=200 314.6ms"
    openai = _golden_lines("openai_stream.jsonl")
    assert openai[4] == "      4 message       c1.1 s2c model=llama id='cmpl-7' final=false finish_reason=length"
    mixed = _golden_lines("mixed.jsonl")
    assert mixed[0] == ("      0 capture_start file_index=0 listen=127.0.0.1:8011 upstream=127.0.0.1:8001 "
                        "http_listen=127.0.0.1:8010 http_upstream=127.0.0.1:8000")
    assert mixed[1] == "      1 call_start    c1.1 /inference.GRPCInferenceService/ModelStreamInfer peer=127.0.0.1:50000"

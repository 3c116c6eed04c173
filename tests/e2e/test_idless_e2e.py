"""Id-less requests and error responses without the final flag, live: tritonclient through our
proxy to a real tritonserver (the `scripted` model), then ``replay check`` on the capture.

Each test asserts that the replay outcome equals what the tritonclient callback received: the
per-request outcome when the wire supports one, else the group's counts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from proxy.lab.background import ProxyThread
from replay.cli.main import main as replay_main
from tests.support.triton_client import StreamSession, echo_inputs, int_input, token_inputs

pytestmark = pytest.mark.timeout(300)


def _send(s: StreamSession, script: str, rid: str = "", *, empty_final: bool = True, delay_ms: int = 5) -> None:
    s.send("scripted", [*token_inputs(script, 1), int_input("DELAY_MS", delay_ms)], rid,
           enable_empty_final_response=empty_final)  # fmt: skip


def _is_final(e: tuple[Any, ...]) -> bool:
    return e[0] == "result" and e[2] is True


def _check(proxy: ProxyThread, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    path: Path = proxy.stop()
    capsys.readouterr()
    code = replay_main(["check", "--json", str(path)])
    out, err = capsys.readouterr()
    assert code != 2, err
    return code, json.loads(out)


def test_ten_idless_requests_answered_with_error_finals(
    recording_proxy: ProxyThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """Triton QA's shape: 10 requests with id "" each answered by an error+final: 10 `error`, exit 0."""
    s = StreamSession(recording_proxy.url)
    for _ in range(10):
        _send(s, "E", empty_final=False)
    live = s.take(10)
    s.close()
    assert [e[0] for e in live] == ["error"] * 10
    code, doc = _check(recording_proxy, capsys)
    assert code == 0 and doc["unattributable"] == []
    assert [(r["request_id"], r["outcome"]) for r in doc["requests"]] == [("", "error")] * 10
    # Each request is answered at once, so whether they were in flight together is the server's
    # timing: those that were form an id group (its counts), the others each stand alone.
    groups = {r["group"]["first_seq"]: r["group"] for r in doc["requests"] if r["group"] is not None}
    alone = sum(r["group"] is None for r in doc["requests"])
    assert alone + sum(g["requests"] for g in groups.values()) == sum(e[0] == "error" for e in live)
    for g in groups.values():
        assert g["ended"] == {"error": g["requests"]} and g["per_request"] is True, g


def test_idless_requests_interleaved_with_texts_and_an_error_without_final(
    recording_proxy: ProxyThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two id-less requests, one with an error response without final: the group's counts are what the callback got."""
    s = StreamSession(recording_proxy.url)
    _send(s, "t,e,t,F")
    _send(s, "t,t,F")
    live: list[tuple[Any, ...]] = []
    while sum(_is_final(e) for e in live) < 2:
        live.extend(s.take_until(_is_final))
    s.close()
    code, doc = _check(recording_proxy, capsys)
    assert code == 0 and doc["unattributable"] == []
    assert [r["outcome"] for r in doc["requests"]] == ["group", "group"]
    g = doc["requests"][0]["group"]
    # A response that came while only the first request was in flight is its own (exact).
    own = sum(r["responses"] for r in doc["requests"])
    own_text = sum(r["text_responses"] for r in doc["requests"])
    assert g["responses"] + own == len(live)
    assert g["text_responses"] + own_text == sum(e[0] == "result" and bool(e[3]) for e in live)
    assert g["errors_without_final"] == sum(e[0] == "error" for e in live) == 1
    # One of the two failed (the error), the other completed; which is which the wire cannot say.
    assert g["ended"] == {"completed": sum(_is_final(e) for e in live) - 1, "error": 1}
    assert doc["summary"]["known_only_for_group"] == 2


def test_mixed_idless_and_named_requests_on_one_stream(
    recording_proxy: ProxyThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """`a` is attributed exactly; the two id-less requests, both completed, each get `completed`."""
    s = StreamSession(recording_proxy.url)
    _send(s, "t,t,F", "a")
    _send(s, "t,F")
    _send(s, "t,F")
    live: list[tuple[Any, ...]] = []
    while sum(_is_final(e) for e in live) < 3:
        live.extend(s.take_until(_is_final))
    s.close()
    code, doc = _check(recording_proxy, capsys)
    assert code == 0 and doc["unattributable"] == []
    out = [(r["request_id"], r["outcome"]) for r in doc["requests"]]
    assert out == [("a", "completed"), ("", "completed"), ("", "completed")]
    assert doc["requests"][0]["responses"] == sum(e[0] == "result" and e[1] == "a" for e in live)
    idless = doc["requests"][1:]
    assert idless[0]["group"]["responses"] + sum(r["responses"] for r in idless) == sum(
        e[0] == "result" and e[1] == "" for e in live
    )


def test_idless_request_after_a_cancel(recording_proxy: ProxyThread, capsys: pytest.CaptureFixture[str]) -> None:
    """An id-less request cancelled with its stream, then one on a new stream: cancelled, then completed (exact)."""
    s = StreamSession(recording_proxy.url)
    _send(s, "t,t,t,F", delay_ms=3000)
    first = s.take(1)
    s.close(cancel_requests=True)
    s2 = StreamSession(recording_proxy.url)
    _send(s2, "t,F")
    second = s2.take_until(_is_final)
    s2.close()
    code, doc = _check(recording_proxy, capsys)
    assert code == 0
    r1, r2 = doc["requests"]
    assert (r1["outcome"], r1["responses"]) == ("cancelled", len(first))
    assert (r2["outcome"], r2["responses"], r2["group"]) == ("completed", len(second), None)


def test_idless_requests_one_at_a_time_are_attributed_exactly(
    recording_proxy: ProxyThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three id-less requests, each sent after the previous final: each completed with its own responses."""
    s = StreamSession(recording_proxy.url)
    counts = []
    for _ in range(3):
        _send(s, "t,t,F")
        counts.append(len(s.take_until(_is_final)))
    s.close()
    code, doc = _check(recording_proxy, capsys)
    assert code == 0
    assert [(r["outcome"], r["responses"], r["group"]) for r in doc["requests"]] == [("completed", n, None) for n in counts]


def test_error_without_final_then_final(recording_proxy: ProxyThread, capsys: pytest.CaptureFixture[str]) -> None:
    """An error response without final, then a text and the final: `error`, no violation, no note."""
    s = StreamSession(recording_proxy.url)
    _send(s, "e,t,F", "ef")
    live = s.take_until(_is_final)
    s.close()
    code, doc = _check(recording_proxy, capsys)
    (r,) = doc["requests"]
    assert code == 0 and [e[0] for e in live] == ["error", "result", "result"]
    assert (r["outcome"], r["responses"], r["final"], r["notes"], r["violations"]) == ("error", 3, True, [], [])


def test_error_without_final_and_nothing_more(recording_proxy: ProxyThread, capsys: pytest.CaptureFixture[str]) -> None:
    """A text, then an error response without the final flag, then nothing: the request reported an
    error but never ended. Live, Triton 2.51 keeps such a stream open after the client's half-close
    (stop_stream without cancel had not returned after 20 s when tried), so the call can only end by
    a cancel here; the clean end without a final (`error` + `missing_final` note) is the golden
    capture error_without_final.jsonl. What the client saw and what replay check says agree:
    `error` (sticky: the cancel does not turn it into `cancelled`), final never true."""
    s = StreamSession(recording_proxy.url)
    _send(s, "t,e", "nf", empty_final=False)
    live = s.take(2)
    assert [e[0] for e in live] == ["result", "error"]
    s.close(cancel_requests=True)  # the server would wait for a final that never comes
    code, doc = _check(recording_proxy, capsys)
    (r,) = doc["requests"]
    assert r["outcome"] == "error" and r["final"] is not True and r["responses"] == 2, r
    assert code == 0, doc


def test_requests_triton_refuses_inside_a_stream_owe_no_final(
    recording_proxy: ProxyThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """Triton refuses a request it cannot run (an unknown model; a required input missing) with one error
    response and no final flag, though the request enabled empty finals, and sends nothing more for it:
    `check` says `error` (note `missing_final`), no violation, exit 0, as the client saw (it was exit 1:
    a healthy server failing the check). A good request after them completes."""
    s = StreamSession(recording_proxy.url)
    s.send("nosuch", token_inputs("x", 1), "unknown", enable_empty_final_response=True)
    s.send("scripted", [int_input("DELAY_MS", 5)], "no-prompt", enable_empty_final_response=True)
    live = s.take(2)  # (both refusals before a model streams: see the three-models test below)
    _send(s, "t,F", "good")
    live += s.take_until(_is_final)
    s.close()
    assert sorted(e[0] for e in live if e[0] == "error") == ["error", "error"]
    assert not any(e[0] == "result" and e[1] != "good" for e in live)
    code, doc = _check(recording_proxy, capsys)
    rows = [(r["request_id"], r["outcome"], r["notes"], r["violations"]) for r in doc["requests"]]
    assert rows == [
        ("unknown", "error", ["missing_final"], []),
        ("no-prompt", "error", ["missing_final"], []),
        ("good", "completed", [], []),
    ]
    assert code == 0


def test_idless_requests_to_three_models_on_one_stream_are_each_known(
    recording_proxy: ProxyThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """Id "" to `silent` (its one answer, the final, 300 ms away), to a model Triton does not have, then to
    `tokens` and `fail_midstream`, on one stream: Triton names the model in every response but its refusal,
    so each request is known on its own (it was one group, each row showing another model's error): the
    refusal, which could be `silent`'s until its final came, the unknown model's (`error`, owes no final),
    `silent` and `tokens` completed, `fail_midstream` its error; exit 0.

    The refusal goes out before the others start streaming, and `silent` answers long after it: Triton
    2.51 aborts (`ASSERTION FAILED: !byte_buffer->Valid()`, SIGABRT) when it writes a refusal on a stream
    while a model's response is being written there (seen in CI, the refusal 0.4 ms after `tokens`'
    first response), and every test after it lost the server."""
    s = StreamSession(recording_proxy.url)
    s.send("silent", token_inputs("s", None, 300), "", enable_empty_final_response=True)
    s.send("nosuch", token_inputs("x", 1), "", enable_empty_final_response=True)
    live = s.take(1)
    assert live[0][0] == "error", live
    s.send("tokens", token_inputs("a", 6, 10), "", enable_empty_final_response=True)
    s.send("fail_midstream", token_inputs("b", 5, 5), "", enable_empty_final_response=False)
    while sum(_is_final(e) for e in live) < 2 or sum(e[0] == "error" for e in live) < 2:
        live.extend(s.take(1))
    s.close()
    texts = [t for e in live if e[0] == "result" for t in e[3]]
    assert sorted(t for t in texts if t.startswith("a-")) == [f"a-{i}" for i in range(6)]
    assert sorted(t for t in texts if t.startswith("b-")) == ["b-0", "b-1"]
    code, doc = _check(recording_proxy, capsys)
    rows = {r["model"]: (r["outcome"], r["responses"], r["text_responses"], r["notes"], r["group"])
            for r in doc["requests"]}  # fmt: skip
    assert rows == {
        "silent": ("completed", 1, 0, [], None),
        "nosuch": ("error", 1, 0, ["missing_final"], None),
        "tokens": ("completed", 7, 6, [], None),
        "fail_midstream": ("error", 3, 2, [], None),
    }, doc["requests"]
    assert code == 0 and doc["unattributable"] == []


def test_a_refused_request_and_the_corrected_one_after_it_are_each_known(
    recording_proxy: ProxyThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """Id "" to `scripted` without its input (Triton refuses it: one error naming no model, nothing more),
    then the same id and model with it, on one stream: the second is a request of its own, not the
    refused one's group (both were `group`): `error` (owes no final) and `completed`, exit 0."""
    s = StreamSession(recording_proxy.url)
    s.send("scripted", [int_input("DELAY_MS", 5)], "", enable_empty_final_response=True)
    first = s.take(1)
    _send(s, "t,F")
    live = first + s.take_until(_is_final)
    s.close()
    assert live[0][0] == "error" and [e[0] for e in live[1:]] == ["result"] * (len(live) - 1)
    code, doc = _check(recording_proxy, capsys)
    rows = [(r["outcome"], r["responses"], r["notes"], r["group"]) for r in doc["requests"]]
    assert rows == [("error", 1, ["missing_final"], None), ("completed", len(live) - 1, [], None)], doc["requests"]
    assert code == 0


def test_a_request_corrected_before_another_models_request_answers_is_known_on_its_own(
    recording_proxy: ProxyThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """Id "" to `echo` (answering after 800 ms) and to `scripted` without its input, on one stream; Triton
    refuses the second at once, and the client sends the corrected request while `echo` has not answered, so
    the refusal could still be `echo`'s. `echo`'s answer places it: the corrected request was sent after
    it, so it is a request of its own (it was one group with the refused one, both `group`): `completed`,
    `error` (owes no final) and `completed`, as the callbacks got, exit 0."""
    s = StreamSession(recording_proxy.url)
    s.send("echo", echo_inputs(np.arange(4, dtype=np.uint8), 800), "", enable_empty_final_response=True)
    s.send("scripted", [int_input("DELAY_MS", 5)], "", enable_empty_final_response=True)
    live = s.take(1)
    _send(s, "t,t,F")
    while sum(_is_final(e) for e in live) < 2:
        live.extend(s.take(1))
    s.close()
    assert live[0][0] == "error" and sum(e[0] == "error" for e in live) == 1
    code, doc = _check(recording_proxy, capsys)
    rows = [(r["model"], r["outcome"], r["responses"], r["notes"], r["group"]) for r in doc["requests"]]
    assert rows == [("echo", "completed", 1, [], None), ("scripted", "error", 1, ["missing_final"], None),
                    ("scripted", "completed", 3, [], None)], doc["requests"]  # fmt: skip
    assert code == 0 and doc["unattributable"] == []

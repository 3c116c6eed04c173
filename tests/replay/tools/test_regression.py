"""`diff`'s per-model regression view: counts of what moved, percentiles side by side, the tolerance."""

from __future__ import annotations

import pytest

from replay.tools.captured import summarize
from replay.tools.diff import diff
from replay.tools.regression import Tolerance, parse_tolerance, percentile
from tests.data.make_golden import Builder


def _capture(model: str, first_ms: float, *, error: bool = False, n: int = 4) -> Builder:
    b = Builder().start()
    for i in range(n):
        cid = f"c{i}.1"
        b.call(cid)
        b.request(cid, f"r{i}", model=model)
        if error:
            b.response(cid, f"r{i}", None, final=True, error="boom", model=model)
        else:
            b.response(cid, f"r{i}", "x", ms=first_ms + i, model=model)
            b.response(cid, f"r{i}", None, final=True, model=model)
        b.half_close(cid)
        b.end(cid)
    return b.finish()


def test_tolerance_syntax_and_rule() -> None:
    assert parse_tolerance("200") == Tolerance(ms=200.0, pct=0.0)
    assert parse_tolerance("20%") == Tolerance(ms=0.0, pct=20.0)
    assert parse_tolerance("50ms,10%") == Tolerance(ms=50.0, pct=10.0)
    for bad in ("", "x", "-1", "10%,20%", "nan"):
        with pytest.raises(ValueError):
            parse_tolerance(bad)
    t = Tolerance(ms=50.0, pct=10.0)
    assert not t.exceeded(1000.0, 1090.0) and t.exceeded(1000.0, 1101.0)  # 10 % of 1000 is the larger
    assert not t.exceeded(10.0, 59.0) and t.exceeded(10.0, 61.0)  # 50 ms is the larger


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.0 and percentile([4.0, 1.0, 3.0, 2.0], 95) == 4.0


def test_same_traffic_has_one_unchanged_model_row() -> None:
    result = diff(summarize(_capture("tokens", 5.0).records), summarize(_capture("tokens", 5.0).records))
    (m,) = result.models
    assert (m.model, m.requests_a, m.requests_b, m.changed) == ("tokens", 4, 4, False)
    assert {t.name for t in m.timings} >= {"first_response_ms p50", "duration_ms p95"}
    assert result.equivalent and result.to_json()["models"][0]["changed"] is False


def test_a_slower_model_is_flagged_beyond_tolerance_only() -> None:
    """First responses 300 ms later: flagged at 100 ms, within 1000 ms or 10000 %."""
    a, b = summarize(_capture("tokens", 5.0).records), summarize(_capture("tokens", 305.0).records)
    slow = diff(a, b, threshold_ms=100.0)
    assert not slow.equivalent and [m.model for m in slow.slower] == ["tokens"]
    assert any(t.direction == "slower" and t.name == "first_response_ms p50" for t in slow.models[0].timings)
    assert diff(a, b, threshold_ms=1000.0).equivalent
    assert diff(a, b, threshold_ms=0.0, tolerance_pct=10000.0).equivalent


def test_model_map_pairs_a_renamed_model_and_counts_outcome_and_error_changes() -> None:
    """A's `tokens` sent to `tokens_v2`, which errors: paired by --model-map, counted under A's name."""
    a, b = summarize(_capture("tokens", 5.0).records), summarize(_capture("tokens_v2", 5.0, error=True).records)
    unmapped = diff(a, b)
    assert len(unmapped.only_a) == 4 and len(unmapped.only_b) == 4
    result = diff(a, b, model_map={"tokens": "tokens_v2"})
    assert not result.only_a and not result.only_b and len(result.changed) == 4
    (m,) = result.models
    assert (m.model, dict(m.outcomes), m.error_changed, m.responses_changed) == (
        "tokens", {"completed -> error": 4}, 4, 4,
    )  # fmt: skip


def test_the_same_client_side_ending_with_another_text_is_no_change() -> None:
    """A deadline noticed by the client's timer on one side and by Triton on the other: same cause, no change."""

    def capture(details: str) -> Builder:
        b = Builder().start()
        b.call("c1.1", timeout_ms=500)
        b.request("c1.1", "slow")
        b.response("c1.1", "slow", "s-0", ms=200)
        b.end("c1.1", "DEADLINE_EXCEEDED", "deadline", ms=300, details=details)
        return b.finish()

    assert diff(summarize(capture("DEADLINE_EXCEEDED").records), summarize(capture("Deadline Exceeded").records)).equivalent

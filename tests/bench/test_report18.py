"""Issue 18's target table (bench/report18.py): values judged against their bounds, shown so they can be read."""

from __future__ import annotations

from typing import Any

from bench import report18


def _results(**paths: dict[str, dict[str, float]]) -> dict[str, Any]:
    scenarios: dict[str, Any] = {}
    for scenario, by_path in paths.items():
        scenarios[scenario] = {"summary": by_path}
    return {"scenarios": scenarios}


def test_a_ratio_just_under_its_bound_is_missed_and_shown_so() -> None:
    """0.9489 is below 0.95: with two decimals it read "0.95x ... NO"."""
    res = _results(streaming={"proxy-full": {"ratio": 0.9489}, "nginx": {"ratio": 0.82}, "floor": {"ratio": 0.85}})
    row = next(t for t in report18.targets(res) if t["target"].startswith("--payload full streaming"))
    assert row["met"] is False
    assert row["shown"] == {"proxy": "0.949x", "nginx": "0.820x", "floor": "0.850x"}
    assert (
        "| --payload full streaming >= 0.95x direct (proxy-full) | 0.949x | 0.820x | 0.850x | NO |"
        in report18.table(report18.targets(res))
    )


def test_bounds_are_inclusive_and_each_way() -> None:
    res = _results(
        streaming={"proxy-meta": {"proxy_cpu_us_per_resp": 15.0}},
        unary={"proxy-meta": {"proxy_cpu_us_per_resp": 100.5, "added_p99_us": 300.0}},
        large={"proxy-full": {"ratio": 0.8}},
    )
    met = {t["target"]: t["met"] for t in report18.targets(res)}
    assert met["proxy CPU per streamed response <= 15 us"] is True
    assert met["proxy CPU per unary call <= 100 us"] is False
    assert met["unary added p99 <= 0.3 ms"] is True  # 300 us, scaled to ms
    assert met["--payload full 100 MB tensor >= 0.8x direct"] is True
    assert met["paced added p50 <= 0.06 ms"] is None  # not measured: neither met nor missed


def test_no_table_when_nothing_was_measured() -> None:
    assert report18.table(report18.targets(_results())) == ""

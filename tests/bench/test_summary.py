"""The targets of a run (bench/harness/summary.py) and their table (bench/harness/tables.py): values judged
against their bounds, shown so they can be read, nginx and the floor beside the proxy."""

from __future__ import annotations

from typing import Any

from bench.harness import summary
from bench.harness.tables import targets_table


def _results(**scenarios: dict[str, Any]) -> dict[str, Any]:
    return {"scenarios": {name: {"summary": by_path} for name, by_path in scenarios.items()}}


def _row(results: dict[str, Any], measurement: str) -> dict[str, Any]:
    return next(t for t in summary.targets(results) if t["measurement"] == measurement)


def test_a_ratio_just_under_its_bound_is_missed_and_shown_so() -> None:
    """0.9489 is below 0.95: with two decimals it read "0.95x ... no"."""
    res = _results(streaming={"proxy-full": {"ratio": 0.9489}, "nginx": {"ratio": 0.82}, "floor": {"ratio": 0.85}})
    row = _row(res, "streaming throughput vs direct (`--payload full`)")
    assert row["met"] is False
    assert row["shown"] == {"proxy": "0.949x", "nginx": "0.820x", "floor": "0.850x"}
    assert (
        "| streaming throughput vs direct (`--payload full`) | >= 0.95x | 0.949x | 0.820x | 0.850x | no |"
        in targets_table(summary.targets(res))
    )


def test_bounds_are_inclusive_and_each_way() -> None:
    res = _results(
        streaming={"proxy-meta": {"proxy_cpu_us_per_resp": 15.0}},
        unary={"proxy-meta": {"proxy_cpu_us_per_resp": 100.5, "added_p99_us": 300.0}},
        large={"proxy-full": {"ratio": 0.8}},
    )
    met = {t["measurement"]: t["met"] for t in summary.targets(res)}
    assert met["proxy CPU per streamed response (meta)"] is True
    assert met["proxy CPU per unary call (meta)"] is False
    assert met["unary added latency p99"] is True  # 300 us, scaled to ms
    assert met["100 MB tensor vs direct (`--payload full`)"] is True
    assert met["paced 1.5k responses/s, added latency p50"] is None  # not measured: neither met nor missed


def test_nothing_measured_is_a_dash_not_a_verdict() -> None:
    table = targets_table(summary.targets(_results()))
    assert "| proxy CPU per unary call (meta) | <= 100 us | - | - | - | - |" in table
    assert "yes" not in table and "| no |" not in table


def test_scaling_is_met_only_when_every_stream_count_is() -> None:
    res = {"scenarios": {"scaling": {str(n): {"summary": {"proxy-meta": {"ratio": r}, "nginx": {"ratio": 0.9}}}
                                     for n, r in ((1, 1.1), (10, 0.49), (100, 0.9))}}}  # fmt: skip
    row = _row(res, "scaling 1 / 10 / 100 / 1000 streams vs direct (each)")
    assert row["met"] is False and row["shown"]["proxy"] == "1.10x / 0.49x / 0.90x"
    assert row["shown"]["nginx"] == "0.90x / 0.90x / 0.90x" and row["shown"]["floor"] is None


def test_a_low_peak_with_bytes_missing_is_not_met() -> None:
    """The memory target needs every byte delivered: a proxy that dropped data would have a low peak too."""
    res = {"scenarios": {"memory": {"1 stream": {"rss_peak_mb": 70.0, "complete": False}}}}
    row = _row(res, "RSS peak, a client stops reading while the upstream streams 1 GiB")
    assert row["met"] is False and row["shown"]["proxy"] == "70.0 MB (INCOMPLETE)"
    res["scenarios"]["memory"]["1 stream"]["complete"] = True
    assert _row(res, "RSS peak, a client stops reading while the upstream streams 1 GiB")["met"] is True


def test_perf_analyzer_is_judged_on_the_median_and_shows_whether_the_rounds_agree() -> None:
    name = "perf_analyzer, real tritonserver, vs direct"
    res = _results(perf_analyzer={"proxy": {"ratio": 0.97, "ratio_range": [0.9, 1.02], "proxy_cpu_us_per_resp": 100.0,
                                            "runs": 5}})  # fmt: skip
    row = _row(res, name)
    assert row["met"] is True
    assert row["shown"]["proxy"] == "0.97x (rounds 0.90-1.02: they straddle the bound), 100.0 us per response"
    res = _results(perf_analyzer={"proxy": {"ratio": 0.85, "ratio_range": [0.8, 0.9], "runs": 7}})
    row = _row(res, name)
    assert row["met"] is False and row["shown"]["proxy"] == "0.85x (rounds 0.80-0.90)"


def test_perf_analyzer_is_not_judged_on_fewer_than_five_rounds() -> None:
    """One round's ratio moves by +-0.1: three rounds' median above the bound (or below) is no verdict."""
    name = "perf_analyzer, real tritonserver, vs direct"
    for runs, ratio in ((3, 1.0), (4, 0.8), (None, 1.0)):
        by_path: dict[str, Any] = {"ratio": ratio, "ratio_range": [0.79, 1.01]}
        if runs is not None:
            by_path["runs"] = runs
        row = _row(_results(perf_analyzer={"proxy": by_path, "nginx": {"ratio": 0.98, "runs": 3}}), name)
        assert row["met"] is None
        assert row["shown"]["proxy"].endswith(f"; {runs if runs is not None else 'unknown'} rounds, judged on 5 or more")
        assert row["shown"]["nginx"] == "0.98x; 3 rounds, judged on 5 or more"


def test_workers_are_shown_not_judged() -> None:
    res = _results(pa_workers={"direct": {"responses_per_s": 3376.0, "ratio": 1.0},
                               "proxy-w1": {"responses_per_s": 3188.0, "ratio": 0.94},
                               "proxy-w2": {"responses_per_s": 3184.0, "ratio": 0.97}})  # fmt: skip
    row = _row(res, "perf_analyzer, `--workers 1` / `2`, responses/s")
    assert row["met"] is None and row["target"] == "shown"
    assert row["shown"]["proxy"] == "w1 3188/s (0.94x), w2 3184/s (0.97x) of direct's 3376/s"


WHERE = "perf_analyzer, per response: user + system CPU; syscalls, context switches, futex calls"


def test_where_each_relays_cpu_goes_is_shown_only_where_measured() -> None:
    """A run from before the figures existed renders as it did (no row); one that has them shows user +
    system us and the kernel's counts per response for each relay, judged against nothing."""
    assert all(t["measurement"] != WHERE for t in summary.targets(_results(perf_analyzer={"proxy": {"ratio": 0.9}})))
    split = {"user_us_per_resp": 23.25, "sys_us_per_resp": 17.7, "syscalls_per_resp": 3.43, "switches_per_resp": 1.27,
             "futex_per_resp": 0.094}  # fmt: skip
    nginx = {"user_us_per_resp": 4.1, "sys_us_per_resp": 18.4, "syscalls_per_resp": 3.86, "switches_per_resp": 1.26,
             "futex_per_resp": None}  # fmt: skip
    row = _row(_results(perf_analyzer={"proxy": split, "nginx": nginx, "floor": {"user_us_per_resp": None}}), WHERE)
    assert row["met"] is None and row["target"] == "shown"
    assert row["shown"] == {"proxy": "23.2 + 17.7 us; 3.43, 1.27, 0.09", "nginx": "4.1 + 18.4 us; 3.86, 1.26, -",
                            "floor": None}  # fmt: skip
    assert "| 23.2 + 17.7 us; 3.43, 1.27, 0.09 | 4.1 + 18.4 us; 3.86, 1.26, - | - | shown |" in targets_table(
        summary.targets(_results(perf_analyzer={"proxy": split, "nginx": nginx})))


def test_a_run_of_some_scenarios_does_not_call_itself_the_full_run() -> None:
    """``mode`` is the size of each scenario (full or smoke); a run of a few is named by what it ran."""
    from bench.harness.config import SCENARIOS
    from bench.harness.tables import heading

    base = {"started": "2026-12-05 11:40 UTC", "mode": "full"}
    assert heading({**base, "scenarios": {"perf_analyzer": {}}}).endswith("(full-size run of perf_analyzer only).\n")
    every: dict[str, Any] = {name: {} for name in (*SCENARIOS, "perf_analyzer")}
    assert heading({**base, "scenarios": every}).endswith("(full run).\n")
    assert heading({**base, "mode": "smoke", "scenarios": {"unary": {}}}).endswith("(smoke run).\n")

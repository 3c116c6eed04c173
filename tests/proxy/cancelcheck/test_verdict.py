"""The cancellation verdict: which evidence supports "stopped", which "continued", and the report."""

from __future__ import annotations

import dataclasses

import pytest

from proxy.cancelcheck import verdict as vd
from proxy.triton.server_evidence import LogObservation


def obs(**kw: object) -> vd.CaseObservation:
    base: dict[str, object] = {
        "case": "executing", "request_id": "r", "allowance_ms": 300.0, "client_status": "CANCELLED",
        "responses_before_cancel": 5,
    }  # fmt: skip
    base.update(kw)
    return vd.CaseObservation(**base)  # type: ignore[arg-type]


def probe(after: float | None, blocked: bool = True) -> vd.ProbeObservation:
    return vd.ProbeObservation(baseline_ms=20.0, blocked_before_cancel=blocked, after_cancel_ms=after, window_ms=9000.0)


@pytest.mark.parametrize(
    ("probe_obs", "expected", "tag"),
    [
        (probe(50.0), True, "[stopped] probe"),
        (probe(320.0), True, "[stopped] probe"),  # baseline 20 + allowance 300
        (probe(321.0), False, "[continued] probe"),
        (probe(None), False, "[continued] probe: no response"),
        (probe(5000.0, blocked=False), None, "[info] probe: answered while"),
    ],
)
def test_probe_rules(probe_obs: vd.ProbeObservation, expected: bool | None, tag: str) -> None:
    """The probe decides only when it was blocked by the cancelled work: baseline + allowance is the line."""
    v = vd.decide(obs(probe=probe_obs))
    assert v.work_stopped is expected
    assert any(e.startswith(tag) for e in v.evidence), v.evidence


def _log(**kw: object) -> LogObservation:
    base: dict[str, object] = {
        "notified": True, "reached_backend": None, "released_after_ms": None, "skipped_total": 0,
        "skipped_after_allowance": 0, "last_skipped_ms": None, "window_ms": 5000.0,
    }  # fmt: skip
    base.update(kw)
    return LogObservation(**base)  # type: ignore[arg-type]


def test_log_rules() -> None:
    """Release within the allowance -> stopped; late release or late responses -> continued; silence needs a rate."""
    assert vd.decide(obs(log=_log(released_after_ms=10.0))).work_stopped is True
    assert vd.decide(obs(log=_log(released_after_ms=900.0))).work_stopped is False
    assert vd.decide(obs(log=_log(skipped_total=9, skipped_after_allowance=7, last_skipped_ms=1500.0))).work_stopped is False
    # Other cancelled requests around it: their dropped responses are in the same id-less lines, so late ones
    # decide nothing (a healthy model was called failing), and a release in time still says stopped.
    noisy = _log(skipped_total=9, skipped_after_allowance=7, last_skipped_ms=1500.0, others=1)
    assert vd.decide(obs(log=noisy)).work_stopped is None
    assert vd.decide(obs(log=dataclasses.replace(noisy, released_after_ms=20.0))).work_stopped is True
    # Silence proves something only when the request was streaming fast enough to have been heard.
    assert vd.decide(obs(log=_log(skipped_total=2))).work_stopped is None
    assert vd.decide(obs(log=_log(skipped_total=2), rate_per_s=100.0)).work_stopped is True
    assert vd.decide(obs(log=_log(skipped_total=2), rate_per_s=100.0, remaining=1)).work_stopped is None
    assert vd.decide(obs(log=_log(notified=False), rate_per_s=100.0)).work_stopped is None
    assert vd.decide(obs(case="queued", log=_log(reached_backend=False))).work_stopped is True
    assert vd.decide(obs(case="queued", log=_log(reached_backend=False), ahead_ended=True)).work_stopped is True


def test_still_queued_behind_work_that_went_on_is_no_stop() -> None:
    """The queued request never reached the backend, but the request ahead of it never ended either: staying
    queued shows nothing about the cancel."""
    v = vd.decide(obs(case="queued", log=_log(reached_backend=False), ahead_ended=False))
    assert v.work_stopped is None
    assert any(e.startswith("[info] log: request 'r' never left the queue, but the work ahead") for e in v.evidence)


def test_silence_after_work_that_fits_in_the_allowance_shows_nothing() -> None:
    """A model that ignores the cancel, 34 responses left at 166/s: they all fit in the 300 ms allowance, so
    silence after it is no stop (it was reported as one, and the model as fine); with more left it is."""
    quick = obs(rate_per_s=166.0, remaining=34, log=_log(skipped_total=12))
    assert vd.decide(quick).work_stopped is None
    assert vd.decide(dataclasses.replace(quick, remaining=200)).work_stopped is True  # 150 still due after 300 ms
    assert vd.decide(dataclasses.replace(quick, remaining=52)).work_stopped is None  # 2.2 due: too few to be heard


def test_as_many_dropped_as_were_left_may_be_its_end() -> None:
    """Triton dropped as many responses as the request still had to produce (its lines name no request): it may
    have run to its end within the allowance, so neither its release in time nor silence is a stop."""
    ran = obs(rate_per_s=100.0, remaining=30, log=_log(skipped_total=70, released_after_ms=250.0, window_ms=9000.0))
    v = vd.decide(ran)
    assert v.work_stopped is None, v.evidence
    assert any("as many as request 'r' still had to produce (30): it may have run to its end" in e for e in v.evidence)
    assert any(e.startswith("[info] log: request 'r' released by the backend 250 ms after") for e in v.evidence)
    assert vd.decide(dataclasses.replace(ran, remaining=900)).work_stopped is True  # fewer dropped than left: released in time
    late = dataclasses.replace(ran, log=_log(skipped_total=70, released_after_ms=2500.0))
    assert vd.decide(late).work_stopped is False  # a late release still says it went on


def test_conflicting_evidence_says_continued() -> None:
    """A fast probe does not outweigh responses still produced later: never claim more than shown."""
    v = vd.decide(obs(probe=probe(10.0), log=_log(skipped_after_allowance=3, skipped_total=3, last_skipped_ms=900.0)))
    assert v.work_stopped is False


def test_client_side_views_never_decide() -> None:
    """Client status, metrics and the proxy's view (no late frames) alone give null, not true."""
    v = vd.decide(obs(metrics={}, upstream_rst_us=120.0, late_frames=0, proxy_in_flight=("r", "s"), proxy_responded=("r",)))
    assert v.work_stopped is None
    assert "[info] proxy: the cancel ended 2 request(s) in flight on the call: r (responded), s (no response yet)" in v.evidence
    assert any("no frames is not proof" in e for e in v.evidence)
    assert any("no nv_inference_* counter moved" in e for e in v.evidence)


def test_not_cancelled_or_skipped_cases_are_null() -> None:
    """A request that was not cancelled, or a case that could not be set up, has no verdict."""
    assert vd.decide(obs(client_status=None, probe=probe(1.0))).work_stopped is None
    v = vd.decide(obs(skipped="no queued state"))
    assert v.work_stopped is None and v.evidence == ("[info] not exercised: no queued state",)


def _report(*cases: vd.CaseObservation) -> vd.Report:
    return vd.Report(
        tool_version="0.1.0", client_version="2.73.0", protocol="grpc", method="stream", scope="stream",
        server_version="2.51.0", model="m", backend="python", via="direct", allowance_ms=300.0,
        cases=tuple((c, vd.decide(c)) for c in cases),
    )  # fmt: skip


def test_exit_codes() -> None:
    """0 all stopped; 1 work went on or a neighbour was hurt; 2 anything not established."""
    good = obs(probe=probe(10.0), neighbour_ok=True)
    assert vd.exit_code(_report(good, dataclasses.replace(good, case="queued"))) == 0
    assert vd.exit_code(_report(good, obs(probe=probe(2000.0)))) == 1
    assert vd.exit_code(_report(dataclasses.replace(good, neighbour_ok=False))) == 1
    assert vd.exit_code(_report(good, obs(skipped="x"))) == 2
    assert vd.exit_code(_report()) == 2


def test_json_and_markdown_report() -> None:
    """The JSON has the contract's keys; the Markdown lists casualties as expected and promises no preemption."""
    rep = _report(obs(probe=probe(10.0), neighbour_ok=True, casualties=("sib",)), obs(case="queued", skipped="x"))
    doc = vd.to_json(rep)
    assert {"server_version", "client_version", "method", "scope", "backend", "cases", "report_version"} <= doc.keys()
    assert [(c["case"], c["work_stopped"], c["neighbour_ok"]) for c in doc["cases"]] == [
        ("executing", True, True), ("queued", None, None),
    ]  # fmt: skip
    assert all(isinstance(c["evidence"], list) and c["evidence"] for c in doc["cases"])
    md = vd.to_markdown(rep)
    assert "`work_stopped: true`" in md and "`work_stopped: null`" in md
    assert "expected casualties of the stream cancel (not a fault): sib" in md
    assert "not a promise that work is preempted at once" in md
    for text in (md, str(doc)):
        assert "instant" not in text.lower() and "immediately" not in text.lower()

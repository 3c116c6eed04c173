"""The golden captures: up to date with their generator, and what `replay check --json` says about each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay.cli.main import main
from tests.data import make_golden
from tests.data.make_golden import SCENARIOS

DATA = Path(make_golden.__file__).parent


def test_regenerating_the_golden_files_gives_no_diff() -> None:
    """The checked-in goldens and README are exactly what tests/data/make_golden.py produces."""
    expected = make_golden.render()
    on_disk = {p.name for p in DATA.iterdir() if p.suffix in (".jsonl", ".md")}
    assert on_disk == set(expected), "run: python -m tests.data.make_golden"
    for name, data in expected.items():
        assert (DATA / name).read_bytes() == data, f"{name} is stale: run python -m tests.data.make_golden"


def test_every_golden_file_has_a_readme_line() -> None:
    """tests/data/README.md lists each golden file once, with its exit code."""
    readme = (DATA / "README.md").read_text()
    for name, s in SCENARIOS.items():
        assert readme.count(f"- `{name}` (exit {s.exit}):") == 1


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_check_json_reports_the_expected_outcomes(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`check --json` on each golden gives its documented exit code, outcomes, violations, unattributable and holes."""
    s = SCENARIOS[name]
    path = DATA / name
    code = main(["check", "--json", str(path)])
    out, err = capsys.readouterr()
    assert code == s.exit, err
    if s.exit == 2:
        assert out == ""
        lines = err.splitlines()
        assert len(lines) == 1
        assert lines[0].startswith(f"triton-tap: error: {path}:{s.error_line}: ")
        return
    doc = json.loads(out)
    got = tuple(
        (r["request_id"], r["outcome"], tuple(v["violation"] for v in r["violations"])) for r in doc["requests"]
    )
    assert got == s.requests
    assert tuple(u["reason"] for u in doc["unattributable"]) == s.unattributable
    assert tuple(g["kind"] for g in doc["gaps"]) == s.gaps
    assert doc["summary"]["requests"] == len(s.requests)
    if name == "truncated_last_line.jsonl":
        assert "last line cut short" in err
    else:
        assert err == ""


def test_check_json_request_fields() -> None:
    """Each request entry carries the documented fields with their meaning (counts, final, timings)."""
    doc = {}
    for name in ("no_text.jsonl", "error_midstream.jsonl", "unary.jsonl", "many_responses.jsonl"):
        from replay.machine.tracker import track

        doc[name] = track(DATA / name).to_json()
    (quiet,) = doc["no_text.jsonl"]["requests"]
    assert {k: quiet[k] for k in ("responses", "text_responses", "final", "model", "call")} == {
        "responses": 1, "text_responses": 0, "final": True, "model": "silent", "call": "c1.1",
    }  # fmt: skip
    (failed,) = doc["error_midstream.jsonl"]["requests"]
    assert (failed["responses"], failed["text_responses"], failed["final"], failed["error"]) == (
        3, 2, True, "fail_midstream: backend failure after 2 responses",
    )  # fmt: skip
    e1, e2 = doc["unary.jsonl"]["requests"]
    assert (e1["kind"], e1["responses"], e1["final"], e2["responses"], e2["status"]) == (
        "unary",
        1,
        None,
        0,
        "NOT_FOUND",
    )
    assert doc["unary.jsonl"]["summary"]["calls_by_method"] == {"ServerLive": 1, "ModelInfer": 2}
    (many,) = doc["many_responses.jsonl"]["requests"]
    assert (many["responses"], many["text_responses"], many["first_response_ms"], many["duration_ms"]) == (
        6,
        5,
        5.0,
        30.0,
    )
    required = {"call", "model", "request_id", "outcome", "responses", "text_responses", "final",
                "first_response_ms", "duration_ms", "violations"}  # fmt: skip
    assert required <= set(many)
    assert set(doc["many_responses.jsonl"]) == {"requests", "unattributable", "protocol_errors", "gaps", "summary"}

"""`replay check` on id groups (several requests in flight with one id): the rows, the counts and the
warning say the same thing, each from one source (the group's GroupOutcome)."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.cli.check import check
from replay.cli.main import main
from replay.machine.tracker import track
from tests.data.make_golden import Builder
from tests.support.paths import DATA

GOLDEN = DATA / "idless_errors_without_final.jsonl"


def test_group_rows_show_the_groups_responses_and_first_response(capsys: pytest.CaptureFixture[str]) -> None:
    """Triton QA's decoupled_execute_error shape: two id-less requests, an error without the final flag
    each, an OK end. Each row shows the group's 2 responses and its first response time, never `0 (0)`."""
    code = main(["check", str(GOLDEN)])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    rows = [line for line in out.splitlines() if line.startswith("│ c1.1")]
    assert len(rows) == 2
    for row in rows:
        cells = [c.strip() for c in row.strip("│").split("│")]
        assert cells[4:7] == ["group 2 (0)", "", "group 5.1"], row
    assert "0 (0)" not in out
    assert "known only for their group" in out.splitlines()[-1]  # the warning


def test_json_group_counts_and_warning_agree_with_ended(capsys: pytest.CaptureFixture[str]) -> None:
    """`ended` names what the warning says: the errors cannot be placed, so it is not `{"unconfirmed": 2}`."""
    code = main(["check", "--json", str(GOLDEN)])
    out, _ = capsys.readouterr()
    doc = json.loads(out)
    assert code == 0
    groups = [r["group"] for r in doc["requests"]]
    assert groups[0] == groups[1] == {
        "first_seq": 2, "request_id": "", "requests": 2, "responses": 2, "text_responses": 0,
        "ended": {"unconfirmed or error": 2}, "errors_without_final": 2, "per_request": False,
        "first_response_ms": 5.1, "error_texts": ["scripted: error 1"],
    }  # fmt: skip
    assert [r["outcome"] for r in doc["requests"]] == ["group", "group"]
    assert doc["summary"]["known_only_for_group"] == 2


def _table(path: Any) -> str:
    out = io.StringIO()
    check([str(path)], rows=0, out=out, err=io.StringIO())
    return out.getvalue()


_SCRIPT = st.lists(st.sampled_from(["text", "error", "final", "error_final", "request"]), max_size=10)
_ENDS = [("OK", "ok"), ("CANCELLED", "client_cancel"), ("INTERNAL", "error"), ("DEADLINE_EXCEEDED", "deadline")]


@settings(max_examples=300, deadline=None)
@given(script=_SCRIPT, end=st.sampled_from(_ENDS), due=st.booleans())
def test_a_groups_rows_counts_and_warning_come_from_one_source(
    script: list[str], end: tuple[str, str], due: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """For requests with one id sent among any responses, and any end: each group's `ended` counts its
    requests once; its requests' outcomes are `ended`'s one plain outcome exactly when there is one
    (`per_request`), else `group`; the warning counts the others; the rows show the group's responses."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "", empty_final=due)
    for what in script:
        if what == "request":
            b.request("c1.1", "", empty_final=due)
        else:
            b.response("c1.1", "", "t" if what == "text" else None, final=what.endswith("final"),
                       error="boom" if what.startswith("error") else None)  # fmt: skip
    status, cause = end
    if cause not in ("ok", "error"):
        b.cancel("c1.1", cause, rst_code=8)
    b.end("c1.1", status=status, cause=cause)
    result = track(b.records)
    groups: dict[int, list[Any]] = {}
    for r in result.requests:
        if r.group is not None:
            groups.setdefault(r.group.first_seq, []).append(r)
    for members in groups.values():
        g = members[0].group
        assert all(r.group == g for r in members) and g.requests == len(members)
        assert sum(g.ended.values()) == len(members)
        plain = [k for k in g.ended if " or " not in k]
        assert g.per_request == (len(g.ended) == 1 and len(plain) == 1)
        if g.per_request:
            assert [r.outcome for r in members] == plain * len(members)
        else:
            assert {r.outcome for r in members} == {"group"}
    mixed = sum(len(m) for m in groups.values() if not m[0].group.per_request)
    assert result.summary()["known_only_for_group"] == mixed
    path = tmp_path_factory.mktemp("group") / "capture.jsonl"
    path.write_bytes(b.finish().render())
    table = _table(path)
    assert ("sent together with the same id are known only for their group" in table) == (mixed > 0)
    # Each row of a group that got responses shows them as the group's (beside its own, if any).
    shown = sum(len(m) for m in groups.values() if m[0].group.responses)
    assert len(re.findall(r"group \d+ \(\d+\)", table)) == shown

"""`triton-tap diff` as a command: exit codes 0/1/2, the highlighted report, --json, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.cli import main as triton_tap_main
from replay.cli.main import main
from tests.data.make_golden import Builder, stray_error
from tests.support.paths import DATA


def test_identical_captures_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    """A capture against itself: equivalent, exit 0, a one-line verdict."""
    code = triton_tap_main(["diff", str(DATA / "interleaved.jsonl"), str(DATA / "interleaved.jsonl")])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert "equivalent: 2 request(s) paired, 0 changed, 0 only in A, 0 only in B" in out


def test_changed_requests_are_shown_field_by_field_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    """The same request completed in A and cancelled in B: the table names the fields, exit 1."""
    a, b = DATA / "restart_after_cancel.jsonl", DATA / "stream_cancel.jsonl"
    code = main(["diff", "--match", "order", str(a), str(b)])
    out, _ = capsys.readouterr()
    assert code == 1
    assert "changed requests" in out and "only in B" in out and "different:" in out
    for text in ("outcome", "cancelled", "completed", "cause"):
        assert text in out


def test_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    """--json: one document with per-request changes, unpaired requests and a summary."""
    code = main(
        ["diff", "--json", "--match", "id", str(DATA / "missing_final.jsonl"), str(DATA / "one_response.jsonl")]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["equivalent"] is False
    assert [r["request_id"] for r in doc["only_a"]] == ["due", "not-due"]
    assert [r["request_id"] for r in doc["only_b"]] == ["r1"]
    assert doc["summary"] == {"paired": 0, "changed": 0, "raced": 0, "only_a": 2, "only_b": 1, "calls_changed": 0, "unattributable_changed": 0,
                              "holes_a": 0, "holes_b": 0, "models_slower": 0, "models_faster": 0, "refused_a": 0,
                              "refused_b": 0}


def test_unreadable_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A garbled capture: exit 2 with one line naming file and line, no traceback."""
    code = triton_tap_main(["diff", str(DATA / "one_response.jsonl"), str(DATA / "garbled_middle.jsonl")])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1 and "garbled_middle.jsonl:3" in err


def test_bad_flags_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown --match strategy or a negative threshold: exit 2, one line."""
    for argv in (["--match", "nope"], ["--timing-threshold", "-5"]):
        with pytest.raises(SystemExit) as e:
            triton_tap_main(["diff", *argv, str(DATA / "unary.jsonl"), str(DATA / "unary.jsonl")])
        assert e.value.code == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_serve_refuses_a_busy_port_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """serve on a port already taken: exit 2 and one line naming the address."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code = triton_tap_main(["serve", "--listen", f"127.0.0.1:{port}", str(DATA / "unary.jsonl")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in err and err.strip().count("\n") == 0


def test_diff_lists_the_holes_of_either_capture(capsys: pytest.CaptureFixture[str]) -> None:
    """gaps.jsonl against itself: still equivalent on requests, but each hole is printed and in --json `holes`."""
    gaps = str(DATA / "gaps.jsonl")
    code = main(["diff", gaps, gaps])
    out, _ = capsys.readouterr()
    assert code == 0
    assert "hole in A gap_record" in out and "hole in B seq_gap" in out
    # Each a line of its own, whole (a script reads the verdict with `tail -1`); they wrapped at 160 columns.
    lines = out.splitlines()
    assert [line.split(" at ")[0] for line in lines[-5:-1]] == ["hole in A gap_record", "hole in A seq_gap",
                                                                "hole in B gap_record", "hole in B seq_gap"]  # fmt: skip
    assert lines[-5].endswith(": the proxy dropped 3 record(s): queue_full: the capture disk is slower than the traffic")
    assert lines[-1].startswith("equivalent: 1 request(s) paired") and len(lines[-1]) > 160
    assert lines[-1].endswith("A has 2 hole(s), B 2: the comparison covers only the records captured")
    code = main(["diff", "--json", gaps, gaps])
    doc = json.loads(capsys.readouterr().out)
    assert [g["kind"] for g in doc["holes"]["a"]] == ["gap_record", "seq_gap"] == [g["kind"] for g in doc["holes"]["b"]]
    assert (doc["summary"]["holes_a"], doc["equivalent"]) == (2, True)


def test_a_duplicated_response_line_is_not_a_false_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A capture with one response line written twice diffs equivalent to the clean one, naming the repeat."""
    lines = (DATA / "one_response.jsonl").read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if b'"s2c"' in line)
    dup = tmp_path / "dup.jsonl"
    dup.write_bytes(b"".join([*lines[: at + 1], lines[at], *lines[at + 1 :]]))
    code = main(["diff", "--json", str(DATA / "one_response.jsonl"), str(dup)])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["summary"]["changed"]) == (0, 0)
    assert [g["kind"] for g in doc["holes"]["b"]] == ["duplicate_seq"]


def test_payload_matching_on_meta_captures_warns_or_fails(capsys: pytest.CaptureFixture[str]) -> None:
    """--match payload alone on captures without payload bytes: exit 2, one line; with id: a warning line."""
    one = str(DATA / "one_response.jsonl")
    code = triton_tap_main(["diff", "--match", "payload", one, one])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--payload full" in err
    code = triton_tap_main(["diff", "--match", "payload,id", one, one])
    _, err = capsys.readouterr()
    assert code == 0
    assert err.count("warning") == 2 and "--match payload needs captures recorded with --payload full" in err


def _written(path: Path, rids: tuple[str, ...], first_ms: float = 5.0) -> str:
    """A capture of one stream whose requests ``rids`` each get a response after ``first_ms`` and a final."""
    b = Builder().start()
    b.call("c1.1")
    for rid in rids:
        b.request("c1.1", rid)
        b.response("c1.1", rid, "x", ms=first_ms)
        b.response("c1.1", rid, None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    path.write_bytes(b.finish().render())
    return str(path)


def test_a_request_only_in_the_first_capture_is_different_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A has r1 and r2, B only r1: `only in A` is printed, the verdict is different, exit 1 (both ways round)."""
    a, b = _written(tmp_path / "a.jsonl", ("r1", "r2")), _written(tmp_path / "b.jsonl", ("r1",))
    code = main(["diff", a, b])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 1
    assert "only in A: tokens/r2" in out and "different: 1 request(s) paired, 0 changed, 1 only in A, 0 only in B" in out
    assert main(["diff", b, a]) == 1 and "1 only in B" in capsys.readouterr().out
    assert main(["diff", a, a]) == 0


def test_the_verdict_names_a_faster_model_faster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """First responses 290 -> 16 ms: `1 model(s) faster beyond tolerance`, never `slower`; the reverse is slower.
    The line says `tolerance`, the flag's word; --json carries each percentile's direction."""
    slow, fast = _written(tmp_path / "slow.jsonl", ("r1",), 290.0), _written(tmp_path / "fast.jsonl", ("r1",), 16.0)
    assert main(["diff", slow, fast]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "1 model(s) faster beyond tolerance (timing tolerance 100 ms)" in out and "slower" not in out
    assert main(["diff", fast, slow]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "1 model(s) slower beyond tolerance (timing tolerance 100 ms)" in out and "faster" not in out
    assert main(["diff", "--json", slow, fast]) == 1
    doc = json.loads(capsys.readouterr().out)
    p95 = next(t for t in doc["models"][0]["timings"] if t["name"] == "first_response_ms p95")
    assert (p95["a"], p95["b"], p95["beyond_tolerance"], p95["direction"]) == (290.0, 16.0, True, "faster")
    assert (doc["summary"]["models_slower"], doc["summary"]["models_faster"]) == (0, 1)


def test_an_unattributable_response_in_one_capture_is_a_table_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """B also got an error response for an id nobody sent: the `unattributable responses` table shows the
    counts per reason, the verdict line counts it, exit 1."""
    a = _written(tmp_path / "a.jsonl", ("r1",))
    (tmp_path / "b.jsonl").write_bytes(stray_error().render())
    code = main(["diff", a, str(tmp_path / "b.jsonl")])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 1
    assert "unattributable responses" in out and "unknown_id with error │ 0 │ 1" in out
    assert "0 other call count(s) changed, 1 unattributable count(s) changed" in out


def test_counts_cut_by_the_clients_end_say_whether_they_raced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A count of responses that raced the client's cancel is named on a line of its own, with the times that
    make it a race, and the verdict counts it apart; a pace beyond the tolerance is a change, its line says why."""
    from tests.replay.tools.test_diff import _cut

    paths = {}
    for name, b in (("a", _cut(3, pace_ms=1.4, end_ms=8.4)), ("b", _cut(2, pace_ms=1.4, end_ms=8.7, first_ms=6.0)),
                    ("slow", _cut(2, pace_ms=140.0, end_ms=208.4))):  # fmt: skip
        paths[name] = tmp_path / f"{name}.jsonl"
        paths[name].write_bytes(b.render())
    assert main(["diff", str(paths["a"]), str(paths["b"])]) == 0
    out = capsys.readouterr().out
    assert ("raced: tokens/long (c1.1 -> c1.1): responses 3 -> 2, text_responses 3 -> 2, ended alike by the client: "
            "B ended 0.9 ms after A had its 3rd (at A's pace), within the tolerance: not a change") in " ".join(out.split())
    assert "equivalent: 1 request(s) paired, 0 changed" in out and "1 count(s) raced their client's end" in out
    assert main(["diff", str(paths["a"]), str(paths["slow"])]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert ("paced: tokens/long (c1.1 -> c1.1): responses 3 -> 2, ended alike by the client: B ended 200.6 ms after A "
            "had its 3rd (at A's pace), beyond the tolerance: a change") in out
    assert main(["diff", "--tolerance", "250", str(paths["a"]), str(paths["slow"])]) == 0

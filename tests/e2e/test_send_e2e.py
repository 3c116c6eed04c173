"""`triton-tap replay send` then `diff`, against real tritonservers.

A session is recorded with ``--payload full`` through the proxy in front of the session's
tritonserver (A): interleaved ids, an id-less request and an error mid-stream on one stream, a
stream-wide cancel, a deadline, a unary call and an async_infer cancel. It is then sent to a second
tritonserver (B, started once for this module) serving the same models plus ``tokens_v2`` (``tokens``
capped at 2 tokens): as it is, ``diff`` finds nothing beyond timing tolerance, and the re-enacted
cancels and deadline are seen by the models and recorded with the same causes; re-addressed with
``--model-map`` (tokens -> tokens_v2, echo -> steps_unary, which refuses echo's input), ``diff``
names exactly the requests whose answers changed. Server B also serves ``seqacc``, a sequence-batching model
(no model of proxy/lab/models is one), for the order of calls across connections.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from proxy.cancelcheck.evidence import LogTail
from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer, model_repository
from replay.capture import events as ev
from replay.capture.reader import read_capture
from replay.machine.tracker import track
from tests.support.triton_client import StreamSession, token_inputs, wait_for
from tests.support.triton_server import started

pytestmark = pytest.mark.timeout(400)

WAIT_S = 60.0
DEADLINE_S = 3.0  # seconds, not less: see test_replay_e2e.DEADLINE_S (the proxy's slack under load)
MODELS = ("tokens", "fail_midstream", "steps_unary", "echo")
# Timing on a shared 2-core machine: equal behaviour, not equal speed, is what these tests pin.
TOLERANCE = "1500,100%"
CHANGED_MAP = ["--model-map", "tokens=tokens_v2", "--model-map", "echo=steps_unary"]
# A sequence's running sum: Triton refuses a request of a sequence id not started (no START flag) or ended.
SEQ_CONFIG = """name: "seqacc"
backend: "python"
max_batch_size: 0
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [{ kind: KIND_CPU count: 1 }]
"""
SEQ_MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.total = 0

    def execute(self, requests):
        out = []
        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "START").as_numpy()[0]:
                self.total = 0
            self.total += int(pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()[0])
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", np.array([self.total], dtype=np.int32))]))
        return out
"""


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from proxy.cli import main; sys.exit(main(sys.argv[1:]))", *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _session(url: str, tail: LogTail) -> None:
    """The recorded client traffic (tritonclient, as a user writes it)."""
    final = {"enable_empty_final_response": True}
    s = StreamSession(url)
    s.send("tokens", token_inputs("a", 3, delay_ms=30), "a", **final)
    s.send("tokens", token_inputs("b", 3, delay_ms=30), "b", **final)
    s.send("tokens", token_inputs("n", 2), "", **final)  # tritonclient's default id: none
    s.send("fail_midstream", token_inputs("f", 5), "f", **final)
    finals: set[str] = set()
    errors: list[Any] = []

    def over(e: tuple[Any, ...]) -> bool:
        if e[0] == "error":
            errors.append(e)
        elif e[2]:
            finals.add(e[1])
        return finals == {"a", "b", ""} and bool(errors)

    s.take_until(over, WAIT_S)
    s.close()
    # A stream-wide cancel: "done" finished, "long" has its first token and the next is 3 s away.
    s = StreamSession(url)
    s.send("tokens", token_inputs("d", 1), "done", **final)
    s.take_until(lambda e: e[0] == "result" and e[2] is True, WAIT_S)
    s.send("tokens", token_inputs("l", 1000, delay_ms=3000), "long", **final)
    s.take_until(lambda e: e[0] == "result" and e[1] == "long", WAIT_S)
    s.close(cancel_requests=True)
    # A deadline mid-stream.
    s = StreamSession(url, stream_timeout=DEADLINE_S)
    s.send("tokens", token_inputs("s", 1000, delay_ms=300), "slow", **final)
    s.take_until(lambda e: e[0] == "error", WAIT_S)
    s.close()
    # Unary: an answered call, and an async_infer cancelled while the model works.
    c = grpcclient.InferenceServerClient(url)
    x = grpcclient.InferInput("INPUT", [3], "UINT8")
    x.set_data_from_numpy(np.array([1, 2, 3], dtype=np.uint8))
    c.infer("echo", [x], request_id="u-ok")
    done: list[Any] = []
    ctx = c.async_infer("steps_unary", token_inputs("u", 1000, delay_ms=50), lambda result, error: done.append(error),
                        request_id="u-cancel")  # fmt: skip
    wait_for(lambda: any("steps_unary: request u-cancel started" in ln for ln in tail.read()), WAIT_S, "u-cancel to start")
    ctx.cancel()
    wait_for(lambda: bool(done), WAIT_S, "the cancelled call to end")
    c.close()


@pytest.fixture(scope="module")
def recorded(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session, recorded with --payload full through the proxy in front of the session's server (A)."""
    tail = LogTail(triton.log_path)
    tail.mark()
    with ProxyThread(triton.grpc_url, tmp_path_factory.mktemp("recorded"), payload="full") as proxy:
        _session(proxy.url, tail)
    return proxy.capture_path


@pytest.fixture(scope="module")
def second(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """Server B: the session's models, plus tokens_v2 (tokens capped at 2 tokens) and seqacc (a sequence's sum)."""
    repo = tmp_path_factory.mktemp("repo_b")
    for name in MODELS:
        shutil.copytree(model_repository() / name, repo / name, symlinks=False)
    shutil.copytree(model_repository() / "tokens", repo / "tokens_v2", symlinks=False)
    config = (repo / "tokens_v2" / "config.pbtxt").read_text().replace('name: "tokens"', 'name: "tokens_v2"')
    config += '\nparameters { key: "max_tokens_cap" value: { string_value: "2" } }\n'
    (repo / "tokens_v2" / "config.pbtxt").write_text(config)
    (repo / "seqacc" / "1").mkdir(parents=True)
    (repo / "seqacc" / "config.pbtxt").write_text(SEQ_CONFIG)
    (repo / "seqacc" / "1" / "model.py").write_text(SEQ_MODEL)
    server = started(TritonServer(repo, workdir=tmp_path_factory.mktemp("triton_b")), request)
    yield server
    server.stop()


def _send(capture: Path, target: TritonServer, out: Path, *extra: str) -> Path:
    proc = _cli("replay", "send", str(capture), "--target", target.grpc_url, "--out", str(out), *extra)
    assert proc.returncode == 0, proc.stderr
    assert "new capture:" in proc.stdout, proc.stdout
    (path,) = out.glob("*.jsonl")
    return path


def _diff(a: Path, b: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = _cli("diff", str(a), str(b), "--json", "--tolerance", TOLERANCE, *extra)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _why(doc: dict[str, Any]) -> str:
    """What made a diff different, short enough for an assertion message."""
    changed = {p["a"]["request_id"]: p["changes"] for p in doc["requests"] if p["changes"]}
    slower = [(m["model"], [t for t in m["timings"] if t["beyond_tolerance"]]) for m in doc["models"]]
    return f"changed={changed} only_a={doc['only_a']} only_b={doc['only_b']} calls={doc['calls']} slower={slower}"


def _outcomes(capture: Path) -> dict[str | None, tuple[str, str | None]]:
    result = track(capture)
    causes = {c.call: c.cause for c in result.calls}
    return {r.request_id: (r.outcome, causes.get(r.call)) for r in result.requests}


def test_same_models_diff_equivalent_with_cancels_and_deadline_re_enacted(
    recorded: Path, second: TritonServer, tmp_path: Path
) -> None:
    """Sent as recorded: diff equivalent; the models saw the cancels; deadline and cancels keep their causes."""
    tail = LogTail(second.log_path)
    tail.mark()
    new = _send(recorded, second, tmp_path / "sent", "--cancel-at", "responses")
    code, doc = _diff(recorded, new)
    assert (code, doc["equivalent"]) == (0, True), _why(doc)
    assert doc["summary"]["paired"] == 9 and doc["summary"]["changed"] == 0
    want = {"a": ("completed", "ok"), "b": ("completed", "ok"), "": ("completed", "ok"), "f": ("error", "ok"),
            "done": ("completed", "client_cancel"), "long": ("cancelled", "client_cancel"),
            "slow": ("deadline", "deadline"), "u-ok": ("completed", "ok"), "u-cancel": ("cancelled", "client_cancel")}  # fmt: skip
    assert _outcomes(recorded) == want
    assert _outcomes(new) == want
    # The re-enacted cancels reached the models: they saw is_cancelled() and said so.
    wait_for(lambda: any("tokens: request long cancelled after 1 responses" in ln for ln in tail.read()), WAIT_S,
             "tokens to log the cancel of 'long'")  # fmt: skip
    wait_for(lambda: any("steps_unary: request u-cancel cancelled after" in ln for ln in tail.read()), WAIT_S,
             "steps_unary to log the cancel of 'u-cancel'")  # fmt: skip


def test_changed_models_diff_names_exactly_the_changed_requests(
    recorded: Path, second: TritonServer, tmp_path: Path
) -> None:
    """tokens -> tokens_v2 (2 tokens at most), echo -> steps_unary (refuses echo's input): a, b, slow, u-ok change."""
    new = _send(recorded, second, tmp_path / "sent", "--cancel-at", "responses", *CHANGED_MAP)
    code, doc = _diff(recorded, new, *CHANGED_MAP)
    assert code == 1 and doc["only_a"] == [] and doc["only_b"] == []
    changed = {p["a"]["request_id"]: {c["field"] for c in p["changes"]} for p in doc["requests"] if p["changes"]}
    assert set(changed) == {"a", "b", "slow", "u-ok"}, changed
    assert {"responses", "text_responses"} <= changed["a"] and {"outcome", "final"} <= changed["slow"]
    assert {"outcome", "error", "status"} <= changed["u-ok"]
    models = {m["model"]: m for m in doc["models"]}
    assert models["tokens"]["outcome_changes"] == {"deadline -> completed": 1}
    assert models["tokens"]["responses_changed"] == 3
    assert models["echo"]["outcome_changes"] == {"completed -> error": 1}
    assert models["fail_midstream"]["changed"] is False and models["steps_unary"]["changed"] is False
    shown = _cli("diff", str(recorded), str(new), "--tolerance", TOLERANCE, *CHANGED_MAP)
    assert shown.returncode == 1 and "per model" in shown.stdout


def test_a_cancel_after_more_responses_than_the_new_server_sends_goes_out_after_the_drain(
    triton: TritonServer, second: TritonServer, tmp_path: Path
) -> None:
    """The client cancelled its stream after 4 responses; `tokens_v2` sends 2 tokens and the final, then the
    stream stays open. With `--cancel-at responses` the sender waited for a 4th response forever (`--drain`
    did not bound it). It now waits until `--drain` past the cancel's offset, cancels, and says so; the
    new capture has the cancel and the 3 responses the server sent."""
    (tmp_path / "rec").mkdir()
    with ProxyThread(triton.grpc_url, tmp_path / "rec", payload="full") as proxy:
        s = StreamSession(proxy.url)
        s.send("tokens", token_inputs("c", 6, delay_ms=100), "c", enable_empty_final_response=True)
        s.take(4, WAIT_S)
        s.close(cancel_requests=True)
    proc = _cli("replay", "send", str(proxy.capture_path), "--target", second.grpc_url, "--out", str(tmp_path / "sent"),
                "--cancel-at", "responses", "--model-map", "tokens=tokens_v2", "--drain", "2", timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "1 client ending(s) sent --drain (2 s) after their offset" in proc.stdout, proc.stdout
    (path,) = (tmp_path / "sent").glob("*.jsonl")
    result = track(path)
    assert [(c.cause, c.status) for c in result.calls] == [("client_cancel", "CANCELLED")]
    assert [(r.request_id, r.model, r.responses, r.text_responses, r.outcome) for r in result.requests] == [
        ("c", "tokens_v2", 3, 2, "completed"),
    ]  # fmt: skip


def test_calls_a_client_made_one_after_another_are_sent_one_after_another(
    triton: TritonServer, tmp_path: Path
) -> None:
    """One sync client, 20 pairs of unary calls on its one connection: `echo` at once, then `echo` sleeping
    300 ms, each after the previous reply. Sent at their offsets alone, a slow call could go out before the
    fast one before it was answered (the sender wakes a little late), the one `echo` instance ran it first,
    and diff called the fast call 300 ms slower on the same server: `different`. Each now waits for the
    calls its connection had ended before it started: the same server is `equivalent`."""
    (tmp_path / "rec").mkdir()
    with ProxyThread(triton.grpc_url, tmp_path / "rec", payload="full") as proxy:
        c = grpcclient.InferenceServerClient(proxy.url)
        x = np.arange(4, dtype=np.uint8)
        for i in range(20):
            for rid, delay in ((f"fast{i}", None), (f"slow{i}", 300)):
                inputs = [grpcclient.InferInput("INPUT", [4], "UINT8")]
                inputs[0].set_data_from_numpy(x)
                if delay is not None:
                    d = grpcclient.InferInput("DELAY_MS", [1], "INT32")
                    d.set_data_from_numpy(np.array([delay], dtype=np.int32))
                    inputs.append(d)
                c.infer("echo", inputs, request_id=rid)
        c.close()
    new = _send(proxy.capture_path, triton, tmp_path / "sent")
    code, doc = _diff(proxy.capture_path, new, "--tolerance", "150,100%")
    assert (code, doc["equivalent"]) == (0, True), _why(doc)
    # In the new capture too, no call began before the one before it on its connection had ended.
    spans: dict[str, list[int]] = {}
    for _, rec in read_capture(new):
        if rec.kind in ("call_start", "call_end"):
            spans.setdefault(rec.call, []).append(rec.t_ns)  # type: ignore[attr-defined]
    ordered = sorted(spans.values())
    assert len(ordered) == 40 and all(b[0] >= a[1] for a, b in itertools.pairwise(ordered)), ordered


def test_a_status_message_ending_in_a_space_is_sent_and_recorded_as_it_came(
    triton: TritonServer, tmp_path: Path
) -> None:
    """Triton's status for an input of the wrong shape ends in a space (``... got [2,3]. ``). send's HTTP/2 client
    took it for a protocol error: the connection was lost, that call's outcome and the next call's with it
    (exit 1). gRPC's clients take it, and so does send now: both calls sent, as recorded."""
    (tmp_path / "rec").mkdir()
    with ProxyThread(triton.grpc_url, tmp_path / "rec", payload="full") as proxy:
        c = grpcclient.InferenceServerClient(proxy.url)
        bad = grpcclient.InferInput("INPUT", [2, 3], "UINT8")
        bad.set_data_from_numpy(np.zeros((2, 3), dtype=np.uint8))
        with pytest.raises(grpcclient.InferenceServerException) as refused:
            c.infer("echo", [bad], request_id="u-shape")
        ok = grpcclient.InferInput("INPUT", [3], "UINT8")
        ok.set_data_from_numpy(np.arange(3, dtype=np.uint8))
        c.infer("echo", [ok], request_id="u-ok")
        c.close()
    assert str(refused.value.message()).endswith(" "), refused.value.message()  # what this test is about
    new = _send(proxy.capture_path, triton, tmp_path / "sent")
    ends = {r.call: (r.status, r.details) for _, r in read_capture(new) if r.kind == "call_end"}
    before = {r.call: (r.status, r.details) for _, r in read_capture(proxy.capture_path) if r.kind == "call_end"}
    assert sorted(ends.values()) == sorted(before.values()), (ends, before)
    assert sorted(s for s, _ in ends.values()) == ["INVALID_ARGUMENT", "OK"]


def _sequence(client: grpcclient.InferenceServerClient, tag: str, n: int) -> int:
    """Sequence 42 from START to END, ``n`` calls one at a time; its sum."""
    for k in range(n):
        x = grpcclient.InferInput("INPUT", [1], "INT32")
        x.set_data_from_numpy(np.array([1], dtype=np.int32))
        r = client.infer("seqacc", [x], sequence_id=42, sequence_start=k == 0, sequence_end=k == n - 1,
                         request_id=f"{tag}{k}")  # fmt: skip
    return int(r.as_numpy("OUTPUT")[0])


def test_a_sequence_a_second_client_ran_after_the_first_is_sent_after_the_first(
    second: TritonServer, tmp_path: Path
) -> None:
    """Client A runs sequence 42 (20 calls, START to END) on its connection; then client B runs sequence 42 on a
    second connection. Each call waited only for its connection's calls: A's drifted later along their chain
    (each after the previous answer, plus the captured pause) while B's went out at their offsets, among A's
    last ones, and Triton refused them (`must specify the START flag`): the same server was `different`. A call
    now waits for every call that had ended before it began, on any connection: `equivalent`."""
    (tmp_path / "rec").mkdir()
    with ProxyThread(second.grpc_url, tmp_path / "rec", payload="full") as proxy:
        a = grpcclient.InferenceServerClient(proxy.url)
        # Its own HTTP/2 connection (grpc otherwise shares one between the clients of a process).
        b = grpcclient.InferenceServerClient(proxy.url, channel_args=[("grpc.use_local_subchannel_pool", 1)])
        assert (_sequence(a, "A", 20), _sequence(b, "B", 3)) == (20, 3)
        a.close()
        b.close()
    conns = {rec.conn for _, rec in read_capture(proxy.capture_path) if isinstance(rec, ev.CallStarted)}
    assert len(conns) == 2, conns
    proc = _cli("replay", "send", str(proxy.capture_path), "--target", second.grpc_url, "--out", str(tmp_path / "sent"))
    assert proc.returncode == 0, proc.stderr
    assert "causes (recorded -> new): ok 23 -> 23" in proc.stdout, proc.stdout
    assert "waited for earlier calls to end: " in proc.stdout, proc.stdout
    (new,) = (tmp_path / "sent").glob("*.jsonl")
    code, doc = _diff(proxy.capture_path, new)
    assert (code, doc["equivalent"]) == (0, True), _why(doc)


def test_counts_cut_by_a_cancel_or_deadline_at_its_offset_race_and_are_no_change(
    triton: TritonServer, tmp_path: Path
) -> None:
    """A stream cancelled after its 3rd token and a 3 s deadline, tokens 20 ms apart, sent three times to the
    same server with the endings at their offsets: how many tokens came before each end moves from run to
    run (the 3rd token a little late, a few more or fewer in 3 s), and diff called 5 of 6 such re-sends
    `different` (measured). Now each count is judged by the pace: equivalent, the counts listed as raced."""
    (tmp_path / "rec").mkdir()
    final = {"enable_empty_final_response": True}
    with ProxyThread(triton.grpc_url, tmp_path / "rec", payload="full") as proxy:
        s = StreamSession(proxy.url)
        s.send("tokens", token_inputs("c", 100000, delay_ms=20), "cancel3", **final)
        s.take(3, WAIT_S)
        s.close(cancel_requests=True)
        s = StreamSession(proxy.url, stream_timeout=DEADLINE_S)
        s.send("tokens", token_inputs("d", 100000, delay_ms=20), "deadline", **final)
        s.take_until(lambda e: e[0] == "error", WAIT_S)
        s.close()
    want = {"cancel3": ("cancelled", "client_cancel"), "deadline": ("deadline", "deadline")}
    assert _outcomes(proxy.capture_path) == want
    raced = []
    for i in range(3):
        new = _send(proxy.capture_path, triton, tmp_path / f"sent{i}")
        assert _outcomes(new) == want
        code, doc = _diff(proxy.capture_path, new, "--tolerance", "500")
        assert (code, doc["equivalent"], doc["summary"]["changed"]) == (0, True, 0), _why(doc)
        raced += [(p["a"]["request_id"], p["raced"], p["cut_ms"]) for p in doc["requests"] if p["raced"]]
    print("raced:", raced)

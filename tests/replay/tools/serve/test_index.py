"""`serve`'s index (pure): one streaming pass, the answers on disk, a bounded index per response, never the records."""

from __future__ import annotations

import base64
import gc
import tracemalloc
from pathlib import Path

import pytest
from tritonclient.grpc import service_pb2 as pb

from replay.capture import events as ev
from replay.tools.serve import load
from replay.tools.serve.index import RESPONSE_BYTES, AnswerStore, LoadedCapture
from replay.tools.serve.responses import stream_response
from tests.data.make_golden import INFER, Builder, cancelled_mid_response
from tests.support.capture import write_rotated


def _capture(payload: str, *, requests: int = 3, responses: int = 4, text: str = "") -> Builder:
    """One stream of ``requests`` interleaved requests with ``responses`` texts and an empty final each,
    then a unary echo call."""
    b = Builder(payload=payload).start()
    b.call("c1.1")
    for i in range(requests):
        b.request("c1.1", f"r{i}", prompt=f"p{i}")
    for k in range(responses):
        for i in range(requests):
            b.response("c1.1", f"r{i}", f"r{i}-{k}{text}")
    for i in range(requests):
        b.response("c1.1", f"r{i}", None, final=True)
    b.half_close("c1.1")
    b.end("c1.1")
    b.call("c1.3", method=INFER)
    b.request("c1.3", "e1", model="echo", empty_final=None)
    b.response("c1.3", "e1", "hi", final=None, model="echo")
    b.half_close("c1.3", ms=0)
    b.end("c1.3")
    return b


def _by_request(records: list[ev.Record]) -> dict[str, list[ev.MessageSeen]]:
    out: dict[str, list[ev.MessageSeen]] = {}
    for r in records:
        if isinstance(r, ev.MessageSeen) and r.dir == "s2c" and r.call == "c1.1":
            out.setdefault(r.request_id or "", []).append(r)
    return out


@pytest.mark.parametrize("payload", ["full", "meta"])
def test_a_rotated_zstd_capture_is_answered_from_its_index(tmp_path: Path, payload: str) -> None:
    """The writer's rotated .jsonl.zst files (sparse lines leaning on earlier ones in their file): each
    request's answers, read back from disk, are the captured bytes (full) or rebuilt from the captured labels
    (meta), in capture order, at the captured times."""
    b = _capture(payload, responses=6)
    files = write_rotated(b.records, tmp_path, rotate_bytes=500)
    assert len(files) >= 3 and all(f.name.endswith(".jsonl.zst") for f in files)
    captured = _by_request(b.records)
    cap = load(tmp_path)
    try:
        stream = cap.calls_of("/inference.GRPCInferenceService/ModelStreamInfer")
        assert len(stream) == 1
        for cand in (c for c in cap.candidates if c.key.kind == "stream"):
            want = captured[cand.key.request_id or ""]
            got = stream[0].responses_of(cand.seq)
            assert [(a.t_ns, a.real) for a in got] == [(r.t_ns, payload == "full") for r in want]
            for answer, rec in zip(got, want, strict=True):
                assert answer.data is not None
                if payload == "full":
                    assert rec.payload is not None and answer.data == base64.b64decode(rec.payload)
                else:
                    assert pb.ModelStreamInferResponse.FromString(answer.data) == stream_response(rec)[0]
        (unary,) = cap.calls_of(INFER)
        first = unary.first_response()
        assert first is not None and first.data is not None
        assert pb.ModelInferResponse.FromString(first.data).id == "e1"
    finally:
        cap.close()


def _retained(path: Path) -> tuple[int, LoadedCapture]:
    """Bytes still allocated after loading ``path`` (the loaded capture alive), and the capture."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cap = load(path)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before, cap
    finally:
        tracemalloc.stop()


def test_the_index_grows_by_a_few_integers_per_response_not_by_the_records(tmp_path: Path) -> None:
    """Four times the responses (same requests, 120-byte texts, full payload): what serve keeps grows by at most
    twice the stated :data:`RESPONSE_BYTES` per response; the records themselves would be several hundred."""
    sizes = {}
    for n in (100, 400):
        path = tmp_path / f"{n}.jsonl"
        path.write_bytes(_capture("full", responses=n, text="x" * 120).finish().render())
        sizes[n], cap = _retained(path)
        assert sum(c.responses for c in cap.calls.values()) == 3 * (n + 1) + 1
        cap.close()
    per_response = (sizes[400] - sizes[100]) / (3 * 300)
    assert per_response <= 2 * RESPONSE_BYTES, f"{per_response:.0f} bytes kept per response"


def test_the_index_refers_to_no_record(tmp_path: Path) -> None:
    """Nothing reachable from the loaded capture's calls is a captured record or a payload."""
    path = tmp_path / "c.jsonl"
    path.write_bytes(_capture("full", text="y" * 200).finish().render())
    cap = load(path)
    try:
        seen: set[int] = set()
        todo: list[object] = [cap.calls]
        while todo:
            obj = todo.pop()
            if id(obj) in seen or isinstance(obj, type | AnswerStore):
                continue
            seen.add(id(obj))
            assert not isinstance(obj, ev.MessageSeen | bytes), type(obj)
            assert not (isinstance(obj, str) and len(obj) > 100), obj[:40]
            todo.extend(gc.get_referents(obj))
    finally:
        cap.close()


def test_identical_answers_are_written_once() -> None:
    """A meta capture's rebuilt answers repeat: the store holds each distinct answer once."""
    b = _capture("meta", requests=2, responses=50)
    cap = load(b.finish().records)
    try:
        distinct = {a.data for c in cap.calls.values() for cand in cap.candidates for a in c.responses_of(cand.seq)}
        assert cap.store is not None and 0 < cap.store.size <= sum(len(d or b"") for d in distinct)
    finally:
        cap.close()


@pytest.mark.parametrize(("code", "status"), [(8, "CANCELLED"), (11, "RESOURCE_EXHAUSTED")])
def test_a_cancel_whose_call_end_is_lost_ends_with_the_status_of_its_reset_code(code: int, status: str) -> None:
    """With the call_end lost the cancel says how the call ended: a client reset with ENHANCE_YOUR_CALM (11)
    refused a response over its receive limit and got RESOURCE_EXHAUSTED, which serve answers with, not a cancel."""
    b = Builder(payload="full").start()
    b.call("c1.1")
    b.request("c1.1", "r1", prompt="p")
    b.response("c1.1", "r1", "hi-0")
    b.cancel("c1.1", "client_cancel", rst_code=code)
    cap = load(b.records)
    try:
        end = cap.calls["c1.1"].end
        assert end is not None and (end.cause, end.status) == ("client_cancel", status)
    finally:
        cap.close()


def test_a_response_the_calls_end_cut_is_no_response_to_serve() -> None:
    """What arrived of a response cut by the call's end (a cancel, a reset mid-message) is no response: no client
    had it, and serve does not send it."""
    cap = load(cancelled_mid_response())
    try:
        assert cap.calls["c1.1"].responses == 1
    finally:
        cap.close()


def test_a_request_the_calls_end_cut_is_no_request_to_answer() -> None:
    """What arrived of a request cut by the call's end (Triton's deadline during the upload) is no request: serve
    waits from the call's start, as for a call with no request, not from the moment the end cut it."""
    b = Builder(payload="full").start()
    b.call("c1.1", method="/inference.GRPCInferenceService/RepositoryModelLoad", timeout_ms=500)
    b.cut("c1.1", "c2s", 100, 5000, ms=500)
    b.end("c1.1", "DEADLINE_EXCEEDED", cause="deadline", ms=0)
    cap = load(b.records)
    try:
        call = cap.calls["c1.1"]
        assert call.first_request_t == call.t_start and not list(call.requests())
    finally:
        cap.close()

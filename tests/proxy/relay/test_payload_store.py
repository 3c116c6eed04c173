"""``--payload full`` through the real proxy and writer on loopback: the side-file store (the default)
against ``--payload-store inline``, the same traffic, read back through every tool that reads bytes.

The upstream is the fake Triton (tests/support/fake_triton.py): a unary echo and a decoupled stream
are what these tests need, and the e2e tier covers the real server.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from proxy.ops.server import RecordingProxy
from proxy.relay import recording
from proxy.relay.recording import SIDE_MIN_BYTES
from proxy.resend.plan import scripts
from proxy.triton import pieces
from replay import compiled, feed_stream
from replay.capture import events as ev
from replay.capture import naming
from replay.capture.payload import payload_bytes
from replay.capture.reader import read_capture
from replay.cli.upgrade import upgrade
from replay.tools.captured import summarize
from replay.tools.diff import diff
from replay.tools.match import payload_key
from replay.tools.serve.index import load
from tests.support.capture import records
from tests.support.proxy import stop_proxy

STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
INFER = "/inference.GRPCInferenceService/ModelInfer"
#: Over 1 MiB: the request and its echo reach the proxy in many pieces, kept unjoined for the side file.
TENSOR = np.random.default_rng(18).integers(0, 255, 3_000_000, dtype=np.uint8).tobytes()


def _requests() -> tuple[pb.ModelInferRequest, list[pb.ModelInferRequest]]:
    unary = pb.ModelInferRequest(model_name="echo", id="u1")
    unary.inputs.add(name="INPUT", datatype="UINT8", shape=[len(TENSOR)])
    unary.raw_input_contents.append(TENSOR)
    stream = []
    for rid in ("s1", "s2"):
        r = pb.ModelInferRequest(model_name="tokens", id=rid)
        r.inputs.add(name="PROMPT", datatype="BYTES", shape=[1])
        r.raw_input_contents.append(b"\x05\x00\x00\x00hello" + rid.encode())
        r.parameters["n"].int64_param = 3
        if rid == "s1":  # 2,000-byte texts: s1's responses go to the side file, s2's stay in their lines
            r.parameters["size"].int64_param = 2000
        stream.append(r)
    return unary, stream


def _traffic(port: int) -> None:
    unary, stream = _requests()
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", -1),
                                                              ("grpc.max_receive_message_length", -1)]) as ch:  # fmt: skip
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        assert stub.ModelInfer(unary, timeout=30).raw_output_contents[0] == TENSOR
        assert len(list(stub.ModelStreamInfer(iter(stream), timeout=30))) == 6


def _record(start_proxy: Callable[..., RecordingProxy], upstream: int, directory: Path, **kw: Any) -> Path:
    proxy = start_proxy(f"127.0.0.1:{upstream}", payload="full", capture_dir=directory, **kw)
    _traffic(proxy.port)
    stop_proxy(proxy)
    return directory


def _messages(directory: Path) -> dict[tuple[str, int], bytes | None]:
    """(dir, index per direction across calls) -> the bytes payload_bytes gives, in capture order."""
    out: dict[tuple[str, int], bytes | None] = {}
    reader = read_capture(directory)
    for _, rec in reader:
        if isinstance(rec, ev.MessageSeen):
            n = sum(1 for k in out if k[0] == rec.dir)
            data = payload_bytes(rec)
            assert data is not None and hashlib.sha256(data).hexdigest() == rec.payload_sha256
            out[rec.dir, n] = data
    assert reader.warnings == [] and reader.gaps == []
    return out


def _spy_heads(monkeypatch: pytest.MonkeyPatch) -> list[bool] | None:
    """What the proxy's check "does the head of a long message hold all its labels?" answered; None
    where the relay's recording runs compiled (replay/compiled.py): its calls into ``pieces`` are direct
    there, not looked up, so nothing can listen in. The run without compiled modules (CI's
    TRITON_TAP_PURE=1) checks the answers; every run checks the labels they led to."""
    if compiled.is_compiled(recording):
        return None
    seen: list[bool] = []
    real = pieces.only_field_from

    def spy(parts: list[bytes], pos: int, field: int) -> bool:
        seen.append(real(parts, pos, field))
        return seen[-1]

    monkeypatch.setattr(pieces, "only_field_from", spy)
    return seen


def test_full_payloads_go_to_the_side_file_and_every_reader_gets_the_same_bytes_as_inline(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heads = _spy_heads(monkeypatch)
    side = _record(start_proxy, fake_upstream.port, tmp_path / "side")
    assert heads in ([True, True], None)  # the tensor request and its echo: labelled from their heads, never joined
    inline = _record(start_proxy, fake_upstream.port, tmp_path / "inline", payload_store="inline")

    # On disk: the side store's lines hold no bytes of 1 KiB or more, only where they are (the tensor
    # request, its echo, s1's responses), one after the other; smaller messages stay base64 in their
    # lines. Inline: all base64.
    (capture,) = side.glob("*.jsonl")
    msgs = [r for r in records(capture) if r["kind"] == "message"]
    assert len(msgs) == 2 + 2 + 6
    assert all((r["payload_at"] is not None) == (r["size"] >= SIDE_MIN_BYTES) for r in msgs)
    assert all((r["payload"] is None) == (r["payload_at"] is not None) for r in msgs)
    big = [r["payload_at"] for r in msgs if r["payload_at"] is not None]
    assert len(big) == 5 and big[0][1] > len(TENSOR)
    assert [at for at, _ in big] == [sum(n for _, n in big[:i]) for i in range(len(big))]
    assert (side / naming.side_name(capture.name)).stat().st_size == sum(n for _, n in big)
    (start,) = [r for r in records(capture) if r["kind"] == "capture_start"]
    assert (start["options"]["payload"], start["options"]["payload_store"]) == ("full", "side")
    assert not list(inline.glob("*.payload"))
    assert all(r["payload"] and r["payload_at"] is None for r in records(next(inline.glob("*.jsonl")))
               if r["kind"] == "message")  # fmt: skip

    # Labels read from a long message's head equal the whole message's (the inline capture decodes it whole).
    def labels(directory: Path) -> list[dict[str, Any]]:
        drop = {"t_ns", "seq", "payload", "payload_at"}  # a stream's requests and responses may interleave differently
        msgs = [r for r in records(next(directory.glob("*.jsonl"))) if r["kind"] == "message"]
        return sorted(({k: v for k, v in r.items() if k not in drop} for r in msgs),
                      key=lambda r: (r["call"], r["dir"], r["index"]))  # fmt: skip

    assert labels(side) == labels(inline)
    assert [(t["name"], t["shape"]) for t in labels(side)[0]["inputs"]] == [("INPUT", [len(TENSOR)])]

    # The reader + payload_bytes: the same bytes either way, and they are what crossed the wire.
    got = _messages(side)
    assert got == _messages(inline)
    unary, stream = _requests()
    assert got["c2s", 0] == unary.SerializeToString() and got["c2s", 1] == stream[0].SerializeToString()

    # Matching keys (serve, diff, match): input hashes from the side file's bytes.
    keys = [c.key for c in summarize(side).candidates]
    assert [k.input_hash for k in keys] == [k.input_hash for k in (c.key for c in summarize(inline).candidates)]
    assert keys[0].input_hash == payload_key(INFER, unary.SerializeToString())
    result = diff(summarize(inline), summarize(side), strategies=["payload"])
    assert (len(result.pairs), result.only_a, result.only_b) == (3, (), ())

    # serve: the index answers with the captured bytes, marked real.
    cap = load(side)
    try:
        (call,) = cap.calls_of(INFER)
        first = call.first_response()
        assert first is not None and first.real
        assert pb.ModelInferResponse.FromString(first.data).raw_output_contents[0] == TENSOR
        (scall,) = cap.calls_of(STREAM)
        answers = [a for c in cap.candidates if c.key.kind == "stream" for a in scall.responses_of(c.seq)]
        assert [a.data for a in answers] == [got["s2c", i] for i in range(1, 7)] and all(a.real for a in answers)
    finally:
        cap.close()

    # feed: real InferResults (tensor data), not rebuilt from labels.
    texts: list[bytes] = []
    feed_stream(side, lambda result, error: texts.append(result.as_numpy("TEXT")[0]))
    assert texts == [b"x" * 2000] * 3 + [b"tok0", b"tok1", b"tok2"]

    # replay send: the requests' bodies, as captured.
    plans = {s.method: s for s in scripts(read_capture(side))}
    assert [m.body for m in plans[INFER].messages] == [unary.SerializeToString()]
    assert [m.body for m in plans[STREAM].messages] == [r.SerializeToString() for r in stream]
    assert plans[INFER].unsendable is None

    # replay upgrade: the side file goes along, the bytes read the same from the copy.
    (out,) = upgrade([str(capture)], tmp_path / "upgraded")
    assert (tmp_path / "upgraded" / naming.side_name(out.name)).exists()
    assert _messages(tmp_path / "upgraded") == got


@pytest.mark.parametrize("cap", [SIDE_MIN_BYTES - 1, SIDE_MIN_BYTES, 5000])
def test_the_cap_cuts_what_is_stored_and_1_kib_stored_goes_to_the_side_file(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy], tmp_path: Path, cap: int
) -> None:
    """--payload-cap: the first BYTES of each message are stored (the hash is of the whole one); from
    1 KiB stored they go to the side file, below it they stay base64 in the line."""
    directory = _record(start_proxy, fake_upstream.port, tmp_path / "c", payload_cap=cap)
    unary, _ = _requests()
    whole = unary.SerializeToString()
    first = next(r for _, r in read_capture(directory) if isinstance(r, ev.MessageSeen))
    assert first.payload_truncated is True and first.payload_sha256 == hashlib.sha256(whole).hexdigest()
    assert payload_bytes(first) == whole[:cap]
    assert (first.payload_at == [0, cap]) == (cap >= SIDE_MIN_BYTES) and (first.payload is None) == (cap >= SIDE_MIN_BYTES)


def test_labels_missing_from_a_long_message_head_come_from_the_whole_message(
    fake_upstream: Any, start_proxy: Callable[..., RecordingProxy], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request whose tensor bytes come before its other fields (protobuf allows any order): the
    head does not hold its labels, so the proxy decodes the whole message, and still stores it unjoined."""
    raw = pb.ModelInferRequest(raw_input_contents=[TENSOR]).SerializeToString()
    raw += pb.ModelInferRequest(model_name="echo", id="late-id", inputs=[
        pb.ModelInferRequest.InferInputTensor(name="INPUT", datatype="UINT8", shape=[len(TENSOR)])]).SerializeToString()
    heads = _spy_heads(monkeypatch)
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", payload="full", capture_dir=tmp_path)
    with grpc.insecure_channel(f"127.0.0.1:{proxy.port}", options=[("grpc.max_receive_message_length", -1)]) as ch:
        call = ch.unary_unary(INFER, request_serializer=lambda b: b, response_deserializer=pb.ModelInferResponse.FromString)
        assert call(raw, timeout=30).id == "late-id"
    stop_proxy(proxy)
    assert heads is None or heads[0] is False
    req = next(r for _, r in read_capture(tmp_path) if isinstance(r, ev.MessageSeen))
    assert (req.model, req.request_id, req.decode_error) == ("echo", "late-id", None)
    assert payload_bytes(req) == raw and req.payload_at == [0, len(raw)]

"""Triton repeats a deadline's end; through the proxy the client gets the same frames, and the capture says so.

When Triton 2.51 itself ends a streaming call at its ``grpc-timeout`` (the client has not reset the
stream first), its gRPC server sends the call's end four times in one write: trailers
(``grpc-status: 4``, ``Deadline Exceeded``, END_STREAM) then RST_STREAM(NO_ERROR), repeated
(:func:`test_triton_itself_sends_a_deadline_ending_more_than_once` pins that, with no proxy in
between). Every frame after the first trailers and their RST_STREAM is on a closed stream, which
RFC 9113 5.1 forbids; a strict HTTP/2 client whose side of the stream was closed already (it had
sent all of its requests) treats the second trailers as a connection error and drops the connection.

The proxy stays transparent: it passes those frames on verbatim, so the client sees what it sees
talking to Triton directly; and the capture says what happened: one ``call_end`` per call, the
repeats as ``late`` records with ``after: end``, which ``replay check`` reports as information
(exit 0). See docs/capture-format.md#frames-after-a-calls-end.

The client here is raw HTTP/2 (h2, strict as it ships) and logs every frame it receives. One
connection carries the conversation in which this was found: a stream cancelled stream-wide
(RST_STREAM CANCEL after its first response), a stream that meets its deadline on the server, then
unary calls.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from contextlib import redirect_stdout
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from tritonclient.grpc import service_pb2

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer
from replay.capture import events as ev
from replay.capture.methods import INFER, STREAM_INFER
from replay.capture.reader import read_capture
from replay.cli.main import main as replay_main
from tests.support.raw_h2 import END_STREAM, HEADERS, RST_STREAM, Frame, RawClient, tokens_request

pytestmark = pytest.mark.timeout(240)

#: The deadline stream's ``grpc-timeout``, and its model's pace: it is at its fourth of 1000 tokens
#: when Triton's deadline ends it.
DEADLINE = "1000m"
TOKEN_DELAY_MS = 300
UNARY = 3


def _echo(rid: str, i: int) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="echo", id=rid)
    request.inputs.add(name="INPUT", datatype="UINT8", shape=[3])
    request.raw_input_contents.append(bytes([i, 1, 2]))
    return request


@dataclass(frozen=True)
class Conversation:
    client: RawClient
    cancelled: int
    deadline: int
    unary: list[int]


def _converse(url: str, half_closed: bool) -> Conversation:
    """The conversation on one connection; ``half_closed``: the deadline stream's client side ends
    with its request (as a client that sent everything it had), else it stays open."""
    host, port = url.rsplit(":", 1)
    client = RawClient(host, int(port))
    try:
        cancelled = client.open(STREAM_INFER)
        client.send(cancelled, tokens_request("long", "l", 1000, 200), end=False)
        assert client.wait(lambda: client.responses(cancelled) >= 1), f"no first response: {client.error}"
        client.reset(cancelled)  # the stream-wide cancel

        deadline = client.open(STREAM_INFER, timeout=DEADLINE)
        client.send(deadline, tokens_request("slow", "s", 1000, TOKEN_DELAY_MS), end=half_closed)
        # Its trailers as logged, not h2's StreamEnded: h2 raises in the read that holds the repeats.
        assert client.wait(lambda: bool(_endings(client.on(deadline))) or client.closed), (
            "the deadline stream never ended"
        )

        unary = []
        for i in range(UNARY):
            if client.closed:
                break
            sid = client.open(INFER)
            unary.append(sid)
            client.send(sid, _echo(f"u{i}", i), end=True)
            client.wait(partial(client.ended, sid))
        return Conversation(client, cancelled, deadline, unary)
    finally:
        client.close()


def _endings(frames: list[Frame]) -> list[str]:
    """A stream's ending frames in order: trailers (HEADERS with END_STREAM) and RST_STREAM."""
    return [str(f) for f in frames if f.type == RST_STREAM or (f.type == HEADERS and f.flags & END_STREAM)]


def _ended(frames: list[Frame]) -> list[str]:
    """What came on a stream from its first end (trailers or RST_STREAM) on, WINDOW_UPDATE aside."""
    for i, f in enumerate(frames):
        if f.type == RST_STREAM or (f.type == HEADERS and f.flags & END_STREAM):
            return [str(g) for g in frames[i:] if g.type != 0x8]
    return []


DEADLINE_TRAILERS = "HEADERS END_STREAM {'grpc-status': '4', 'grpc-message': 'Deadline Exceeded'}"


def test_triton_itself_sends_a_deadline_ending_more_than_once(triton: TritonServer) -> None:
    """What the proxy passes on, with no proxy in between: Triton 2.51 ends a deadline's call with
    trailers and RST_STREAM(NO_ERROR) four times over (stream left open by the client, so h2 ignores
    the repeats as frames on a stream reset by its peer)."""
    talk = _converse(triton.grpc_url, half_closed=False)
    endings = _endings(talk.client.on(talk.deadline))
    assert len(endings) > 2, endings
    assert endings[0] == DEADLINE_TRAILERS, endings


@pytest.mark.parametrize("half_closed", [True, False], ids=["half-closed", "open"])
def test_the_proxy_passes_the_repeats_on_and_records_them_as_late_after_end(
    triton: TritonServer, tmp_path: Path, half_closed: bool
) -> None:
    direct = _converse(triton.grpc_url, half_closed)
    with ProxyThread(triton.grpc_url, tmp_path / "captures", payload="meta", drain_timeout=5) as proxy:
        talk = _converse(proxy.url, half_closed)
    client = talk.client
    frames = "\n".join(f"  stream {f.sid}: {f}" for f in client.frames if f.sid)

    # The wire: transparent. The deadline stream's end, repeats and all, is what Triton sends directly,
    # and the strict client fares as it does directly (half-closed: it drops the connection on the
    # second trailers; open: it ignores them and its unary calls are answered).
    seen = _ended(client.on(talk.deadline))
    assert seen == _ended(direct.client.on(direct.deadline)), f"direct:\n{direct.client.frames}\nproxied:\n{frames}"
    assert seen[0] == DEADLINE_TRAILERS and len(seen) > 2, frames
    assert (client.error is None) == (direct.client.error is None), (client.error, direct.client.error)
    assert (client.error is None) == (not half_closed), client.error
    if not half_closed:
        assert [client.status(sid) for sid in talk.unary] == ["0"] * UNARY, frames

    # The capture: one call_end for each call, and each frame after the deadline call's end (but the
    # first RST_STREAM(NO_ERROR), which RFC 9113 8.1 allows) as a late record, after: end.
    starts: list[str] = []
    ends: Counter[str] = Counter()
    causes: dict[str, str] = {}
    late: list[ev.LateFrameSeen] = []
    for _, record in read_capture([proxy.capture_path]):
        if isinstance(record, ev.CallStarted):
            starts.append(record.call)
        elif isinstance(record, ev.CallEnded):
            ends[record.call] += 1
            causes[record.call] = record.cause
        elif isinstance(record, ev.LateFrameSeen):
            late.append(record)
    assert ends == Counter(starts), f"call_end records per call: {dict(ends)}; calls: {starts}"
    assert [causes[c] for c in starts] == ["client_cancel", "deadline"] + ["ok"] * len(talk.unary), causes
    deadline_call = starts[1]
    expected = [("trailers", "4 Deadline Exceeded") if f.startswith("HEADERS") else ("rst", None) for f in seen[2:]]
    after_end = [r for r in late if r.after == "end"]
    assert [(r.call, r.frame, r.error if r.frame == "trailers" else None) for r in after_end] == [
        (deadline_call, *e) for e in expected
    ], late
    assert all(r.rst_code == 0 for r in after_end if r.frame == "rst"), late

    # replay check: information, not a failure.
    out = io.StringIO()
    with redirect_stdout(out):
        code = replay_main(["check", str(proxy.capture_path)])
    assert code == 0, out.getvalue()
    assert f"{len(expected)} frame(s) the upstream sent after a call had ended" in out.getvalue(), out.getvalue()
    out = io.StringIO()
    with redirect_stdout(out):
        code = replay_main(["check", "--json", str(proxy.capture_path)])
    assert code == 0 and json.loads(out.getvalue())["summary"]["late_after_end"] == len(expected)

"""`replay send` reports every call with the outcome it observed, and never loses calls it did not see end.

The peers here are scripted HTTP/2 servers (tests/proxy/resend/scripted_peer.py) because no real
server produces these on demand: frames arriving for a call that is already over (after send's own
RST_STREAM, or after the server's own END_STREAM), and a connection reset in the middle of a run.
The behaviour a real tritonserver shows (a deadline, then unary calls on the same connection) is
tested against one in tests/e2e/test_send_deadline_e2e.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from proxy.cli import main
from proxy.lab.background import ProxyThread
from proxy.resend.h2client import BY_SEND, LOST, NOT_SENT, RESET, STATUS
from proxy.resend.plan import CallScript, Ending, Message
from proxy.resend.run import SendOptions, Tally, drive
from proxy.resend.schedule import Start, plan_starts
from proxy.wire import frames as wire
from replay.capture import events as ev
from tests.proxy.resend.scripted_peer import PeerConn, ScriptedPeer, stray_data, stray_trailers
from tests.support.loop_thread import BackgroundLoop
from tests.support.triton_client import echo_inputs

pytestmark = pytest.mark.timeout(60)

INFER = "/inference.GRPCInferenceService/ModelInfer"


def _unary(cid: str, timeout_ms: float | None = None) -> CallScript:
    headers = [(":method", "POST"), (":scheme", "http"), (":path", INFER), (":authority", "peer"),
               ("content-type", "application/grpc"), ("te", "trailers")]  # fmt: skip
    if timeout_ms is not None:
        headers.append(("grpc-timeout", f"{int(timeout_ms)}m"))
    return CallScript(id=cid, conn="c1", method=INFER, t_start=0, headers=headers, timeout_ms=timeout_ms,
                      messages=[Message(at_ns=0, body=b"", compressed=False, model=None)], half_close_ns=0)  # fmt: skip


async def _drive(peer: ScriptedPeer, starts: list[Start]) -> Tally:
    port = await peer.start()
    tally = Tally(total=len(starts))
    try:
        await drive(starts, port, SendOptions(target="unused:1", out=Path("unused"), speed=1.0, drain_s=10), tally)
    finally:
        await peer.stop()
    return tally


def test_frames_after_sends_own_rst_stream_end_nothing_else() -> None:
    """send gives up on call 1 at its deadline (RST_STREAM); the server's DATA and trailers for it
    arrive afterwards; call 2 on the same connection still gets its answer, and nothing is lost."""

    def act(c: PeerConn, sid: int) -> None:
        if c.requests == 1:
            c.headers_only(sid)  # call 1 stays open until the client's deadline
        else:
            c.answer(sid)

    def on_reset(c: PeerConn, sid: int) -> None:
        c.raw(stray_data(sid) + stray_trailers(sid, 4))  # in flight when the RST_STREAM arrived

    peer = ScriptedPeer(act, on_reset)
    starts = [Start(at_s=0.0, loop=0, call=_unary("c1.1", timeout_ms=100)), Start(at_s=0.5, loop=0, call=_unary("c1.3"))]
    tally = asyncio.run(_drive(peer, starts))
    assert peer.conns[0].resets == [1]  # the deadline was re-enacted
    assert (tally.started, dict(tally.outcomes), tally.unobserved) == (2, {BY_SEND: 1, STATUS: 1}, [])
    assert len(peer.conns) == 1
    assert tally.stray_frames == 0  # frames after send's own reset are not what the summary counts (docs/send.md)


@pytest.mark.parametrize(("recorded", "sent"), [(None, wire.CANCEL), (wire.CANCEL, wire.CANCEL), (11, 11)])
def test_a_client_cancel_is_re_enacted_with_its_recorded_reset_code(recorded: int | None, sent: int) -> None:
    """A recorded client that refused a response over its receive limit reset with ENHANCE_YOUR_CALM (11),
    and the recorder wrote RESOURCE_EXHAUSTED for it: send resets with that code, so the new capture reads the
    same; a cancel without a recorded code is CANCEL, as before."""

    def act(c: PeerConn, sid: int) -> None:
        c.headers_only(sid)  # open until the client ends it

    call = dataclasses.replace(_unary("c1.1"), ending=Ending(cause="client_cancel", at_ns=50_000_000, responses=0,
                                                             rst_code=recorded))  # fmt: skip
    peer = ScriptedPeer(act)
    tally = asyncio.run(_drive(peer, [Start(at_s=0.0, loop=0, call=call)]))
    assert (peer.conns[0].resets, peer.conns[0].reset_codes) == ([1], [sent])
    assert (tally.started, dict(tally.outcomes), tally.endings["client_cancel"]) == (1, {BY_SEND: 1}, 1)


def test_frames_after_the_servers_own_end_stream_end_nothing_else() -> None:
    """The shape the recorder produced when its own deadline ended a call: trailers (END_STREAM),
    RST_STREAM(NO_ERROR), then trailers again. h2 calls the second trailers a connection error; send
    ignores it for that call, as gRPC clients do, and the calls after it are answered."""

    def act(c: PeerConn, sid: int) -> None:
        if c.requests == 1:
            c.answer(sid, status=4, message="Deadline Exceeded")
            c.raw(wire.rst_stream(sid, wire.NO_ERROR) + stray_trailers(sid, 4))
        else:
            c.answer(sid)

    starts = [Start(at_s=0.1 * i, loop=0, call=_unary(f"c1.{2 * i + 1}")) for i in range(4)]
    tally = asyncio.run(_drive(ScriptedPeer(act), starts))
    assert (tally.started, dict(tally.outcomes), tally.unobserved) == (4, {STATUS: 4}, [])
    assert tally.stray_frames == 1


def test_frames_after_the_servers_own_reset_are_counted_too() -> None:
    """Triton at a streaming call's deadline: RST_STREAM, then trailers and RST_STREAM again (seen four times on one
    call). h2 answers frames on a stream the server reset by itself, without an error, so send's summary said
    nothing of them, though docs/send.md promises the count; they are counted as those after an END_STREAM are."""

    def act(c: PeerConn, sid: int) -> None:
        if c.requests == 1:
            c.headers_only(sid)
            c.raw(wire.rst_stream(sid, wire.CANCEL) + (stray_trailers(sid, 4) + wire.rst_stream(sid, wire.CANCEL)) * 2)
        else:
            c.answer(sid)

    starts = [Start(at_s=0.1 * i, loop=0, call=_unary(f"c1.{2 * i + 1}")) for i in range(3)]
    tally = asyncio.run(_drive(ScriptedPeer(act), starts))
    assert (tally.started, dict(tally.outcomes), tally.unobserved) == (3, {RESET: 1, STATUS: 2}, [])
    assert tally.stray_frames == 4


def test_request_messages_due_after_the_server_ended_the_call_are_counted_as_not_sent() -> None:
    """A streaming call's three messages at 0, 150 and 300 ms; this server ends the call as soon as it opens. The
    last two cannot go: send skipped them without a word (only diff's "only in A" showed them); the summary now
    counts them (`not sent: 2 request message(s) of 1 call(s) the server had ended before their offset`)."""

    def refuse(c: PeerConn, sid: int) -> None:
        c.answer(sid, status=3, message="no")

    stream = dataclasses.replace(_unary("c1.1"), messages=[Message(at_ns=ms * 1_000_000, body=b"", compressed=False,
                                                                   model=None) for ms in (0, 150, 300)],
                                 half_close_ns=400_000_000)  # fmt: skip
    tally = asyncio.run(_drive(ScriptedPeer(lambda c, sid: None, on_open=refuse), [Start(at_s=0.0, loop=0, call=stream)]))
    assert (tally.unsent_messages, tally.cut_calls, dict(tally.outcomes)) == (2, 1, {STATUS: 1})


def test_a_connection_reset_mid_run_ends_every_remaining_call_with_why() -> None:
    """The server resets the TCP connection when call 2 arrives: call 1 was answered; call 2 ends
    `connection lost`; calls 3 and 4, due later on that connection, are `not sent`; none is counted
    as sent or answered."""

    def act(c: PeerConn, sid: int) -> None:
        if c.requests == 1:
            c.answer(sid)
        else:
            c.reset_tcp()

    starts = [Start(at_s=0.0, loop=0, call=_unary("c1.1")), Start(at_s=0.2, loop=0, call=_unary("c1.3")),
              Start(at_s=1.0, loop=0, call=_unary("c1.5")), Start(at_s=1.2, loop=0, call=_unary("c1.7"))]  # fmt: skip
    tally = asyncio.run(_drive(ScriptedPeer(act), starts))
    assert tally.outcomes[STATUS] == 1 and tally.finished == 4
    lost = {u.call: u.outcome for u in tally.unobserved}
    assert lost == {"c1.3": LOST, "c1.5": NOT_SENT, "c1.7": NOT_SENT}, tally.unobserved
    assert tally.started == 2
    assert all(u.why for u in tally.unobserved), tally.unobserved


def test_a_connect_that_fails_is_not_sent_and_the_next_call_of_its_connection_connects_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first connect fails (EMFILE, what a full descriptor table gives; injected here, since making this
    process run out of descriptors would take the test runner with it): that call is `not sent`, saying why,
    and the next call of the same captured connection opens a new one and is answered (it used to find the
    failed connection kept, without a socket, and crash the run)."""
    real = asyncio.open_connection
    failures = [OSError(errno.EMFILE, "Too many open files")]

    async def first_connect_fails(*args: Any, **kw: Any) -> Any:
        if failures:
            raise failures.pop()
        return await real(*args, **kw)

    monkeypatch.setattr(asyncio, "open_connection", first_connect_fails)
    starts = [Start(at_s=0.0, loop=0, call=_unary("c1.1")), Start(at_s=0.2, loop=0, call=_unary("c1.3"))]
    tally = asyncio.run(_drive(ScriptedPeer(lambda c, sid: c.answer(sid)), starts))
    assert (tally.finished, tally.started, dict(tally.outcomes)) == (2, 1, {NOT_SENT: 1, STATUS: 1})
    (lost,) = tally.unobserved
    assert (lost.call, lost.outcome, lost.why) == ("c1.1", NOT_SENT, "cannot connect to the recorder: Too many open files")


# -- through the CLI and the real recorder ------------------------------------------------------------


def _record(loop: BackgroundLoop, tmp_path: Path) -> Path:
    """Five unary calls by tritonclient on one channel, recorded (payload full) in front of a peer
    that answers them all: two, a gap of 2 s, three."""
    peer = ScriptedPeer(lambda c, sid: c.answer(sid))
    port = loop.run(peer.start())
    try:
        with ProxyThread(f"127.0.0.1:{port}", tmp_path / "recorded", payload="full") as proxy:
            client = grpcclient.InferenceServerClient(proxy.url)
            for i in range(5):
                if i == 2:
                    # A gap in the recorded traffic (data, not a wait): sent at speed 1, the last
                    # three calls are due well after the connection is gone.
                    time.sleep(2.0)
                client.infer("echo", echo_inputs(np.array([i], dtype=np.uint8)), request_id=f"u{i}")
            client.close()
    finally:
        loop.run(peer.stop())
    return proxy.capture_path


def _send_to_target_resetting_at(n: int, loop: BackgroundLoop, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:  # fmt: skip
    """:func:`_record`'s five calls sent (CLI) to a target that answers each call until the ``n``-th, and resets
    its TCP connection when that one arrives: exit code, stdout, stderr. At the recorded pace, so each call goes
    only after the one before it has ended (at --speed max they would go at once, the reset before the answers)."""
    capture = _record(loop, tmp_path)

    def act(c: PeerConn, sid: int) -> None:
        if c.requests < n:
            c.answer(sid)
        else:
            c.reset_tcp()

    peer = ScriptedPeer(act)
    port = loop.run(peer.start())
    try:
        capsys.readouterr()
        code = main(["replay", "send", str(capture), "--target", f"127.0.0.1:{port}", "--out", str(tmp_path / "sent")])
    finally:
        loop.run(peer.stop())
    out, err = capsys.readouterr()
    return code, out, err


def test_the_upstream_resetting_the_connection_names_every_call_not_seen_to_end(
    loop: BackgroundLoop, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sent to an upstream that resets its connection when the 2nd call arrives: the recorder ends
    that call UNAVAILABLE (its own status, so the call's answer was lost) and sends GOAWAY; the calls due
    after it on that connection are named on stderr as not sent, `sent` counts only the calls that went
    out, exit 1."""
    code, out, err = _send_to_target_resetting_at(2, loop, tmp_path, capsys)
    assert code == 1, (out, err)
    assert "sent 2 call(s) of 5 captured" in out, out
    assert "outcomes seen by send: grpc-status 1, connection lost 1, not sent 3" in out, out
    lines = err.splitlines()
    assert lines[:2] == ["send: 4 of 5 call(s) ended without an outcome send observed",
                         "send: connection lost (send's recorder: upstream connection lost): 1 call(s): c1.3"], err  # fmt: skip
    assert len(lines) == 3 and lines[2].startswith("send: not sent (GOAWAY"), err
    assert lines[2].endswith(": 3 call(s): c1.5, c1.7, c1.9"), err


def test_a_status_the_recorder_made_up_for_a_lost_target_is_no_outcome_send_observed(
    loop: BackgroundLoop, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The target resets its connection when the last call arrives. The client then gets UNAVAILABLE from send's
    own recorder (`triton-tap: upstream connection lost`), not from the target: that call's answer never
    reached send, so it is `connection lost` with the recorder's reason, and send exits 1. It counted it as a
    grpc-status observed and exited 0, "every call sent and its outcome observed", with a call lost."""
    code, out, err = _send_to_target_resetting_at(5, loop, tmp_path, capsys)
    assert code == 1, (out, err)
    assert "outcomes seen by send: grpc-status 4, connection lost 1" in out, out
    assert err.splitlines() == [
        "send: 1 of 5 call(s) ended without an outcome send observed",
        "send: connection lost (send's recorder: upstream connection lost): 1 call(s): c1.9",
    ], err


async def _http_target(answer_first: int) -> tuple[asyncio.Server, int]:
    """An HTTP server answering each request 200 `{}` that stops listening once it has answered ``answer_first``
    (its connections open so far stay): a target gone mid-run, which no real server here does on cue."""
    answered = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
                await writer.drain()
                answered += 1
                if answered == answer_first:
                    server.close()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_the_recorders_own_502_for_a_target_gone_is_no_http_status_send_observed(
    loop: BackgroundLoop, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two HTTP clients, one call each, recorded. Sent to a target that stops listening after the first: the
    second connection's call gets the recorder's own 502 (`{"error":"triton-tap: upstream ... unreachable"}`),
    not the target's. send counted it as `HTTP status seen by send: 502` and exited 0; it is `connection
    lost` with the recorder's reason, and exit 1."""
    import http.client

    from proxy.ops.server import ProxyConfig, RecordingProxy

    server, port = loop.run(_http_target(answer_first=0))
    proxy = RecordingProxy(ProxyConfig(listen="", upstream="", http_listen="127.0.0.1:0", http_upstream=f"127.0.0.1:{port}",
                                       capture_dir=tmp_path / "recorded", payload="full"))  # fmt: skip
    loop.run(proxy.start())
    try:
        for _ in range(2):
            client = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
            client.request("GET", "/v2/health/ready")
            assert client.getresponse().read() == b"{}"
            client.close()
    finally:
        loop.run(proxy.stop())
        server.close()
    server, port = loop.run(_http_target(answer_first=1))
    try:
        capsys.readouterr()
        code = main(["replay", "send", str(proxy.capture_path), "--http-target", f"127.0.0.1:{port}",
                     "--out", str(tmp_path / "sent")])  # fmt: skip
    finally:
        server.close()
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    assert "outcomes seen by send: connection lost 1, HTTP body ended 1" in out, out
    assert "HTTP status seen by send: 200 1; 1 event(s) or whole body(ies) received" in out, out
    lines = [line for line in err.splitlines() if line.startswith("send:")]  # (not the recorder's log lines)
    assert lines == ["send: 1 of 2 call(s) ended without an outcome send observed",
                     f"send: connection lost (send's recorder: upstream 127.0.0.1:{port} unreachable: Connection refused): "
                     "1 call(s): c2.1"], err  # fmt: skip


def test_a_call_waiting_for_earlier_ends_goes_from_the_last_of_those_not_from_a_later_one() -> None:
    """`_Ended.until(n)` is the time the first n calls (by captured end) had all ended: a call of the connection
    ending later (one the waiting call did not wait for) does not push it back (it did: the prefix's last
    growth was taken, and the call went out that much later, its lag not counted)."""
    from proxy.resend.run import _Ended

    async def run() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        now = [1.0]
        loop.time = lambda: now[0]  # type: ignore[method-assign]  # (no timer runs here)
        ended = _Ended()
        ended.ended(0)
        now[0] = 5.0
        ended.ended(2)  # (out of order: the first two are not all over yet)
        now[0] = 7.0
        ended.ended(1)
        return await ended.until(1), await ended.until(2), await ended.until(3)

    assert asyncio.run(run()) == (1.0, 7.0, 7.0)


def test_calls_begun_before_the_capture_are_counted_as_captured_and_not_sent(
    loop: BackgroundLoop, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rotated file holding a call whose call_start is in the file before it: `sent 1 call(s) of 2 captured`
    and a line saying why the other was not, never `1 of 1` as if the file held one call."""
    (tmp_path / "later.jsonl").write_bytes(_unary_capture(without_start="c1.1"))
    code, out, err = _send_to_peer(loop, tmp_path, capsys, tmp_path / "later.jsonl")
    assert code == 0, (out, err)
    assert "sent 1 call(s) of 2 captured" in out, out
    assert "not sent: 1 call(s) that began before the capture (their call_start is not in it" in out, out


def test_a_call_the_recording_proxy_refused_is_not_sent_and_the_summary_says_so(
    loop: BackgroundLoop, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """c1.3 crossed the proxy's shutdown GOAWAY: refused unprocessed, its client free to retry it (its retry, made
    through the proxy, is a call of the capture's own). It was sent anyway, its request kept back, so it waited
    `--drain` and was cut; now it is left out with a line saying why, and the recorded causes count only c1.1."""
    (tmp_path / "refused.jsonl").write_bytes(_unary_capture(refused=("c1.3",)))
    code, out, err = _send_to_peer(loop, tmp_path, capsys, tmp_path / "refused.jsonl")
    assert code == 0, (out, err)
    assert "sent 1 call(s) of 2 captured" in out, out
    assert ("not sent: 1 call(s) the recording proxy refused unprocessed (REFUSED_STREAM at a GOAWAY; a client may "
            "retry such a call itself, and its retry is a call of its own)") in out, out
    assert "causes (recorded -> new): ok 1 -> 1" in out, out


def test_a_capture_of_refused_calls_only_has_nothing_to_send(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "refused.jsonl").write_bytes(_unary_capture(refused=("c1.1", "c1.3")))
    code = main(["replay", "send", str(tmp_path / "refused.jsonl"), "--target", "127.0.0.1:9", "--out",
                 str(tmp_path / "sent")])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 2 and err.strip().splitlines()[-1].endswith(
        "no call to send: the 2 selected were refused unprocessed by the recording proxy"), (out, err)
    assert not (tmp_path / "sent").exists()


def test_with_loop_the_recorded_causes_are_per_pass(
    loop: BackgroundLoop, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--loop 3` sends each captured call three times: the summary says the recorded count is per pass."""
    (tmp_path / "two.jsonl").write_bytes(_unary_capture())
    code, out, err = _send_to_peer(loop, tmp_path, capsys, tmp_path / "two.jsonl", "--loop", "3")
    assert code == 0, (out, err)
    assert "causes (recorded x3 -> new): ok 2 x3 -> 6" in out, out


def _unary_capture(without_start: str | None = None, refused: tuple[str, ...] = ()) -> bytes:
    """Two unary calls c1.1 and c1.3 (payload full), the call_start of ``without_start`` left out; those of
    ``refused`` as the recording proxy refused them at its shutdown: their request kept back (no message),
    REFUSED_STREAM to the client, a call_end marked ``refused``."""
    from tests.data.make_golden import INFER, Builder

    b = Builder(payload="full").start()
    for cid in ("c1.1", "c1.3"):
        b.call(cid, method=INFER)
        b.request(cid, cid, model="echo", empty_final=None)
        b.response(cid, cid, "hi", final=None, model="echo")
        b.half_close(cid, ms=0)
        b.end(cid)
    # (each call_start as a client's: the builder's carries no :scheme or :authority)
    b.records = [dataclasses.replace(r, metadata=[[":scheme", "http"], [":authority", "t"], *r.metadata])
                 if isinstance(r, ev.CallStarted) else r
                 for r in b.records if not (isinstance(r, ev.CallStarted) and r.call == without_start)]  # fmt: skip
    b.records = [dataclasses.replace(r, status="UNAVAILABLE", cause="proxy_shutdown", trailers=None, initial_metadata=None,
                                     details="triton-tap: connection is shutting down (GOAWAY): stream not processed",
                                     messages_c2s=0, messages_s2c=0, refused=True)
                 if isinstance(r, ev.CallEnded) and r.call in refused else r
                 for r in b.records
                 if getattr(r, "call", None) not in refused or isinstance(r, ev.CallStarted | ev.CallEnded)]  # fmt: skip
    return b.finish().render()


def _send_to_peer(loop: BackgroundLoop, tmp_path: Path, capsys: pytest.CaptureFixture[str], capture: Path,
                  *extra: str) -> tuple[int, str, str]:  # fmt: skip
    """``replay send`` (CLI, --speed max) to a peer answering every call OK: exit code, stdout, stderr."""
    peer = ScriptedPeer(lambda c, sid: c.answer(sid))
    port = loop.run(peer.start())
    capsys.readouterr()
    try:
        code = main(["replay", "send", str(capture), "--target", f"127.0.0.1:{port}", "--out", str(tmp_path / "sent"),
                     "--speed", "max", *extra])  # fmt: skip
    finally:
        loop.run(peer.stop())
    out, err = capsys.readouterr()
    return code, out, err


def test_a_call_on_another_connection_waits_for_the_calls_that_had_ended_before_it_began() -> None:
    """Captured: c1.1 (0-10 ms) and c1.3 (20-30 ms) on one connection, then c2.1 (40 ms) on a second one, after
    both had ended (a second client going on where the first stopped). The server takes 300 ms to answer c1.1:
    c1.3 waits for it, and c2.1 waited only for its offset, reaching the server before c1.3 (Triton refused the
    next sequence's calls so). It now reaches it only after c1.3's answer; the summary counts both calls held."""
    events: list[tuple[str, int, int]] = []  # ("got" or "answered", connection, its n-th call), in order

    def act(c: PeerConn, sid: int) -> None:
        call = (peer.conns.index(c), c.requests)
        events.append(("got", *call))

        def answer() -> None:
            c.answer(sid)
            events.append(("answered", *call))

        if call == (0, 1):
            asyncio.get_running_loop().call_later(0.3, answer)  # the new server is slower at the first call
        else:
            answer()

    calls = []
    for cid, start_ms, end_ms in (("c1.1", 0, 10), ("c1.3", 20, 30), ("c2.1", 40, 41)):
        c = dataclasses.replace(_unary(cid), conn=cid.split(".")[0], t_start=start_ms * 1_000_000)
        c.t_end = end_ms * 1_000_000
        calls.append(c)
    peer = ScriptedPeer(act)
    tally = asyncio.run(_drive(peer, plan_starts(calls, 1.0, 1)))
    assert (tally.started, dict(tally.outcomes)) == (3, {STATUS: 3})
    assert events == [("got", 0, 1), ("answered", 0, 1), ("got", 0, 2), ("answered", 0, 2), ("got", 1, 1),
                      ("answered", 1, 1)], events  # fmt: skip
    # Both went out later than their offsets for it (c1.1's answer came 300 ms in at the earliest).
    assert tally.held.count == 2 and tally.held.worst > 0.25, tally.held

"""`replay send` of a deadline followed by unary calls on one connection, against the real tritonserver.

One tritonclient channel carries, in order: a stream cancelled with its requests (a stream-wide
cancel), a stream that meets its deadline, then unary calls. Sent again, every call must reach the
server and end as recorded, and send's summary must count what it observed. (Before, the frames
the recorder sent for the deadline's call after it had ended made the sender drop its connection:
the unary calls after it were never sent, while the summary said they were and the exit code was 0.)
"""

from __future__ import annotations

import queue
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from proxy.lab.background import ProxyThread
from proxy.lab.tritonserver import TritonServer
from proxy.resend.plan import scripts
from replay.capture.reader import read_capture
from replay.machine.tracker import track
from tests.e2e.test_replay_e2e import DEADLINE_S
from tests.support.triton_client import describe, echo_inputs, token_inputs

pytestmark = pytest.mark.timeout(300)

WAIT_S = 60.0
UNARY = 4


def _session(url: str) -> None:
    """The recorded client: one channel, so one HTTP/2 connection for every call."""
    client = grpcclient.InferenceServerClient(url)
    events: queue.Queue[tuple[Any, ...]] = queue.Queue()

    def take_until(done: Any) -> None:
        while not done(events.get(timeout=WAIT_S)):
            pass

    final = {"enable_empty_final_response": True}
    client.start_stream(callback=lambda result, error: events.put(describe(result, error)))
    client.async_stream_infer("tokens", token_inputs("l", 1000, delay_ms=3000), request_id="long", **final)
    take_until(lambda e: e[0] == "result" and e[1] == "long")
    client.stop_stream(cancel_requests=True)
    client.start_stream(callback=lambda result, error: events.put(describe(result, error)), stream_timeout=DEADLINE_S)
    client.async_stream_infer("tokens", token_inputs("s", 1000, delay_ms=300), request_id="slow", **final)
    take_until(lambda e: e[0] == "error")
    client.stop_stream()
    for i in range(UNARY):
        client.infer("echo", echo_inputs(np.array([i, 1, 2], dtype=np.uint8)), request_id=f"u{i}")
    client.close()


def _send(recorded: Path, triton: TritonServer, out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`replay send` of ``recorded`` at the server, as a user runs it: the process and its new capture."""
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from proxy.cli import main; sys.exit(main(sys.argv[1:]))", "replay", "send",
         str(recorded), "--target", triton.grpc_url, "--out", str(out), *args],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    (new,) = out.glob("*.jsonl")
    return proc, new


def _causes(capture: Path) -> Counter[str]:
    return Counter(c.cause or "open" for c in track(capture).calls)


def test_a_deadline_then_unary_calls_on_one_connection_are_all_sent_and_counted(
    triton: TritonServer, tmp_path: Path
) -> None:
    with ProxyThread(triton.grpc_url, tmp_path / "recorded", payload="full") as proxy:
        _session(proxy.url)
    recorded = proxy.capture_path
    total = 2 + UNARY
    assert _causes(recorded) == {"client_cancel": 1, "deadline": 1, "ok": UNARY}
    assert {c.conn for c in scripts(read_capture([recorded]))} == {"c1"}  # one connection for every call

    proc, new = _send(recorded, triton, tmp_path / "sent", "--cancel-at", "responses")
    assert _causes(new) == _causes(recorded), proc.stdout + proc.stderr  # every call reached the server
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not [ln for ln in proc.stderr.splitlines() if ln.startswith("send:")], proc.stderr
    assert f"sent {total} call(s) of {total} captured" in proc.stdout, proc.stdout
    # The stream-wide cancel is always send's own; the deadline is Triton's (send resets a call only past its
    # timeout by a margin), unless Triton is late by more than that on a loaded machine: either way every
    # call is counted once.
    seen = re.search(r"outcomes seen by send: grpc-status (\d+), ended by send (\d+)$", proc.stdout, re.M)
    assert seen is not None, proc.stdout
    by_status, by_send = int(seen[1]), int(seen[2])
    assert (by_status, by_send) in {(total - 1, 1), (total - 2, 2)}, proc.stdout
    ended = "client_cancel 1, deadline 1" if by_send == 2 else "client_cancel 1"
    assert f"ended by send: {ended}\n" in proc.stdout, proc.stdout


SHORT = 40


def test_deadlines_sent_all_at_once_stay_deadlines(triton: TritonServer, tmp_path: Path) -> None:
    """Clients' sessions of 40 short streams, each on its connection, and two calls that meet a 0.5 s deadline (a unary and a stream),
    sent with `--speed max`: all 42 calls start at once. The sender's timer started when it queued a call and
    the recorder's clock when it read it, tens of ms later under that load: a reset at the timeout by the
    sender's clock was a client_cancel by the recorder's (deadline 2 -> 0, found live, and diff called it a
    regression). Each stays a deadline."""
    own = [("grpc.use_local_subchannel_pool", 1)]  # each client its own connection, as separate processes have
    with ProxyThread(triton.grpc_url, tmp_path / "recorded", payload="full") as proxy:
        for i in range(SHORT):
            events: queue.Queue[tuple[Any, ...]] = queue.Queue()
            with grpcclient.InferenceServerClient(proxy.url, channel_args=own) as one:
                one.start_stream(callback=lambda result, error, q=events: q.put(describe(result, error)))
                one.async_stream_infer("tokens", token_inputs("s" * 200, 3, delay_ms=1), request_id=f"s{i}",
                                       enable_empty_final_response=True)  # fmt: skip
                while events.get(timeout=WAIT_S)[2] is not True:
                    pass
                one.stop_stream()
        client = grpcclient.InferenceServerClient(proxy.url, channel_args=own)
        late: queue.Queue[tuple[Any, ...]] = queue.Queue()
        client.start_stream(callback=lambda result, error: late.put(describe(result, error)), stream_timeout=0.5)
        client.async_stream_infer("tokens", token_inputs("d", 1000, delay_ms=100), request_id="ds")
        while late.get(timeout=WAIT_S)[0] != "error":
            pass
        client.stop_stream()
        with pytest.raises(Exception, match="Deadline"):
            client.infer("echo", echo_inputs(np.array([1, 2], dtype=np.uint8), delay_ms=3000), request_id="du",
                         client_timeout=0.5)  # fmt: skip
        client.close()
    recorded = proxy.capture_path
    assert _causes(recorded) == {"deadline": 2, "ok": SHORT}
    proc, new = _send(recorded, triton, tmp_path / "sent", "--speed", "max")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _causes(new) == {"deadline": 2, "ok": SHORT}, proc.stdout

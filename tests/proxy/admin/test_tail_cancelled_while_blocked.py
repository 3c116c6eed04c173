"""A watcher that cancels its Tail while the proxy's write to it is blocked must not crash the proxy.

Tail is an async generator on grpc's aio server. A client that stops reading, then cancels, leaves the generator
waiting at a yield (its write blocked on HTTP/2 flow control): grpc releases the call, and asyncio closes the
generator later, in a task of its own. Its finally called context.peer() then, which in grpc 1.85 dereferences the
released call: a segfault of the recording proxy (seen once in a full test run, as a worker that died in
test_a_watcher_that_stops_reading_stays_within_its_bound). Run in a child process, since the failure is a crash.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.paths import ROOT

CHILD = textwrap.dedent('''
    import asyncio, faulthandler, threading, types
    faulthandler.enable()
    import grpc
    from proxy.admin.hub import TapHub
    from proxy.admin.pb import admin_pb2 as pb, admin_pb2_grpc as pb_grpc
    from proxy.admin.service import AdminServicer
    from replay.aioserver import Handlers

    class Rec:  # (what the hub reads of a record)
        kind = "mark"

    async def main() -> None:
        hub, handlers = TapHub(), Handlers()
        server = grpc.aio.server()
        pb_grpc.add_AdminServiceServicer_to_server(AdminServicer(types.SimpleNamespace(relays=()), hub, handlers), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        call = pb_grpc.AdminServiceStub(channel).Tail(pb.TailRequest())
        started, stop = threading.Event(), threading.Event()

        def reader() -> None:  # reads the first message, then stops reading
            next(call)
            started.set()
            stop.wait(30)

        threading.Thread(target=reader, daemon=True, name="stalled-watcher").start()
        await asyncio.to_thread(started.wait, 30)
        line = b'{"x":"' + b"y" * 200_000 + b'"}\\n'
        for seq in range(40):  # 8 MB, far more than the stream's flow-control window: the writes block
            await asyncio.to_thread(hub.publish, seq, [Rec()], [line])
        sub = hub.subscribers[0]
        for _ in range(3000):  # the handler took what it could and waits at a yield
            if len(sub.items) < 40:
                break
            await asyncio.sleep(0.01)
        call.cancel()
        for _ in range(200):  # grpc ends the call; asyncio closes the abandoned generator
            if not hub.subscribers:
                break
            await asyncio.sleep(0.01)
        stop.set()
        channel.close()
        await server.stop(None)
        print("unsubscribed" if not hub.subscribers else "still subscribed", flush=True)

    asyncio.run(main())
''')


def test_a_tail_cancelled_while_its_write_is_blocked_does_not_crash_the_proxy(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # (the generator's finally ran: the watcher is gone from the hub, and its end logged with its peer)
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "unsubscribed" and "tail_ended" in lines[-2] and "peer=ipv4:127.0.0.1" in lines[-2], proc.stdout

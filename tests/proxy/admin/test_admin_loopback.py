"""The admin service over loopback, with real tritonclient traffic through the proxy to the fake Triton.

The fake Triton (tests/support/fake_triton.py) is used where a real server cannot show the
behaviour cheaply: thousands of responses per second to fill a stalled watcher's queue, and two
models with exact response counts. tests/e2e/test_admin_e2e.py runs the same checks against a real tritonserver.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import io
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import orjson
import pytest
import tritonclient.grpc as grpcclient

from proxy.admin.hub import TailFilter
from proxy.admin.pb import admin_pb2_grpc as pb_grpc
from proxy.admin.tail import Printer, tail_files
from proxy.capture.budget import MIB
from proxy.ops.server import ProxyConfig, RecordingProxy
from replay.capture import events as ev
from replay.capture.reader import read_capture
from replay.capture.schema import decode
from replay.cli.check import check
from replay.errors import UserError
from tests.support.admin_client import TailClient, admin_call, pb
from tests.support.capture import records
from tests.support.loop_thread import BackgroundLoop
from tests.support.triton_client import StreamSession, wait_for


def capture_lines(directory: Path) -> list[bytes]:
    """Every line of the capture in ``directory``, rotated (and gzipped) files included, in seq order."""
    out: list[bytes] = []
    for p in sorted(directory.iterdir()):
        data = gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()
        out.extend(line for line in data.splitlines() if line)
    return sorted(out, key=lambda line: orjson.loads(line)["seq"])


def stream_traffic(url: str, model: str, requests: int, n: int = 3) -> None:
    """``requests`` stream requests of ``n`` responses each, with real tritonclient; waits for every final."""
    s = StreamSession(url)
    try:
        for i in range(requests):
            inp = grpcclient.InferInput("IN", [1], "INT32")
            inp.set_data_from_numpy(np.array([i], dtype=np.int32))
            s.send(model, [inp], f"{model}-{i}", parameters={"n": n})
        s.take(requests * n, timeout=60)
    finally:
        s.close()


def unary_call(url: str, model: str) -> None:
    c = grpcclient.InferenceServerClient(url)
    try:
        inp = grpcclient.InferInput("IN", [1, 4], "INT32")
        inp.set_data_from_numpy(np.zeros((1, 4), dtype=np.int32))
        c.infer(model, [inp], request_id="u1")
    finally:
        c.close()


@pytest.fixture
def admin_proxy(start_proxy: Callable[..., RecordingProxy], fake_upstream: Any) -> RecordingProxy:
    return start_proxy(f"127.0.0.1:{fake_upstream.port}", admin="127.0.0.1:0")


def _admin(p: RecordingProxy) -> str:
    return p.admin.address


def test_tail_gets_every_record_in_order_equal_to_the_capture(bg: BackgroundLoop, admin_proxy: RecordingProxy,
                                                               tmp_path: Path) -> None:  # fmt: skip
    """A watcher sees each record the capture holds from its start on, in seq order, to capture_end: each
    Tail line read alone decodes to the record the capture's reader reads (the file may omit what a
    call's earlier lines said; a Tail line never does, since a watcher may start anywhere)."""
    tail = TailClient(bg, _admin(admin_proxy))
    url = f"127.0.0.1:{admin_proxy.port}"
    stream_traffic(url, "m", 5)
    unary_call(url, "m")
    bg.run(admin_proxy.stop())
    assert tail.done.wait(30) and tail.error is None
    got = tail.records()
    first = tail.responses[0].started.first_seq
    captured = list(read_capture(tmp_path / "captures"))
    assert [decode(orjson.loads(line)) for _, line in got] == captured[first:]
    assert [seq for seq, _ in got] == [seq for seq, _ in captured[first:]]
    kinds = [orjson.loads(line)["kind"] for _, line in got]
    assert kinds.count("message") == 5 + 15 + 2 and kinds[-1] == "capture_end"


def test_tail_from_seq_0_starts_at_the_capture_start(bg: BackgroundLoop, admin_proxy: RecordingProxy,
                                                     tmp_path: Path) -> None:  # fmt: skip
    """`tail --from-seq 0` on a proxy that wrote a few records gets the capture from its capture_start, line for
    line what the file holds. The capture_start was written before the admin service was attached, so seq 0
    was never in memory: the watcher started at seq 1 and was told seq 0 was "no longer" there."""
    admin_call(bg, _admin(admin_proxy), "Mark", pb.MarkRequest(note="one"))
    tail = TailClient(bg, _admin(admin_proxy), from_seq=0)
    started = tail.responses[0].started
    assert (started.first_seq, started.from_seq_lost) == (0, False)
    bg.run(admin_proxy.stop())
    assert tail.done.wait(30) and tail.error is None
    captured = list(read_capture(tmp_path / "captures"))
    assert [(seq, decode(orjson.loads(line))[1]) for seq, line in tail.records()] == captured
    assert [r.kind for _, r in captured] == ["capture_start", "mark", "capture_end"]


def test_filters_select_model_request_id_and_kind(bg: BackgroundLoop, admin_proxy: RecordingProxy) -> None:
    """--model keeps that model's calls (their call_start/call_end too); --request-id and --kind narrow further."""
    addr = _admin(admin_proxy)
    by_model = TailClient(bg, addr, TailFilter(models=frozenset({"a"})))
    by_rid = TailClient(bg, addr, TailFilter(request_ids=frozenset({"b-1"}), kinds=frozenset({"message"})))
    ends = TailClient(bg, addr, TailFilter(kinds=frozenset({"call_end"}), methods=frozenset({"ModelStreamInfer"})))
    url = f"127.0.0.1:{admin_proxy.port}"
    stream_traffic(url, "a", 2)
    stream_traffic(url, "b", 3)
    unary_call(url, "a")
    bg.run(admin_proxy.stop())
    for t in (by_model, by_rid, ends):
        assert t.done.wait(30) and t.error is None
    recs = [orjson.loads(line) for _, line in by_model.records()]
    msgs = [r for r in recs if r["kind"] == "message"]
    assert msgs and all(r["model"] == "a" for r in msgs)
    a_calls = {r["call"] for r in msgs}
    assert len(a_calls) == 2  # the stream and the unary call
    for kind in ("call_start", "call_end"):
        assert {r["call"] for r in recs if r["kind"] == kind} == a_calls
    rid = [orjson.loads(line) for _, line in by_rid.records()]
    assert [(r["dir"], r["request_id"]) for r in rid] == [("c2s", "b-1")] + [("s2c", "b-1")] * 3
    end = [orjson.loads(line) for _, line in ends.records()]
    assert [r["kind"] for r in end] == ["call_end", "call_end"]  # the two streams, not the unary call


def test_a_watcher_that_stops_reading_stays_within_its_bound(bg: BackgroundLoop, admin_proxy: RecordingProxy) -> None:
    """The stalled watcher's queue never exceeds max_queue; what it lost is counted and then reported in its stream."""
    stalled = TailClient(bg, _admin(admin_proxy), max_queue=50, read=False)
    hub = admin_proxy.admin.hub
    (sub,) = hub.subscribers
    url = f"127.0.0.1:{admin_proxy.port}"
    peak = 0
    for _ in range(60):
        stream_traffic(url, "m", 10, n=200)
        peak = max(peak, len(sub.items))
        if sub.dropped:
            break
    assert sub.dropped > 0
    assert len(sub.items) <= 50 + 1 and peak <= 51  # max_queue records + one drop marker
    assert admin_proxy.admin.handlers.running == 1  # the stalled Tail's handler, which stop() will wait for
    # Quiet before the counts are compared: the calls ended, and everything they emitted written and
    # offered to the watcher (a rotation returns once what was emitted before it is written; records
    # still queued were dropped for it after Status had counted, 814 against 833 once).
    wait_for(lambda: sum(r.open_calls for r in admin_proxy.relays) == 0, what="the proxy's calls to end")
    writer = admin_proxy.writer
    assert writer is not None
    bg.run(writer.rotate())
    st = admin_call(bg, _admin(admin_proxy), "Status", pb.StatusRequest())
    assert st.tail.subscribers == 1 and st.tail.records_dropped == sub.dropped
    stalled.resume()
    bg.run(admin_proxy.stop())
    assert stalled.done.wait(30) and stalled.error is None
    assert sum(d.count for d in stalled.dropped()) == sub.dropped
    seqs = [s for s, _ in stalled.records()]
    assert seqs == sorted(seqs)


def test_mark_is_in_the_capture_and_in_replay_check(bg: BackgroundLoop, admin_proxy: RecordingProxy,
                                                    tmp_path: Path) -> None:  # fmt: skip
    """Mark writes a `mark` record; replay check lists it (table and JSON)."""
    tail = TailClient(bg, _admin(admin_proxy), TailFilter(kinds=frozenset({"mark"})))
    admin_call(bg, _admin(admin_proxy), "Mark", pb.MarkRequest(note="starting load test 3", labels={"run": "3"}))
    stream_traffic(f"127.0.0.1:{admin_proxy.port}", "m", 1)
    bg.run(admin_proxy.stop())
    assert tail.done.wait(30)
    (mark,) = [orjson.loads(line) for _, line in tail.records()]
    assert (mark["note"], mark["labels"]) == ("starting load test 3", {"run": "3"})
    out = io.StringIO()
    assert check([str(tmp_path / "captures")], out=out, err=io.StringIO()) == 0
    assert f"mark seq {mark['seq']} at" in out.getvalue() and "starting load test 3 run=3" in out.getvalue()
    js = io.StringIO()
    check([str(tmp_path / "captures")], as_json=True, out=js, err=io.StringIO())
    assert orjson.loads(js.getvalue())["marks"][0]["note"] == "starting load test 3"


def test_a_mark_the_capture_cannot_write_is_refused_not_said_written(
    bg: BackgroundLoop, start_proxy: Callable[..., RecordingProxy], fake_upstream: Any, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The capture is paused for low free space (--min-free-mb over what the disk has free): Mark is answered
    only once the mark is in the file, so here FAILED_PRECONDITION saying why, and `triton-tap mark` exits 1
    with one line; the capture holds no such mark, and the gap counts it. (OK was said as soon as it was queued.)"""
    from proxy.cli import main

    st = os.statvfs(tmp_path)
    free_mb = st.f_bavail * st.f_frsize // MIB
    p = start_proxy(f"127.0.0.1:{fake_upstream.port}", admin="127.0.0.1:0", min_free_mb=free_mb + 1000)
    addr = _admin(p)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        admin_call(bg, addr, "Mark", pb.MarkRequest(note="while paused"))
    err = refused.value
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert err.details().startswith(
        f"not marked: the capture is paused: free space is under --min-free-mb ({free_mb + 1000:g} MB)"
    )
    capsys.readouterr()
    assert main(["mark", "--admin", addr, "also while paused"]) == 1
    out, cli_err = capsys.readouterr()
    assert out == "" and cli_err.count("\n") == 1 and "FAILED_PRECONDITION: not marked: the capture is paused" in cli_err
    bg.run(p.stop())
    captured = [r for _, r in read_capture(tmp_path / "captures")]
    assert not [r for r in captured if isinstance(r, ev.MarkRecorded)]
    gaps = [r for r in captured if isinstance(r, ev.GapRecorded)]
    assert sum(g.dropped for g in gaps) == 2 and all(g.reason.startswith("low_disk") for g in gaps)


def test_rotate_starts_a_new_file_read_as_one_capture(bg: BackgroundLoop, start_proxy: Callable[..., RecordingProxy],
                                                      fake_upstream: Any, tmp_path: Path) -> None:  # fmt: skip
    """Rotate closes the file (gzipped when asked) and opens the next; the reader reads both as one capture."""
    p = start_proxy(f"127.0.0.1:{fake_upstream.port}", admin="127.0.0.1:0", gzip_rotated=True)
    url = f"127.0.0.1:{p.port}"
    stream_traffic(url, "m", 2)
    resp = admin_call(bg, _admin(p), "Rotate", pb.RotateRequest())
    assert resp.closed_file.endswith(".jsonl.gz") and Path(resp.closed_file).exists()
    assert resp.new_file.endswith("-0001.jsonl") and Path(resp.new_file).exists()
    stream_traffic(url, "m", 2)
    bg.run(p.stop())
    reader = read_capture(tmp_path / "captures")
    records = list(reader)
    assert reader.captures == 1 and reader.gaps == [] and len(reader.files) == 2
    assert [s for s, _ in records] == list(range(len(records)))
    assert sum(1 for _, r in records if r.kind == "call_start") == 2


@pytest.mark.parametrize("how", ["rotate", "reopen"])
def test_a_mark_before_rotate_is_in_the_file_rotate_closes(bg: BackgroundLoop, start_proxy: Callable[..., RecordingProxy],
                                                           fake_upstream: Any, how: str) -> None:  # fmt: skip
    """A client calls Mark, then Rotate, on one channel (three times): each mark is in the file that Rotate
    closed, before its capture_end, and each new file's capture_start comes after it; seq runs on across
    the files. ``reopen``: Mark, then what SIGHUP calls (``RecordingProxy.reload``) on the proxy's loop.
    (The upstream only has to accept the proxy's start-up check: no call goes to it.)"""
    p = start_proxy(f"127.0.0.1:{fake_upstream.port}", admin="127.0.0.1:0", compress="zstd")
    assert p.writer is not None
    writer = p.writer

    async def mark_then_rotate() -> None:
        async with grpc.aio.insecure_channel(_admin(p)) as chan:
            stub = pb_grpc.AdminServiceStub(chan)
            for i in range(3):
                await stub.Mark(pb.MarkRequest(note=f"before rotation {i}"), timeout=30)
                if how == "rotate":
                    r = await stub.Rotate(pb.RotateRequest(), timeout=30)
                    assert (r.closed_file, r.new_file) == tuple(str(x) for x in writer.paths[i:i + 2])
                else:
                    p.reload()
                    await asyncio.wait_for(_until_files(writer.paths, i + 2), 30)

    bg.run(mark_then_rotate())
    bg.run(p.stop())
    files = [records(f) for f in writer.paths]
    assert len(files) == 4
    for i, recs in enumerate(files[:3]):
        kinds = [r["kind"] for r in recs]
        assert kinds == ["capture_start", "mark", "capture_end"], (i, kinds)
        mark, end = recs[1], recs[2]
        assert mark["note"] == f"before rotation {i}" and end["reason"] == how
        assert end["next_file"] == writer.paths[i + 1].name
        assert mark["seq"] < end["seq"] < files[i + 1][0]["seq"]
    assert [r["kind"] for r in files[-1]] == ["capture_start", "capture_end"]
    seqs = [r["seq"] for recs in files for r in recs]
    assert seqs == list(range(len(seqs)))


async def _until_files(paths: list[Path], n: int) -> None:
    while len(paths) < n:
        await asyncio.sleep(0.01)


class _Follower:
    """`tail CAPTURE_DIR --follow --json` on its own thread and event loop, printing into ``out``."""

    def __init__(self, directory: Path) -> None:
        self.out = io.StringIO()
        self._loop = asyncio.new_event_loop()
        printer = Printer(self.out, self.out, True)
        self._thread = threading.Thread(
            target=lambda: self._loop.run_until_complete(tail_files(directory, TailFilter(), printer)),
            name="test-follow",
        )
        self._thread.start()

    def join(self) -> None:
        """Wait for the follow to end by itself (at the capture's shutdown end); fail if it does not."""
        self._thread.join(30)
        alive = self._thread.is_alive()
        if not alive:
            self._loop.close()
        assert not alive, "tail --follow did not stop at the capture's shutdown end"

    def records(self) -> list[Any]:
        return [decode(orjson.loads(line)) for line in self.out.getvalue().splitlines()]


def test_tail_follow_survives_rotation(bg: BackgroundLoop, start_proxy: Callable[..., RecordingProxy],
                                       fake_upstream: Any, tmp_path: Path) -> None:  # fmt: skip
    """`tail CAPTURE_DIR --follow` (aiofiles) prints every record of the capture across a gzipped rotation
    (each printed line stands alone: it decodes to what the capture's reader reads)."""
    p = start_proxy(f"127.0.0.1:{fake_upstream.port}", admin="127.0.0.1:0", gzip_rotated=True)
    follow = _Follower(tmp_path / "captures")
    url = f"127.0.0.1:{p.port}"
    stream_traffic(url, "m", 2)
    admin_call(bg, _admin(p), "Rotate", pb.RotateRequest())
    stream_traffic(url, "m", 2)
    admin_call(bg, _admin(p), "Rotate", pb.RotateRequest())
    stream_traffic(url, "m", 1)
    bg.run(p.stop())
    follow.join()
    assert follow.records() == list(read_capture(tmp_path / "captures"))
    assert len(follow.records()) == len(capture_lines(tmp_path / "captures"))
    assert len(list((tmp_path / "captures").glob("*.jsonl.gz"))) == 2


def test_status_shows_open_calls_and_counters(bg: BackgroundLoop, admin_proxy: RecordingProxy) -> None:
    """Status lists an open stream with its method, model and in-flight request id, and the capture's counters."""
    s = StreamSession(f"127.0.0.1:{admin_proxy.port}")
    try:
        inp = grpcclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([1], dtype=np.int32))
        s.send("slow", [inp], "r-open", parameters={"n": 2, "gap_ms": 3000})

        def open_call() -> Any:
            st = admin_call(bg, _admin(admin_proxy), "Status", pb.StatusRequest())
            return st if st.open_calls and st.open_calls[0].model else None

        wait_for(lambda: open_call() is not None, what="the open call in Status")
        st = open_call()
        (oc,) = st.open_calls
        assert oc.method.endswith("/ModelStreamInfer") and oc.model == "slow" and list(oc.in_flight) == ["r-open"]
        assert st.counters.records["call_start"] == 1 and st.capture_files == [str(admin_proxy.capture_path)]
        assert st.listen == f"127.0.0.1:{admin_proxy.port}" and not st.tls_listen
    finally:
        s.close(cancel_requests=True)


def test_a_non_loopback_admin_address_needs_tls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--admin on a non-loopback address without --tls-cert/--tls-key refuses to start, with one line."""
    with pytest.raises(UserError, match="needs --tls-cert/--tls-key"):
        RecordingProxy(ProxyConfig(listen="127.0.0.1:0", capture_dir=tmp_path / "c", admin="0.0.0.0:0"))
    from proxy.cli import main

    assert main(["record", "--admin", "0.0.0.0:0", "--capture-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "non-loopback admin address needs --tls-cert/--tls-key" in err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("compress", ["zstd", "gzip"])
def test_tail_follow_reads_files_compressed_as_written(bg: BackgroundLoop, start_proxy: Callable[..., RecordingProxy],
                                                        fake_upstream: Any, tmp_path: Path, compress: str) -> None:  # fmt: skip
    """`tail --follow` on a capture compressed as it is written (zstd is record's default): frames read as
    the file grows, across a reopen, every record equal to what the reader reads afterwards."""
    p = start_proxy(f"127.0.0.1:{fake_upstream.port}", compress=compress)
    follow = _Follower(tmp_path / "captures")
    url = f"127.0.0.1:{p.port}"
    stream_traffic(url, "m", 3)
    wait_for(lambda: follow.out.getvalue().count('"kind":"call_end"') >= 1, 30, "the first call printed while written")

    async def reopen() -> None:  # SIGHUP's path, on the proxy's loop
        p.reload("test")

    bg.run(reopen())
    stream_traffic(url, "m", 2)
    bg.run(p.stop())
    follow.join()
    assert follow.records() == list(read_capture(tmp_path / "captures"))
    assert len(list((tmp_path / "captures").glob(f"capture-*.jsonl.{'zst' if compress == 'zstd' else 'gz'}"))) == 2


def test_a_mark_while_the_proxy_stops_is_in_the_capture_or_refused(bg: BackgroundLoop, admin_proxy: RecordingProxy,
                                                                    tmp_path: Path) -> None:  # fmt: skip
    """Four clients mark without pause, and the proxy stops: every mark acknowledged is in the capture, before its
    capture_end; one sent once the capture was closing gets FAILED_PRECONDITION (or, as the admin service stops,
    CANCELLED or UNAVAILABLE), never OK. (The stop closes the writer first, then the admin service: marks taken in
    between went into a queue nothing wrote any more, and were acknowledged.)"""

    async def run() -> tuple[list[str], set[grpc.StatusCode]]:
        acked: list[str] = []
        refused: set[grpc.StatusCode] = set()
        stopped = asyncio.Event()
        async with grpc.aio.insecure_channel(_admin(admin_proxy)) as channel:
            stub = pb_grpc.AdminServiceStub(channel)  # type: ignore[no-untyped-call]

            async def marker(k: int) -> None:
                i = 0
                while not stopped.is_set():
                    note = f"m{k}-{i}"
                    i += 1
                    try:
                        await stub.Mark(pb.MarkRequest(note=note), timeout=30)
                    except grpc.aio.AioRpcError as e:
                        refused.add(e.code())
                    else:
                        acked.append(note)

            markers = [asyncio.create_task(marker(k), name=f"test-marker-{k}") for k in range(4)]
            deadline = asyncio.get_running_loop().time() + 30
            while len(acked) < 40 and asyncio.get_running_loop().time() < deadline:  # the marks flow
                await asyncio.sleep(0.005)
            try:
                await admin_proxy.stop()
            finally:
                stopped.set()
                await asyncio.gather(*markers)
        return acked, refused

    acked, refused = bg.run(run())
    captured = [r for _, r in read_capture(tmp_path / "captures")]
    marks = [r.note for r in captured if isinstance(r, ev.MarkRecorded)]
    assert len(acked) >= 40 and not set(acked) - set(marks)
    assert captured[-1].kind == "capture_end"
    assert refused <= {grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE}


def test_an_admin_port_in_use_is_refused(start_proxy: Callable[..., RecordingProxy], fake_upstream: Any,
                                         tmp_path: Path) -> None:  # fmt: skip
    """A second proxy given the first one's --admin port does not start: grpc's default SO_REUSEPORT let both
    bind it, and each status, tail, mark or rotate reached one of them at random."""
    first = start_proxy(f"127.0.0.1:{fake_upstream.port}", admin="127.0.0.1:0")
    assert first.admin is not None
    # (Refused before grpc tries: its own bind failure wrote a C-core line to stderr before this one.)
    with pytest.raises(UserError, match=rf"^cannot serve --admin on {first.admin.address}: address already in use$"):
        start_proxy(f"127.0.0.1:{fake_upstream.port}", admin=first.admin.address, capture_dir=tmp_path / "second")


def test_each_worker_has_its_own_admin_port() -> None:
    """`record --workers N --admin HOST:P`: worker k serves its admin service on P + k (0: a free port each),
    as its metrics; one shared port handed each command to one worker at random."""
    from proxy.ops.workers import worker_configs

    cfg = ProxyConfig(listen="127.0.0.1:0", upstream="127.0.0.1:1", admin="127.0.0.1:8090", workers=3)
    assert [c.admin for c in worker_configs(cfg, 8011, "capture-x")] == [f"127.0.0.1:{p}" for p in (8090, 8091, 8092)]
    free = dataclasses.replace(cfg, admin="[::1]:0")
    assert [c.admin for c in worker_configs(free, 8011, "capture-x")] == ["[::1]:0"] * 3
    assert [c.admin for c in worker_configs(dataclasses.replace(cfg, admin=None), 8011, "s")] == [None] * 3


def test_status_lists_the_capture_files_still_there(bg: BackgroundLoop, admin_proxy: RecordingProxy) -> None:
    """Status's capture files are those of this run still in the directory: retention deletes the oldest (a
    long run listed 151 files of which 8 existed)."""
    addr = _admin(admin_proxy)
    admin_call(bg, addr, "Rotate", pb.RotateRequest())
    admin_call(bg, addr, "Rotate", pb.RotateRequest())
    files = list(admin_call(bg, addr, "Status", pb.StatusRequest()).capture_files)
    assert len(files) == 3
    Path(files[0]).unlink()  # as retention does
    assert list(admin_call(bg, addr, "Status", pb.StatusRequest()).capture_files) == files[1:]


def test_status_json_prints_every_field_with_integers_as_numbers(
    admin_proxy: RecordingProxy, capsys: pytest.CaptureFixture[str]
) -> None:
    """`status --json` of an idle proxy: the zero and false fields are there (a script reading
    `.counters.dropped` gets 0, not null) and the int64 counters are JSON numbers, not strings (protobuf's
    JSON mapping, which MessageToDict follows, drops default values and quotes int64)."""
    import json

    from proxy.cli import main

    assert main(["status", "--admin", _admin(admin_proxy), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert set(st) == {f.name for f in pb.StatusResponse.DESCRIPTOR.fields}
    assert st["counters"]["dropped"] == 0 and st["writer_queue"] == 0
    assert st["tls_listen"] is False and st["tls_upstream"] is False and st["open_calls"] == []
    assert st["tail"] == {"subscribers": 0, "records_sent": 0, "records_dropped": 0}
    counts = [st["next_seq"], st["recent_first_seq"], *st["counters"]["records"].values()]
    assert st["counters"]["records"] and all(type(n) is int for n in counts), counts

"""`tail CAPTURE_DIR --follow` and the flags of `tail`: `--from-seq` is honoured, the connection's flags refused."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import orjson
import pytest

from proxy.admin.hub import TailFilter
from proxy.admin.tail import Printer, tail_files
from proxy.cli import main
from replay.capture import events as ev
from replay.capture.schema import encode
from tests.data.make_golden import Builder

STEM = "capture-20261207T100000-4343"


def _two_calls() -> Builder:
    """Call c1.1 (request r1) starts before seq 4; its response, half-close and end come after it."""
    b = Builder().start()
    b.call("c1.1")
    b.request("c1.1", "r1")
    b.call("c2.1")
    b.request("c2.1", "r2")
    b.response("c1.1", "r1", "tok", final=True)
    b.response("c2.1", "r2", "tok", final=True)
    for call in ("c1.1", "c2.1"):
        b.half_close(call)
        b.end(call)
    return b.finish()


def _follow(directory: Path, flt: TailFilter, from_seq: int | None) -> tuple[list[dict[str, object]], str]:
    out, err = io.StringIO(), io.StringIO()
    asyncio.run(asyncio.wait_for(tail_files(directory, flt, Printer(out, err, True), from_seq), 30))
    return [orjson.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


@pytest.mark.parametrize("flt", [TailFilter(), TailFilter(request_ids=frozenset({"r1"}))])
def test_from_seq_prints_the_records_from_that_seq_on(tmp_path: Path, flt: TailFilter) -> None:
    """`tail DIR --follow --from-seq 4`: the records from seq 4 on, as the filter selects them; a call that started
    before seq 4 is still told by its request id (the records before it go through the filter unprinted). The
    flag was ignored in silence: the capture was printed from seq 0."""
    (tmp_path / f"{STEM}.jsonl").write_bytes(_two_calls().render())
    everything, _ = _follow(tmp_path, flt, None)
    got, err = _follow(tmp_path, flt, 4)
    assert got == [r for r in everything if isinstance(r["seq"], int) and r["seq"] >= 4] and err == ""
    assert min(r["seq"] for r in everything) == 0  # (there was something before seq 4 to leave out)
    if flt.request_ids:
        assert [r["kind"] for r in got if r.get("call") == "c1.1"] == ["message", "half_close", "call_end"]
        assert all(r.get("call") != "c2.1" for r in got)


def test_from_seq_of_a_removed_file_starts_at_the_first_file_left_with_a_warning(tmp_path: Path) -> None:
    """The seq asked for was in a file retention removed: the follow starts at the first file still there and
    says so in one line, as `tail --admin` does of a seq no longer in the proxy's memory."""
    start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="a:1", upstream="b:2", options={}, file_index=1)
    records = [start, ev.MarkRecorded(t_ns=2, note="m", labels={}), ev.CaptureEnded(t_ns=3, reason="shutdown", counts={})]
    name = f"{STEM}-0001.jsonl"
    (tmp_path / name).write_bytes(b"".join(encode(r, 5 + k) for k, r in enumerate(records)))
    got, err = _follow(tmp_path, TailFilter(), 2)
    assert [r["seq"] for r in got] == [5, 6, 7]
    assert err == f"triton-tap: warning: seq 2 is no longer in the capture files: starting at 5 ({name})\n"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["DIR", "--follow", "--ca", "ca.pem"], "--ca is for tail --admin: tail CAPTURE_DIR --follow reads files"),
        (["DIR", "--follow", "--server-name", "n"], "--server-name is for tail --admin"),
        (["DIR", "--follow", "--cert", "c.pem", "--key", "k.pem"], "--cert is for tail --admin"),
        (["--admin", "127.0.0.1:1", "--follow"], "--follow goes with CAPTURE_DIR"),
    ],
)
def test_flags_of_the_other_source_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str],
                                               says: str) -> None:  # fmt: skip
    """A flag that does nothing for the source given was ignored in silence (`--ca` on a follow of files, which
    connects to nothing; `--follow` on a Tail stream): one line and exit 2, nothing read or connected."""
    args = [str(tmp_path) if a == "DIR" else a for a in flags]
    assert main(["tail", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("triton-tap: error: ") and says in err[0], err

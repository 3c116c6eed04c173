"""Message bytes wherever a capture keeps them: inline base64 or the side file (payload_at), and what
a missing, short or cut side file does to a read.

Captures are written here line by line with the format's own encoder (no proxy), so each damage is
exactly the one named.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import zlib
from pathlib import Path

import orjson
import pytest

from replay.capture import events as ev
from replay.capture import naming
from replay.capture.payload import has_payload, http_body, http_encoding, payload_bytes
from replay.capture.reader import read_capture
from replay.capture.schema import encode
from replay.cli.main import main
from replay.errors import CaptureError


def _body(i: int, size: int = 100) -> bytes:
    return bytes((i * 13 + k) % 256 for k in range(size))


def _message(i: int, body: bytes) -> ev.MessageSeen:
    return ev.MessageSeen(t_ns=10 + i, call="c1.1", dir="c2s", index=i, size=len(body),
                          payload_sha256=hashlib.sha256(body).hexdigest(), payload_truncated=False)  # fmt: skip


def _file(path: Path, bodies: list[bytes], *, first_seq: int = 0, index: int = 0, end: bool = True,
          next_file: str | None = None) -> Path:  # fmt: skip
    """A capture file whose messages keep ``bodies`` in its side file (written whole)."""
    lines = [encode(ev.CaptureStarted(t_ns=1, proxy_version="t", listen="l:1", upstream="u:2",
                                      options={"payload": "full"}, file_index=index), first_seq)]  # fmt: skip
    at = 0
    for i, body in enumerate(bodies):
        lines.append(encode(_message(i, body), first_seq + 1 + i, [at, len(body)]))
        at += len(body)
    if end:
        lines.append(encode(ev.CaptureEnded(t_ns=99, reason="rotate" if next_file else "shutdown", counts={},
                                            next_file=next_file), first_seq + 1 + len(bodies)))  # fmt: skip
    path.write_bytes(b"".join(lines))
    path.with_name(naming.side_name(path.name)).write_bytes(b"".join(bodies))
    return path


def _read(paths: Path | list[Path]) -> tuple[list[ev.MessageSeen], list[str]]:
    reader = read_capture(paths)
    msgs = [r for _, r in reader if isinstance(r, ev.MessageSeen)]
    return msgs, reader.warnings


def test_payload_bytes_reads_the_side_file_and_inline_base64_alike(tmp_path: Path) -> None:
    bodies = [_body(0), b"", _body(2, 5000)]
    msgs, warnings = _read(_file(tmp_path / "capture-20260101T000000-1.jsonl", bodies))
    assert warnings == [] and [payload_bytes(m) for m in msgs] == bodies
    assert all(has_payload(m) and m.payload is None for m in msgs)
    inline = ev.MessageSeen(t_ns=1, call="c", dir="c2s", index=0, size=3, payload=base64.b64encode(b"abc").decode())
    meta = ev.MessageSeen(t_ns=1, call="c", dir="c2s", index=0, size=3)
    assert (payload_bytes(inline), has_payload(inline)) == (b"abc", True)
    assert (payload_bytes(meta), has_payload(meta)) == (None, False)


def test_a_side_file_longer_than_its_lines_is_fine(tmp_path: Path) -> None:
    """The writer writes bytes before lines: a crash in between leaves bytes no line points at."""
    path = _file(tmp_path / "x.jsonl", [_body(0)], end=False)
    with open(path.with_name("x.payload"), "ab") as f:
        f.write(b"unreferenced")
    msgs, warnings = _read(path)
    assert payload_bytes(msgs[0]) == _body(0)
    assert not any("side file" in w for w in warnings)


def test_a_side_file_cut_at_the_end_reads_what_is_complete_and_warns(tmp_path: Path) -> None:
    """Like a cut last line: the messages whose bytes are there are read, the others are "not captured"."""
    bodies = [_body(i) for i in range(4)]
    path = _file(tmp_path / "capture-20260101T000000-1.jsonl", bodies, end=False)
    side = path.with_name(naming.side_name(path.name))
    side.write_bytes(side.read_bytes()[:250])  # message 2 (bytes 200-300) is cut, 3 is missing
    msgs, warnings = _read(path)
    assert [payload_bytes(m) for m in msgs] == [bodies[0], bodies[1], None, None]
    assert [has_payload(m) for m in msgs] == [True, True, False, False]
    (warning,) = [w for w in warnings if "side file" in w]
    assert str(side) in warning and "cut short at 250 bytes" in warning and "last 2 message(s)" in warning


def test_a_cut_side_file_and_a_cut_last_line_are_both_warned_about(tmp_path: Path) -> None:
    """The proxy killed mid-write cuts both files: the cut line is skipped, and the side file's warning
    still comes (the read goes on to the file's end checks after skipping the line)."""
    bodies = [_body(i) for i in range(4)]
    path = _file(tmp_path / "capture-20260101T000000-1.jsonl", bodies, end=False)
    side = path.with_name(naming.side_name(path.name))
    side.write_bytes(side.read_bytes()[:250])
    path.write_bytes(path.read_bytes() + encode(_message(4, _body(4)), 5, [400, 100])[:30])
    msgs, warnings = _read(path)
    assert [payload_bytes(m) for m in msgs] == [bodies[0], bodies[1], None, None]
    assert ["last line cut short" in w for w in warnings] == [True, False]
    assert "cut short at 250 bytes" in warnings[1]


def test_a_line_spelling_out_payload_at_null_has_no_side_file(tmp_path: Path) -> None:
    """A line may spell out a default (older writers did): ``"payload_at": null`` means no bytes stored."""
    line = orjson.loads(encode(_message(0, _body(0)), 1))
    assert "payload_at" not in line
    path = tmp_path / "capture-20260101T000000-1.jsonl"
    start = encode(ev.CaptureStarted(t_ns=1, proxy_version="t", listen="l:1", upstream="u:2", options={}), 0)
    end = encode(ev.CaptureEnded(t_ns=99, reason="shutdown", counts={}), 2)
    path.write_bytes(start + orjson.dumps({**line, "payload_at": None}) + b"\n" + end)
    msgs, warnings = _read(path)
    assert [m.payload_at for m in msgs] == [None] and warnings == []


def test_a_missing_side_file_is_a_capture_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path / "capture-20260101T000000-1.jsonl", [_body(0)])
    side = path.with_name(naming.side_name(path.name))
    side.unlink()
    with pytest.raises(CaptureError) as info:
        _read(path)
    assert info.value.path == str(side) and "side file missing" in str(info.value)
    assert path.name in str(info.value)


def test_check_report_and_export_read_a_capture_copied_without_its_side_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """They never read the message bytes: the same results as with the side file, and one warning naming it.
    (They refused such a capture, exit 2, where the file had all they needed.)"""
    path = _file(tmp_path / "capture-20260101T000000-1.jsonl", [_body(0), _body(1)])
    side = path.with_name(naming.side_name(path.name))
    code = main(["check", "--json", str(path)])
    whole = capsys.readouterr().out
    side.unlink()
    assert main(["check", "--json", str(path)]) == code
    out, err = capsys.readouterr()
    before, after = orjson.loads(whole), orjson.loads(out)
    had = before["summary"].pop("warnings")
    (added,) = [w for w in after["summary"].pop("warnings") if w not in had]
    assert after == before
    assert str(side) in added and "side file missing: the bytes of 2 message(s)" in added
    assert f"triton-tap: warning: {added}" in err
    assert main(["check", str(path)]) == code
    assert "side file missing" in capsys.readouterr().err
    reader = read_capture(path, payload=False)
    msgs = [r for _, r in reader if isinstance(r, ev.MessageSeen)]
    assert len(msgs) == 2 and all(m.payload_at is None for m in msgs)
    assert len(reader.warnings) == 1
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0
    assert "side file missing" in capsys.readouterr().err
    assert main(["export", "--parquet", str(tmp_path / "pq"), str(path)]) == 0
    assert "side file missing" in capsys.readouterr().err


def test_a_short_side_file_before_a_later_file_is_a_capture_error(tmp_path: Path) -> None:
    """A rotated file's side file cut short is not a crash at the end: the later file proves it was complete."""
    first = _file(tmp_path / "capture-20260101T000000-1.jsonl", [_body(0), _body(1)],
                  next_file="capture-20260101T000000-1-0001.jsonl")  # fmt: skip
    _file(tmp_path / "capture-20260101T000000-1-0001.jsonl", [_body(2)], first_seq=4, index=1)
    side = first.with_name(naming.side_name(first.name))
    side.write_bytes(side.read_bytes()[:150])
    with pytest.raises(CaptureError) as info:
        _read(tmp_path)
    assert info.value.path == str(side) and "side file is short: 150 bytes" in str(info.value)


def test_a_side_file_that_shrinks_after_reading_is_a_capture_error_when_its_bytes_are_read(tmp_path: Path) -> None:
    path = _file(tmp_path / "x.jsonl", [_body(0), _body(1)])
    msgs, _ = _read(path)
    path.with_name("x.payload").write_bytes(b"short")
    with pytest.raises(CaptureError, match="side file is short: 100 bytes at offset 0 were expected, 5 are there"):
        payload_bytes(msgs[0])


@pytest.mark.parametrize("at", [[5], [1, 2, 3], [-1, 2], [0, -2]])
def test_a_malformed_payload_at_is_a_capture_error_naming_the_line(tmp_path: Path, at: list[int]) -> None:
    path = tmp_path / "x.jsonl"
    start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="l:1", upstream="u:2", options={})
    path.write_bytes(encode(start, 0) + encode(_message(0, b"ab"), 1, at))
    path.with_name("x.payload").write_bytes(b"abcdef")
    with pytest.raises(CaptureError) as info:
        _read(path)
    assert (info.value.path, info.value.line) == (str(path), 2) and "payload_at" in str(info.value)


def test_records_not_read_from_a_file_cannot_reach_a_side_file() -> None:
    rec = ev.MessageSeen(t_ns=1, call="c1.1", dir="c2s", index=0, size=2, payload_at=[0, 2])
    with pytest.raises(CaptureError, match="not read from a capture file"):
        payload_bytes(rec)


def test_side_name_is_one_rule_for_every_capture_suffix() -> None:
    names = ["capture-20260101T000000-1.jsonl", "capture-20260101T000000-1-0002.jsonl.gz",
             "capture-20260101T000000-1.w3-0001.jsonl.zst", "mine.jsonl", "stdin"]  # fmt: skip
    assert [naming.side_name(n) for n in names] == [
        "capture-20260101T000000-1.payload", "capture-20260101T000000-1-0002.payload",
        "capture-20260101T000000-1.w3-0001.payload", "mine.payload", "stdin.payload",
    ]  # fmt: skip
    owner = naming.side_owner("capture-20260101T000000-1.w3-0001.payload")
    assert owner is not None and (owner.stem, owner.index, owner.worker) == ("capture-20260101T000000-1.w3", 1, 3)
    assert naming.side_owner("mine.payload") is None and naming.side_owner("x.jsonl") is None
    assert not naming.looks_like_capture("capture-20260101T000000-1.payload")


@pytest.mark.parametrize(
    ("headers", "body", "plain"),
    [
        ([("Content-Type", "application/json")], b'{"id":"p"}', b'{"id":"p"}'),
        ([(b"content-encoding", b"identity")], b'{"id":"p"}', b'{"id":"p"}'),
        ([("Content-Encoding", " GZIP ")], gzip.compress(b'{"id":"g"}', mtime=0), b'{"id":"g"}'),
        ([["content-encoding", "deflate"]], zlib.compress(b'{"id":"z"}'), b'{"id":"z"}'),  # as call_start holds them
        ([("content-encoding", "deflate")], zlib.compress(b'{"id":"r"}')[2:-4], b'{"id":"r"}'),  # raw deflate
    ],
)
def test_an_http_body_is_read_decompressed_by_its_content_encoding(headers: list, body: bytes, plain: bytes) -> None:
    """The one rule the recorder's labels, the capture index and serve read an HTTP body with."""
    assert http_body(body, http_encoding(headers)) == (plain, None)


@pytest.mark.parametrize(
    ("encoding", "body", "why"),
    [
        ("br", b'{"id":"b"}', "Content-Encoding 'br': body not decoded"),
        ("gzip", b'{"id":"not gzip"}', "gzip body does not decompress"),
        ("gzip", gzip.compress(b'{"id":"cut"}' * 50, mtime=0)[:-30], "gzip body cut short"),
    ],
)
def test_an_http_body_that_cannot_be_read_says_why(encoding: str, body: bytes, why: str) -> None:
    plain, error = http_body(body, encoding)
    assert plain is None and error is not None and error.startswith(why)

"""Reading a capture in tests without the replay reader (so proxy tests do not depend on it).

Lines are sparse (schema 3): :func:`records` fills omitted fields in with the format's own rules
(:func:`replay.capture.schema.decode`), so tests see every field, as in a dense line.
"""

from __future__ import annotations

import base64
import gzip
import io
from pathlib import Path
from typing import Any

import orjson

from replay.capture import naming
from replay.capture.schema import Sticky, decode, to_dict


def dense(lines: list[bytes]) -> list[dict[str, Any]]:
    """Lines of one capture file as dicts with every field (omitted ones filled in)."""
    sticky: Sticky = {}
    out = []
    for line in lines:
        raw = orjson.loads(line)
        _, rec = decode(raw, sticky=sticky)
        out.append({**raw, **to_dict(rec)})
    return out


def records(path: Path) -> list[dict[str, Any]]:
    """Every line of a capture file (plain, .gz or .zst) as a dict with every field. Of a file still being
    written, a last line cut short (the writer is writing it) is not read yet."""
    lines = read_bytes(path).split(b"\n")
    if lines and lines[-1]:
        try:
            orjson.loads(lines[-1])
        except orjson.JSONDecodeError:  # (a line cut short never parses: an object lacks its closing brace)
            lines.pop()
    return dense([line for line in lines if line])


def read_bytes(path: Path) -> bytes:
    """The decompressed content of a capture file."""
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        return gzip.decompress(data)
    if path.name.endswith(".zst"):
        import zstandard

        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True) as r:
            return bytes(r.read())
    return data


def stored_payload(capture: Path, rec: dict[str, Any]) -> bytes:
    """The message bytes a record of ``capture`` keeps: base64 ``payload``, or ``payload_at`` in its side file."""
    if rec.get("payload") is not None:
        return base64.b64decode(rec["payload"])
    offset, length = rec["payload_at"]
    with open(capture.with_name(naming.side_name(capture.name)), "rb") as f:
        f.seek(offset)
        data = f.read(length)
    assert len(data) == length, f"side file of {capture.name} is short"
    return data


def side_bytes(capture: Path) -> bytes:
    """The content of ``capture``'s side file (b"" when it has none)."""
    side = capture.with_name(naming.side_name(capture.name))
    return side.read_bytes() if side.exists() else b""


def of_kind(recs: list[dict[str, Any]], kind: str, call: str | None = None) -> list[dict[str, Any]]:
    """Records of one kind, optionally of one call."""
    return [r for r in recs if r["kind"] == kind and (call is None or r.get("call") == call)]


def calls_by_method(recs: list[dict[str, Any]], suffix: str) -> list[str]:
    """Call ids whose method path ends with ``suffix``, in start order."""
    return [r["call"] for r in recs if r["kind"] == "call_start" and r["method"].endswith(suffix)]


def write_rotated(records: list[Any], directory: Path, *, compress: str = "zstd", rotate_bytes: int = 1_500,
                  batch: int = 7) -> list[Path]:  # fmt: skip
    """Write ``records`` (a capture_start first; no capture_end: closing writes it) with the proxy's own
    writer, rotating at ``rotate_bytes`` and compressing as written; the files written, in order.

    Records go in ``batch`` at a time, each batch written before the next (rotation is checked after
    each written batch), so a small capture still spans several files.
    """
    import asyncio

    from proxy.capture.writer import CaptureWriter, WriterOptions

    start, body = records[0], records[1:]

    async def go() -> list[Path]:
        w = CaptureWriter(WriterOptions(directory=directory, compress=compress, rotate_bytes=rotate_bytes), start)
        w.open()
        for i in range(0, len(body), batch):
            for r in body[i : i + batch]:
                w.emit(r)
            async with asyncio.timeout(30):
                while w.backlog:  # the writer thread drains its queue; no event says so
                    await asyncio.sleep(0.002)
        await w.close()
        return list(w.paths)

    return asyncio.run(go())


def without_left_note(err: str, first: str) -> str:
    """A follow's stderr after its first line, which must say that the newest capture (its file ``first``) is
    not being written, so it is shown as it was left: the tests' captures are files no writer holds."""
    note, _, rest = err.partition("\n")
    assert note.startswith("triton-tap: warning: the newest capture in ") and f"({first}) is not being written" in note
    assert note.endswith("showing it as it was left (--live waits for a capture being written)"), note
    return rest

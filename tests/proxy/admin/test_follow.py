"""``tail --follow``'s reader of capture files (proxy/admin/follow.py), on files written by the test.

The race it must survive: the directory is listed (``capture-X.jsonl`` is the newest capture), then
the writer rotates and compresses that file to ``capture-X.jsonl.gz`` before the follow opens it.
"""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path

import pytest

from proxy.admin import follow
from replay.capture import events as ev
from replay.capture.schema import encode
from replay.errors import CaptureError


def _lines(reason: str) -> bytes:
    start = ev.CaptureStarted(t_ns=1, proxy_version="t", listen="a:1", upstream="b:2", options={})
    end = ev.CaptureEnded(t_ns=2, reason=reason, counts={})  # type: ignore[arg-type]
    return encode(start, 0) + encode(end, 1)


async def _all(first: Path) -> list[bytes]:
    return [line async for _, line in follow.follow_lines(first)]


def test_a_file_compressed_between_listing_and_opening_is_read_as_its_gz(tmp_path: Path) -> None:
    plain = tmp_path / "capture-20261203T000000-1.jsonl"
    (tmp_path / f"{plain.name}.gz").write_bytes(gzip.compress(_lines("shutdown")))
    got = asyncio.run(_all(plain))  # the name as listed; only the .gz is there now
    assert [b'"kind":"capture_start"' in got[0], follow.is_end(got[1])] == [True, True]


def test_a_file_gone_for_good_is_a_capture_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follow, "VANISHED_S", 0.2)
    with pytest.raises(CaptureError, match="vanished while it was followed"):
        asyncio.run(_all(tmp_path / "capture-20261203T000000-1.jsonl"))

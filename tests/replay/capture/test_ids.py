"""One rule for ids across captures read in one run: the n-th capture's ids get ``n:`` (n >= 2)."""

from __future__ import annotations

from replay.capture import events as ev
from replay.capture.ids import CaptureIds


def _start(file_index: int) -> ev.CaptureStarted:
    return ev.CaptureStarted(t_ns=1, proxy_version="t", listen="l:1", upstream="u:2", options={},
                             file_index=file_index)  # fmt: skip


def test_first_capture_keeps_its_ids_later_ones_are_prefixed_and_rotation_is_not_a_new_capture() -> None:
    """A rotated file's capture_start (file_index > 0) continues the same capture; only a first file starts one."""
    ids = CaptureIds()
    assert ids.of("c1.1") == "c1.1" and ids.captures == 0
    assert ids.starts(_start(0)) and ids.of("c1.1") == "c1.1"
    assert not ids.starts(_start(1)) and ids.of("c1.1") == "c1.1"
    assert not ids.starts(ev.HalfClosed(t_ns=2, call="c1.1"))
    assert ids.starts(_start(0)) and ids.of("c1.1") == "2:c1.1"
    assert ids.starts(_start(0)) and ids.of("c1") == "3:c1" and ids.captures == 3

"""A capture tracked the way `replay check` did before it streamed: every request outcome kept in memory.

The streaming outputs (`check --json` through its spill file, the table through its sink) are
compared with what this gives (tests/replay/cli/test_check_json_stream.py, test_check_table_stream.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replay.capture import events as ev
from replay.capture.reader import read_capture
from replay.machine.outcomes import TrackResult
from replay.machine.tracker import Tracker


def track_in_memory(paths: list[Path]) -> tuple[TrackResult, list[dict[str, Any]]]:
    """The tracker's whole result (no sink) and the capture's marks as `check` prints them."""
    reader = read_capture(paths)
    tracker = Tracker()
    reader.on_loss = tracker.lost
    marks: list[dict[str, Any]] = []
    for seq, record in reader:
        if type(record) is ev.MarkRecorded:
            marks.append({"seq": seq, "t_ns": record.t_ns, "note": record.note, "labels": record.labels})
        tracker.feed(seq, record)
    return tracker.finish(reader.gaps, reader.warnings), marks

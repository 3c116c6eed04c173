"""``check --json`` in flat memory: request outcomes go to a temporary file as they settle, then out in order.

The tracker hands every request over as soon as its outcome can no longer change
(:class:`~replay.machine.outcomes.RequestSink`), so nothing per record and nothing per finished
request stays in memory: what does is O(calls) (each call's status and where its spilled requests
are) plus a bounded buffer (:attr:`SpillSink.BUDGET`). The document written is byte for byte what
``orjson.dumps(TrackResult.to_json() + marks, OPT_INDENT_2)`` gives (tests/replay/cli/test_check_cli.py).
"""

from __future__ import annotations

import tempfile
from typing import IO, Any, TextIO

import orjson

from replay.machine.outcomes import RequestOutcome, Tally, TrackResult

_INDENT = orjson.OPT_INDENT_2


class SpillSink:
    """Keeps settled request outcomes per call, in a temporary file once they outgrow :attr:`BUDGET` bytes."""

    #: Bytes of encoded outcomes held in memory before they are written to the temporary file.
    BUDGET = 8 << 20

    def __init__(self) -> None:
        self.tally = Tally()
        self._file: IO[bytes] | None = None
        # call position -> encoded outcomes not yet spilled, one per line. One bytearray, not a list of
        # orjson's bytes: each of those keeps its whole output buffer (measured ~8 KB per ~300 B line).
        self._pending: dict[int, bytearray] = {}
        self._chunks: dict[int, list[tuple[int, int]]] = {}  # call position -> (offset, length) spilled
        self._status: dict[int, str | None] = {}  # call position -> its status, once the call is over
        self._held = 0

    def settled(self, call_pos: int, outcome: RequestOutcome) -> None:
        """A request's outcome, final but for its call's status (see RequestSink)."""
        self._add(call_pos, outcome)

    def call_over(self, call_pos: int, status: str | None, outcomes: list[RequestOutcome]) -> None:
        """A call's status and its remaining requests."""
        self._status[call_pos] = status
        for outcome in outcomes:
            self._add(call_pos, outcome)

    def _add(self, call_pos: int, outcome: RequestOutcome) -> None:
        self.tally.add(outcome)
        line = orjson.dumps(outcome.to_json(), option=orjson.OPT_APPEND_NEWLINE)
        pending = self._pending.get(call_pos)
        if pending is None:
            pending = self._pending[call_pos] = bytearray()
        pending += line
        self._held += len(line)
        if self._held > self.BUDGET:
            self._spill()

    def _spill(self) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="triton-tap-check-")
        f = self._file
        f.seek(0, 2)
        for pos, blob in self._pending.items():
            self._chunks.setdefault(pos, []).append((f.tell(), len(blob)))
            f.write(blob)
        self._pending.clear()
        self._held = 0

    def requests(self) -> Any:
        """Every request's ``check --json`` entry (encoded), calls in capture order, each call's in order."""
        for pos in sorted(self._pending.keys() | self._chunks.keys()):
            status = self._status.get(pos)
            for offset, length in self._chunks.get(pos, ()):
                assert self._file is not None
                self._file.seek(offset)
                yield from _entries(self._file.read(length), status)
            yield from _entries(self._pending.get(pos, b""), status)

    def close(self) -> None:
        """Remove the temporary file."""
        if self._file is not None:
            self._file.close()
            self._file = None


def _entries(blob: bytes | bytearray, status: str | None) -> Any:
    for line in blob.splitlines():
        entry: dict[str, Any] = orjson.loads(line)
        entry["status"] = status  # settled before the call ended: its status is known only now
        yield entry


def write_json(out: TextIO, sink: SpillSink, result: TrackResult, marks: list[dict[str, Any]]) -> None:
    """The ``check --json`` document: the requests from ``sink``, the rest from ``result``."""
    first = True
    for entry in sink.requests():
        text = orjson.dumps(entry, option=_INDENT).replace(b"\n", b"\n    ")
        out.write(('{\n  "requests": [\n    ' if first else ",\n    ") + text.decode())
        first = False
    out.write('{\n  "requests": [],' if first else "\n  ],")
    rest = {
        "unattributable": [u.to_json() for u in result.unattributable],
        "gaps": [g.to_json() for g in result.gaps],
        "summary": result.summary(sink.tally),
        "marks": marks,
    }
    out.write(orjson.dumps(rest, option=_INDENT)[1:].decode() + "\n")

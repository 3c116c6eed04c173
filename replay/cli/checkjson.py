"""``check --json`` in flat memory: request outcomes go to a temporary file as they settle, then out in order.

The tracker hands every request over as soon as its outcome can no longer change
(:class:`~replay.machine.outcomes.RequestSink`), so nothing per record and nothing per finished
request stays in memory: what does is O(calls) (each call's status and where its spilled requests
are) plus a bounded buffer (:attr:`SpillSink.BUDGET`). The document written is byte for byte what
``orjson.dumps(TrackResult.to_json() + marks, OPT_INDENT_2)`` gives (tests/replay/cli/test_check_cli.py).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import IO, Any, TextIO

import orjson

from replay.machine.outcomes import RequestOutcome, Tally, TrackResult

_INDENT = orjson.OPT_INDENT_2
# Entries are kept as the document will show them (indented, each after this separator): written
# out as they are, not parsed and encoded again (issue 15: 18.8k -> 17.9k instructions a record of
# the 21-records-a-request shape; the temporary file is ~2x larger for it).
_SEP = b",\n    "
# An entry settled before its call ended has status null; its call's status goes here at the end.
# Unique in an entry: a raw newline never occurs inside a JSON string, and a nested key is indented
# deeper than the entry's own (6 spaces).
_STATUS_NULL = b'\n      "status": null,'


class SpillSink:
    """Keeps settled request outcomes per call, in a temporary file once they outgrow :attr:`BUDGET` bytes."""

    #: Bytes of encoded outcomes held in memory before they are written to the temporary file.
    BUDGET = 8 << 20

    def __init__(self) -> None:
        self.tally = Tally()
        self._file: IO[bytes] | None = None
        # call position -> encoded outcomes not yet spilled, each after _SEP. One bytearray, not a list
        # of orjson's bytes: each of those keeps its whole output buffer (measured ~8 KB per ~300 B line).
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
        entry = orjson.dumps(outcome.to_json(), option=_INDENT).replace(b"\n", b"\n    ")
        pending = self._pending.get(call_pos)
        if pending is None:
            pending = self._pending[call_pos] = bytearray()
        pending += _SEP
        pending += entry
        self._held += len(entry) + len(_SEP)
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

    def requests(self) -> Iterator[bytes]:
        """The ``requests`` list's entries as encoded, each after ``,\\n    ``: calls in capture order,
        each call's in order, with its call's status."""
        for pos in sorted(self._pending.keys() | self._chunks.keys()):
            status = self._status.get(pos)
            # Only null is there to replace: an entry encoded after its call ended has the status.
            fill = b'\n      "status": ' + orjson.dumps(status) + b"," if status is not None else None
            for offset, length in self._chunks.get(pos, ()):
                assert self._file is not None
                self._file.seek(offset)
                blob = self._file.read(length)
                yield blob if fill is None else blob.replace(_STATUS_NULL, fill)
            blob = bytes(self._pending.get(pos, b""))
            yield blob if fill is None else blob.replace(_STATUS_NULL, fill)

    def close(self) -> None:
        """Remove the temporary file."""
        if self._file is not None:
            self._file.close()
            self._file = None


def write_json(out: TextIO, sink: SpillSink, result: TrackResult, marks: list[dict[str, Any]]) -> None:
    """The ``check --json`` document: the requests from ``sink``, the rest from ``result``."""
    first = True
    for blob in sink.requests():
        if not blob:
            continue
        if first:  # the list's first entry follows its opening, not a separator
            blob = b'{\n  "requests": [\n    ' + blob[len(_SEP) :]
            first = False
        out.write(blob.decode())
    out.write('{\n  "requests": [],' if first else "\n  ],")
    rest = {
        "unattributable": [u.to_json() for u in result.unattributable],
        "protocol_errors": [p.to_json() for p in result.protocol_errors],
        "gaps": [g.to_json() for g in result.gaps],
        "summary": result.summary(sink.tally),
        "marks": marks,
    }
    out.write(orjson.dumps(rest, option=_INDENT)[1:].decode() + "\n")

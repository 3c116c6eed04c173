"""What every call ``serve`` answers shares: the loaded capture and its matcher, the timing, the ids
rule, the warnings given once, and how a call is refused (NOT_FOUND, INVALID_ARGUMENT) with one log line.

The grpc server (:mod:`replay.tools.serve.server`) and one stream's replay
(:mod:`replay.tools.serve.stream`) both answer through it, so neither needs the other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import grpc

from replay.tools.match import Candidate, Key, Matcher
from replay.tools.serve.index import LoadedCapture
from replay.tools.serve.responses import Undecodable, delay_s

log = logging.getLogger("triton_tap.serve")


#: The ends a captured call's client made (its cancel, its disconnect): serve makes one only this long after
#: its captured moment, so that a client doing as the captured one did (cancelling after the responses it
#: got) ends the call itself, as live; a client that only waits still sees the captured end. (An HTTP end that
#: was Triton's close after the client's FIN answered that FIN: a live client's FIN brings it sooner, see httpd.)
CLIENT_ENDS = frozenset({"client_cancel", "client_disconnect"})
CLIENT_END_GRACE_S = 1.0


def _names(regions: Sequence[str]) -> str:
    return ", ".join(repr(r) for r in dict.fromkeys(regions))


class Session:
    """One ``serve`` run's shared state (one per :class:`~replay.tools.serve.server.MockTriton`)."""

    def __init__(self, capture: LoadedCapture, speed: float | None, strategies: Sequence[str], keep_ids: bool) -> None:
        self.capture = capture
        self.speed = speed  # None: no delays (``--timing fast``)
        self.keep_ids = keep_ids
        self.matcher = Matcher([*capture.candidates, *capture.http_candidates], strategies)
        self.unmatched: list[str] = []  # NOT_FOUND messages, in order (for callers and tests)
        self._warned: set[str] = set()

    def note_dataless(self, real: bool, what: str) -> None:
        """Warn once per RPC kind that answers carry zero-filled data."""
        if not real and what not in self._warned:
            self._warned.add(what)
            log.warning("%s answers whose bytes the capture does not hold (a meta capture, or bytes cut at "
                        "--payload-cap) are rebuilt from the labels: output data is zero-filled (record with "
                        "--payload full for the real bytes)", what)  # fmt: skip

    def note_shared_memory(self, where: str, asked: Sequence[str], captured: Candidate) -> bool:
        """Warn that a call's tensors are in shared memory, which serve neither reads nor writes: ``asked``, the
        regions the incoming request names; ``captured``, the captured request it matched (its regions are known
        from its bytes, ``--payload full``). True when it warned (a stream warns once: the caller keeps it).

        The data never crossed the wire (the request names a region; Triton read the inputs from it and wrote
        the outputs into it), so an answer "as captured" is an OK without the output data: said, not implied.
        """
        if asked:
            log.warning("%s: the request names shared-memory region(s) %s: the tensor data was in the client's "
                        "shared memory on the recording host and is not in the capture; serve answers as captured "
                        "call %s did and does not write the output region, which is left as it is",
                        where, _names(asked), captured.call)  # fmt: skip
            return True
        if captured.regions:
            log.warning("%s: captured call %s's request named shared-memory region(s) %s: the tensor data was in "
                        "the client's shared memory on the recording host and is not in the capture; the answer "
                        "carries no data of the outputs Triton wrote there", where, captured.call,
                        _names(captured.regions))  # fmt: skip
            return True
        return False

    def note_region_call(self, what: str) -> None:
        """Warn once per run that shared-memory register/unregister/status calls are answered as captured and map
        nothing (serve holds no region: its inference answers write none); ``what``: the first such call."""
        if "shared memory" not in self._warned:
            self._warned.add("shared memory")
            log.warning("%s: answered as captured, as every shared-memory register, unregister and status call "
                        "is; serve maps no shared memory (the regions named were the recording host's), so "
                        "requests naming a region get the captured answers and their output regions are not "
                        "written", what)  # fmt: skip

    async def not_found(self, context: Any, key: Key, where: str) -> None:
        """Log and end the call with NOT_FOUND explaining the closest candidate."""
        message = "triton-tap serve: " + self.matcher.explain(key)
        self.unmatched.append(message)
        log.warning("%s: %s", where, message)
        await context.abort(grpc.StatusCode.NOT_FOUND, message)

    async def unrecorded_end(self, context: Any, call_id: str, where: str) -> None:
        """End the call with UNAVAILABLE: the capture holds no end of captured call ``call_id`` (it ended with
        the call open: the proxy was killed, or the end is in a file not given), so what its client got
        then is unknown, and an OK end would be a success the wire never showed."""
        message = (f"triton-tap serve: the capture holds no end of call {call_id} (it ends with the call open, "
                   "or the end is in a file not given): what its client got then is unknown")  # fmt: skip
        log.warning("%s: %s", where, message)
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)

    async def undecodable(self, context: Any, request: Undecodable, where: str) -> None:
        """Log one line and end the call with INVALID_ARGUMENT: the client sent bytes that do not parse."""
        message = f"triton-tap serve: the request message ({request.size} bytes) does not parse: {request.error}"
        log.warning("%s: %s", where, message)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)

    @staticmethod
    def grace(cause: str | None) -> float:
        """Seconds serve waits past a captured end's moment before making it (see :data:`CLIENT_ENDS`)."""
        return CLIENT_END_GRACE_S if cause in CLIENT_ENDS else 0.0

    async def pause(self, start_ns: int, end_ns: int) -> None:
        """Wait the replayed time between two captured instants (none with ``--timing fast``)."""
        if self.speed is not None and end_ns > start_ns:
            await asyncio.sleep(delay_s(start_ns, end_ns, self.speed))

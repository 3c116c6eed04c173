"""Which Triton requests of one call are still waiting for their final response.

The proxy asks this at every cancel (``in_flight`` / ``responded`` of a ``cancel`` record); fed
the same ``message`` facts, replay gets the same answer. Request ids may repeat (Triton does not
require them to be unique), so each id keeps a count.
"""

from __future__ import annotations


class InFlight:
    """Per-call set of request ids sent and not yet final, and which of them got any response."""

    __slots__ = ("_open", "_responded", "_unary")

    def __init__(self, *, unary: bool) -> None:
        self._open: dict[str, int] = {}
        self._responded: set[str] = set()
        # A unary ModelInfer has exactly one response, which completes it whatever its flags.
        self._unary = unary

    def sent(self, request_id: str) -> None:
        """A request with this id went to the server."""
        self._open[request_id] = self._open.get(request_id, 0) + 1

    def answered(self, request_id: str, final: bool | None) -> None:
        """A response with this id came back; ``final`` is its raw final flag."""
        if request_id not in self._open:
            return
        if final or self._unary:
            left = self._open[request_id] - 1
            if left:
                self._open[request_id] = left
            else:
                del self._open[request_id]
                self._responded.discard(request_id)
        else:
            self._responded.add(request_id)

    def snapshot(self) -> tuple[list[str], list[str]]:
        """``(in_flight, responded)``: open ids (repeated per open request), those with responses."""
        in_flight = [rid for rid, n in self._open.items() for _ in range(n)]
        return in_flight, [rid for rid in self._open if rid in self._responded]

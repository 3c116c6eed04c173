"""A user-style streaming client, as people write them with tritonclient: text assembled per request id.

It is deliberately ordinary client code (no triton-tap imports): the same object is driven by a
live tritonclient stream and by ``replay.feed_stream``, and must end in the same state.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TextAssembler:
    """Stream callback: text per request id, done on the final flag, errors as the client sees them."""

    output: str = "TEXT"
    text: dict[str, str] = field(default_factory=dict)
    responses: dict[str, int] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    #: in-band errors (tritonclient gives no request id with them)
    errors: list[str] = field(default_factory=list)
    #: the stream's terminal error as (status, message), if any
    stream_error: tuple[str, str] | None = None
    events: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)

    def __call__(self, result: Any = None, error: Any = None) -> None:
        with self.changed:
            self.events += 1
            if error is not None:
                if error.status() is None:
                    self.errors.append(error.message())
                else:
                    self.stream_error = (error.status(), error.message())
            else:
                r = result.get_response()
                self.responses[r.id] = self.responses.get(r.id, 0) + 1
                if len(r.outputs):
                    chunk = "".join(x.decode() for x in result.as_numpy(self.output).reshape(-1))
                    self.text[r.id] = self.text.get(r.id, "") + chunk
                if r.parameters["triton_final_response"].bool_param:
                    self.done.add(r.id)
            self.changed.notify_all()

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> None:
        """Block until ``predicate(self)`` holds (AssertionError after ``timeout`` seconds)."""
        with self.changed:
            if not self.changed.wait_for(lambda: predicate(self), timeout=timeout):
                raise AssertionError(f"timed out waiting; state: {self.state()}")

    def state(self) -> dict[str, Any]:
        """Everything the client knows, for comparing a live run with a replay."""
        with self.changed:
            return {
                "text": dict(self.text),
                "responses": dict(self.responses),
                "done": sorted(self.done),
                "errors": list(self.errors),
                "stream_error": self.stream_error,
            }

"""Id groups: requests of one call that were in flight together with the same id.

Triton echoes the request id in every response, and tritonclient's default id is ``""``, so a
client that sends several requests on one stream without ids gets responses the wire cannot
tell apart. What the wire *does* show is how many requests were sent and how many final flags
came back. So requests sharing an id while in flight form a :class:`Group`:

* A request sent while no other request with its id is open starts a new group of one, and the
  group's responses are its own: attribution is exact (a sequence of id-less requests sent one
  at a time is attributed exactly).
* A request sent while another with its id is still open joins that group, which becomes
  *shared*: from then on its responses are counted for the group, and its finals count down the
  group's open requests. When finals equal requests, every request of the group has ended.
* When the group is over (its last final, or the call's end for the requests still open), the
  tally decides: if every request of the group ended the same way (all completed, all errors,
  all cancelled...), each request gets that outcome; otherwise each request's outcome is
  ``group`` (known only for the group) and the group's counts say what happened.

Pure: no I/O; the members' state machines are fed through the table like any request's.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from replay.machine.outcomes import GroupOutcome
from replay.machine.table import _FALLBACK, _TRANSITIONS, Input, RequestMachine, State


class Member(Protocol):
    """What a group needs of a request (the tracker's ``_Request``)."""

    machine: RequestMachine
    seq: int
    final: bool | None


M = TypeVar("M", bound=Member)


class Group(Generic[M]):
    """Requests of one call sharing an id while in flight; see the module docstring."""

    __slots__ = ("error", "errors", "finals", "members", "open", "outcome", "request_id", "responses", "shared", "text")

    def __init__(self, first: M, request_id: str) -> None:
        self.request_id = request_id
        self.members: list[M] = [first]
        self.open = 1  # requests of the group without their final (counted down by finals)
        self.shared = False  # two or more were in flight together: responses are the group's
        self.responses = 0
        self.text = 0
        self.finals = {"completed": 0, "error": 0}
        self.errors = 0  # error responses without the final flag
        self.outcome: GroupOutcome | None = None
        self.error: str | None = None  # the first error message of the shared group

    def join(self, member: M) -> None:
        """Another request with the group's id was sent while one of it was open."""
        self.members.append(member)
        self.open += 1
        self.shared = True

    def count(self, *, text: bool, error: bool, final: bool) -> bool:
        """A response of the shared group; True when it ended the group's last open request."""
        self.responses += 1
        self.text += text
        if final:
            self.finals["error" if error else "completed"] += 1
            self.open -= 1
        elif error:
            self.errors += 1
        return final and self.open == 0

    def close(self, end: Input | None, seq: int | None) -> None:
        """The group is over: at its last final (``end`` None) or at its call's end (``end``).

        Feeds each member the input that leads to the group's common outcome, or ``group_mixed``
        when its requests ended in different ways. The call's end is fed afterwards by the
        tracker, to every request, as usual.
        """
        ended = {k: n for k, n in self.finals.items() if n}
        if self.open and end is not None:
            left = _TRANSITIONS.get((State.SENT, end)) or _FALLBACK.get((State.SENT, end), State.INCOMPLETE)
            ended[left.value] = ended.get(left.value, 0) + self.open
        kinds = set(ended)
        if self.errors:
            kinds.add("error")
        uniform = len(kinds) <= 1
        for m in self.members:
            if not uniform:
                m.machine.feed(Input.GROUP_MIXED, seq)
                m.final = None
            elif kinds == {"completed"}:
                m.machine.feed(Input.FINAL, seq)
                m.final = True
            elif kinds == {"error"} and (self.finals["error"] or self.errors):
                # Errors seen for the group, the final (or the call's end) for each request.
                m.machine.feed(Input.ERROR, seq)
                if not self.open:
                    m.machine.feed(Input.FINAL, seq)
                    m.final = True
            # else: nobody got a final and no error: the call's end decides for every member.
        self.outcome = GroupOutcome(
            first_seq=self.members[0].seq, request_id=self.request_id, requests=len(self.members),
            responses=self.responses, text_responses=self.text, ended=ended, errors_without_final=self.errors,
            per_request=uniform,
        )  # fmt: skip

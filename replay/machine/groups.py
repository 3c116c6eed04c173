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
* Requests with one id to different models are different groups: Triton names the model in every
  response but its refusal of a request (an unknown model, a missing input), so a response naming a
  model is its group's. A refusal, while groups of its id for several models are open, is placed by
  the tracker once their answers leave one it can be (a refusal is a request's one answer); other
  responses naming none, and refusals no answer placed, make those groups one from then on
  (:meth:`Group.absorb`), known only together, as requests to one model are.
* When the group is over (its last final, or the call's end for the requests still open), the
  tally decides (:func:`ended`): if every request of the group ended the same way (all completed,
  all errors, all cancelled...), each request gets that outcome; otherwise, or when the wire cannot
  say which requests an error without the final flag ended, each request's outcome is ``group``
  (known only for the group) and the group's counts say what happened.

Pure: no I/O; the members' state machines are fed through the table like any request's.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from replay.machine.outcomes import GroupOutcome
from replay.machine.table import Input, RequestMachine, State, end_of_open

#: The outcomes a request can have: a key of ``ended`` that is not one of them names several.
_OUTCOMES = frozenset(s.value for s in State)
_ERROR = State.ERROR.value
_ERROR_RECEIVED = State.ERROR_RECEIVED
#: How many of a group's distinct error texts it keeps: the first in text order, since which of them
#: came first is the server's timing, and what is kept must not depend on it.
KEEP_ERROR_TEXTS = 16


class Member(Protocol):
    """What a group needs of a request (the tracker's ``_Request``)."""

    machine: RequestMachine
    seq: int
    model: str | None
    t_sent: int
    final: bool | None
    final_due: bool  # it asked for a final flag (empty final responses enabled)
    responses: int  # responses attributed to it (while it was alone with its id)
    errors: int  # of them, errors without the final flag
    was_refused: bool  # its group's refusals pinned it (see Group.close): it owes no final


def refused(m: Member) -> bool:
    """Triton refused the request: its one answer is an error without the final flag.

    Triton answers a request it cannot run (an unknown model, a missing or malformed input) so, empty
    finals enabled or not, and sends nothing more for it (seen live, 2.51): such a request owes no
    final. A model's own error without the flag comes after responses, or is followed by more: Triton
    keeps the request open until the model's final. A member of a group whose every request without a
    final was refused (:meth:`Group.close`) is one too, though its one answer was counted for the group.
    """
    return m.machine.state is _ERROR_RECEIVED and (m.responses == 1 or m.was_refused)


M = TypeVar("M", bound=Member)


class Group(Generic[M]):
    """Requests of one call sharing an id while in flight; see the module docstring."""

    __slots__ = ("error", "error_seq", "error_texts", "errors", "finals", "members", "model", "open", "outcome",
                 "refusals", "request_id", "responses", "shared", "t_first", "text")  # fmt: skip

    def __init__(self, first: M, request_id: str) -> None:
        self.request_id = request_id
        self.model = first.model  # the model its requests went to (the first one's, once groups were absorbed)
        self.members: list[M] = [first]
        self.open = 1  # requests of the group without their final (counted down by finals)
        self.shared = False  # two or more were in flight together: responses are the group's
        self.responses = 0
        self.text = 0
        self.finals = {"completed": 0, "error": 0}
        self.errors = 0  # error responses without the final flag
        self.refusals = 0  # of them, naming no model: Triton's refusals, each a request's one answer
        self.outcome: GroupOutcome | None = None
        self.error: str | None = None  # the first error message of the shared group
        self.error_seq = 0  # where it came (the record's seq)
        self.error_texts: set[str] | None = None  # its distinct error messages (at most KEEP_ERROR_TEXTS)
        self.t_first: int | None = None  # when the shared group's first response came

    def join(self, member: M) -> None:
        """Another request with the group's id was sent while one of it was open."""
        self.members.append(member)
        self.open += 1
        self.shared = True

    def absorb(self, other: Group[M]) -> None:
        """``other``, open with this group's id for another model, is counted with this group from now on: a
        response naming no model could have been either's. What each request got while alone stays its own,
        as when a request joins a group; what either group counted as a group is added up."""
        self.members = sorted([*self.members, *other.members], key=_seq)
        self.open += other.open
        self.shared = True
        self.responses += other.responses
        self.text += other.text
        for kind, n in other.finals.items():
            self.finals[kind] += n
        self.errors += other.errors
        self.refusals += other.refusals
        if other.error is not None and (self.error is None or other.error_seq < self.error_seq):
            self.error, self.error_seq = other.error, other.error_seq
        for text in other.error_texts or ():
            self._keep(text)
        if other.t_first is not None and (self.t_first is None or other.t_first < self.t_first):
            self.t_first = other.t_first

    def errored(self, text: str, seq: int) -> None:
        """An error message of the shared group, in the record ``seq`` (an error placed later can have come
        earlier than one seen already: the first by ``seq`` is the group's :attr:`error`)."""
        if self.error is None or seq < self.error_seq:
            self.error, self.error_seq = text, seq
        self._keep(text)

    def _keep(self, text: str) -> None:
        texts = self.error_texts
        if texts is None:
            texts = self.error_texts = set()  # (most groups get no error: made at the first)
        if text not in texts:
            texts.add(text)
            if len(texts) > KEEP_ERROR_TEXTS:
                texts.discard(max(texts))

    def count(self, *, text: bool, error: bool, final: bool, t_ns: int, refusal: bool = False) -> bool:
        """A response of the shared group (``refusal``: an error naming no model); True when it ended the
        group's last open request."""
        self.responses += 1
        if self.t_first is None or t_ns < self.t_first:  # (an error placed after it came: see the tracker)
            self.t_first = t_ns
        self.text += text
        if final:
            self.finals["error" if error else "completed"] += 1
            self.open -= 1
        elif error:
            self.errors += 1
            self.refusals += refusal
        return final and self.open == 0

    def finals_missing(self) -> int:
        """How many of the group's requests that asked for a final flag certainly got none: those that
        asked and were not refused on their own, less the finals seen and the group's errors without the
        flag (each may be Triton's refusal of one of them, which no final follows). Whose finals came the
        wire does not say: a final of a request that did not ask for one may have come instead of one
        that did, so only this count is certain."""
        asked = sum(1 for m in self.members if m.final_due and not refused(m))
        return max(0, asked - self.finals["completed"] - self.finals["error"] - self.errors)

    def close(self, end: Input | None, seq: int | None) -> None:
        """The group is over: at its last final (``end`` None) or at its call's end (``end``).

        Feeds each member the input that leads to the group's common outcome, or ``group_mixed``
        when :func:`ended` does not give one outcome for all. The call's end is fed afterwards by
        the tracker, to every request, as usual.
        """
        left = end_of_open(end).value if self.open and end is not None else None
        # A request's own error before the group was shared (it was alone with its id then) ends it in
        # error too, and which of the group's finals was its own is as unknown as for a shared error.
        own = sum(1 for m in self.members if m.machine.state is _ERROR_RECEIVED)
        # Each refusal (Triton's, naming no model) is one request's one answer: that request ended in error
        # and gets no final, so it is one of those still open, and its error is placed.
        pinned = min(self.refusals, self.open)
        how = ended(self.finals, left, self.open - pinned, self.errors - pinned + own)
        if pinned:
            how[_ERROR] = how.get(_ERROR, 0) + pinned
        # One source: the members' outcomes, the counts shown and check's warning all come from `how`.
        uniform = len(how) <= 1 and how.keys() <= _OUTCOMES
        for m in self.members:
            if not uniform:
                m.machine.feed(Input.GROUP_MIXED, seq)
                m.final = None
            elif how.keys() == {"completed"}:
                m.machine.feed(Input.FINAL, seq)
                m.final = True
            elif how.keys() == {_ERROR} and (self.finals["error"] or self.errors):
                # Errors seen for the group, the final (or the call's end) for each request.
                m.machine.feed(Input.ERROR, seq)
                if not self.open:
                    m.machine.feed(Input.FINAL, seq)
                    m.final = True
                elif self.open == pinned:
                    # Every request without a final was refused: each ended in error, none owes a final,
                    # and which of them got the finals that came is unknown.
                    m.final = None
                    m.was_refused = True
            # else: nobody got a final and no error: the call's end decides for every member.
        t0 = self.members[0].t_sent
        self.outcome = GroupOutcome(
            first_seq=self.members[0].seq, request_id=self.request_id, requests=len(self.members),
            responses=self.responses, text_responses=self.text, ended=how,
            # Its requests' own too: whether an error came just before or just after a second request
            # with the id was sent is the clients' timing, and either way one of the group's got it.
            errors_without_final=self.errors + sum(m.errors for m in self.members),
            per_request=uniform, error_texts=tuple(sorted(self.error_texts)) if self.error_texts else (),
            first_response_ms=None if self.t_first is None else round((self.t_first - t0) / 1e6, 3),
        )  # fmt: skip


def _seq(m: Member) -> int:
    return m.seq


def ended(finals: dict[str, int], left: str | None, still_open: int, errors: int) -> dict[str, int]:
    """How a group's requests ended, as far as the wire tells: outcome -> requests.

    ``finals``: final flags by kind (``completed``/``error``); ``left``: the outcome the call's end
    gives the ``still_open`` requests that got no final (None: none left); ``errors``: error
    responses without the final flag. Such an error makes its request end in ``error`` whatever
    ends it later, but the wire does not say whose it was: one of them, or of several. So when it
    could have been any of several requests not otherwise known to have failed, those are counted
    as ``"<outcome> or error"`` (e.g. ``unconfirmed or error``: some of them got an error), and only
    a count the wire pins down is a plain outcome.
    """
    how = {k: n for k, n in finals.items() if n}
    if left is not None and still_open:
        how[left] = how.get(left, 0) + still_open
    others = [k for k in how if k != _ERROR]
    if not errors or not others:
        return how  # no error to place, or every request ended in error anyway
    if errors == 1 and _ERROR not in how and len(others) == 1:
        # One error, and every request ended alike otherwise: exactly one of them failed.
        n = how[others[0]]
        return {others[0]: n - 1, _ERROR: 1} if n > 1 else {_ERROR: 1}
    return {(k if k == _ERROR else f"{k} or error"): n for k, n in how.items()}

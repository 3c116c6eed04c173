"""``triton-tap diff A B``: what changed between two captures of the same traffic, request by request.

Pure over two :class:`~replay.tools.captured.CaptureSummary` objects: B's requests are matched to A's as
``serve`` matches incoming requests (:mod:`replay.tools.match`, without reusing a request), then each pair
is compared on what the client experienced: outcome, responses and text responses, final flag, error
text, the call's status and cause, protocol violations, and the time to the first response and to
the end when they moved by more than a tolerance (milliseconds, or a percentage of A's, the larger).
Requests only in A or only in B are listed, and per model (:mod:`replay.tools.regression`): outcome
changes, response-count, final-flag and error changes, and timing percentiles side by side.
``model_map`` (``--model-map old=new``, as given to ``replay send``) pairs A's requests for ``old``
with B's for ``new``.
Other calls (readiness, metadata...) carry no request to pair: they are compared as counts per
method and status. Equivalent means: every request paired, no pair changed, the same other calls,
and no model's timing percentile beyond the tolerance, slower or faster (a diff says what differs,
not whether it is better: a request's time is a change either way too; the report names the
direction, :attr:`DiffResult.slower` and :attr:`DiffResult.faster`, so a faster build is never
called slower).
Holes of either capture (dropped records, repeated seqs, a missing ``capture_end``) are listed with
the result but do not change the verdict: it is about what both captures hold, which holes make partial.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from replay.capture import events as ev
from replay.capture.holes import Gap
from replay.capture.methods import MODEL_NAMED, READINESS, is_inference, protocol, short_method
from replay.machine.groups import KEEP_ERROR_TEXTS
from replay.machine.outcomes import CallOutcome, RequestOutcome
from replay.machine.table import State
from replay.tools.captured import CaptureSummary
from replay.tools.match import STRATEGIES, Candidate, Matcher
from replay.tools.regression import FASTER, SLOWER, ModelRegression, Tolerance, per_model

DEFAULT_THRESHOLD_MS = 100.0
#: Compared as they are (``violations`` as the list of names).
FIELDS: tuple[str, ...] = ("outcome", "responses", "text_responses", "final", "error", "status", "cause", "violations",
                          "group")
TIMINGS: tuple[str, ...] = ("first_response_ms", "duration_ms")
#: Endings the client caused: the same one on both sides is the same fact, whatever text came with it.
CLIENT_SIDE = frozenset({"client_cancel", "deadline", "client_disconnect"})
#: Outcomes of a request such an ending cut (it had no final yet): only its count of responses raced the end.
CUT_BY_CLIENT = frozenset({State.CANCELLED.value, State.DEADLINE.value, State.DISCONNECTED.value})


@dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """One field of a request that differs between A and B."""

    field: str
    a: Any
    b: Any

    def to_json(self) -> dict[str, Any]:
        """``{"field", "a", "b"}``."""
        return {"field": self.field, "a": self.a, "b": self.b}


@dataclass(frozen=True, kw_only=True, slots=True)
class Pair:
    """A request of A and the request of B matched to it."""

    a: RequestOutcome
    b: RequestOutcome
    by: str  # the match strategy
    changes: tuple[Change, ...]
    #: Counts of responses that differ only by when the client ended the request (:func:`cut_late`): shown,
    #: not changes.
    raced: tuple[Change, ...] = ()
    #: Counts cut by the client's end alike on both sides, and other: how long after the other side had the
    #: next response the side with fewer ended (:func:`cut_late`); within the tolerance they raced.
    cut_ms: float | None = None


def _ref(r: RequestOutcome) -> dict[str, Any]:
    return {"call": r.call, "seq": r.seq, "model": r.model, "request_id": r.request_id, "kind": r.kind}


@dataclass(frozen=True, kw_only=True)
class DiffResult:
    """Pairs, unpaired requests and the settings they were compared with."""

    pairs: tuple[Pair, ...]
    only_a: tuple[RequestOutcome, ...]
    only_b: tuple[RequestOutcome, ...]
    threshold_ms: float
    strategies: tuple[str, ...]
    #: Calls that are not inference requests (readiness, metadata...): count per "<method> <status>" that differs.
    calls: tuple[Change, ...] = ()
    #: Responses no request could be given (an unknown or empty id...): count per "<reason>[ with error]" that differs.
    unattributable: tuple[Change, ...] = ()
    #: Holes of each capture (dropped, repeated or never written records): they do not change
    #: :attr:`equivalent`, which is about the requests that were captured, but say it may be partial.
    holes_a: tuple[Gap, ...] = ()
    holes_b: tuple[Gap, ...] = ()
    #: Per model: what moved (:mod:`replay.tools.regression`); a percentile beyond tolerance is a difference.
    models: tuple[ModelRegression, ...] = ()
    tolerance_pct: float = 0.0
    #: Calls each capture's proxy refused unprocessed (``call_end.refused``), left out of the comparison: such a
    #: call never ran, and its client may have sent it again, a call of its own that is compared.
    refused_a: int = 0
    refused_b: int = 0

    @property
    def changed(self) -> list[Pair]:
        """Pairs with at least one change."""
        return [p for p in self.pairs if p.changes]

    @property
    def raced(self) -> list[Pair]:
        """Pairs whose counts of responses differ only by when their client ended them (not changes)."""
        return [p for p in self.pairs if p.raced]

    @property
    def equivalent(self) -> bool:
        """Every request paired, none changed, the same other calls and unattributable responses, no percentile
        beyond tolerance either way.

        Holes do not count: the verdict is about what both captures hold.
        """
        return (not self.only_a and not self.only_b and not self.changed and not self.calls and not self.unattributable
                and not self.slower and not self.faster)  # fmt: skip

    @property
    def slower(self) -> list[ModelRegression]:
        """Models with a timing percentile longer in B beyond tolerance."""
        return [m for m in self.models if m.moved(SLOWER)]

    @property
    def faster(self) -> list[ModelRegression]:
        """Models with a timing percentile shorter in B beyond tolerance (a model can be in both lists)."""
        return [m for m in self.models if m.moved(FASTER)]

    def to_json(self) -> dict[str, Any]:
        """The ``diff --json`` document."""
        return {
            "equivalent": self.equivalent,
            "threshold_ms": self.threshold_ms,
            "match": list(self.strategies),
            "requests": [
                {"a": _ref(p.a), "b": _ref(p.b), "matched_by": p.by, "changes": [c.to_json() for c in p.changes],
                 "raced": [c.to_json() for c in p.raced], "cut_ms": p.cut_ms}
                for p in self.pairs
            ],
            "only_a": [_ref(r) for r in self.only_a],
            "only_b": [_ref(r) for r in self.only_b],
            "calls": [c.to_json() for c in self.calls],
            "unattributable": [c.to_json() for c in self.unattributable],
            "holes": {"a": [g.to_json() for g in self.holes_a], "b": [g.to_json() for g in self.holes_b]},
            "tolerance": {"ms": self.threshold_ms, "pct": self.tolerance_pct},
            "models": [m.to_json() for m in self.models],
            "summary": {
                "paired": len(self.pairs),
                "changed": len(self.changed),
                "raced": len(self.raced),
                "only_a": len(self.only_a),
                "only_b": len(self.only_b),
                "calls_changed": len(self.calls),
                "unattributable_changed": len(self.unattributable),
                "holes_a": len(self.holes_a),
                "holes_b": len(self.holes_b),
                "models_slower": len(self.slower),
                "models_faster": len(self.faster),
                "refused_a": self.refused_a,
                "refused_b": self.refused_b,
            },
        }


@dataclass(slots=True)
class GroupTotal:
    """What an id group's requests got together: responses and text responses (each request's own, while it
    was alone with its id, and the group's), and the distinct error texts (its requests' and the group's)."""

    responses: int
    text_responses: int
    errors: set[str]

    def error(self) -> str | list[str] | None:
        """The error texts, as :func:`error_texts` gives them."""
        return error_texts(self.errors)


def error_texts(errors: Collection[str]) -> str | list[str] | None:
    """Error texts compared together, in text order (the first :data:`~replay.machine.groups.KEEP_ERROR_TEXTS`,
    as a group keeps them): one text as it is, none as None."""
    texts = sorted(errors)[:KEEP_ERROR_TEXTS]
    return texts[0] if len(texts) == 1 else texts or None


#: (call, its id group's first request seq) -> what the group's requests got (:class:`GroupTotal`).
GroupTotals = dict[tuple[str, int], GroupTotal]


def group_totals(requests: Iterable[RequestOutcome]) -> GroupTotals:
    """Every id group's responses and error texts, its requests' own ones added (see :data:`GroupTotals`)."""
    out: GroupTotals = {}
    for r in requests:
        g = r.group
        if g is not None:
            total = out.get((r.call, g.first_seq))
            if total is None:
                total = out[r.call, g.first_seq] = GroupTotal(g.responses, g.text_responses, set(g.error_texts))
            total.responses += r.responses
            total.text_responses += r.text_responses
            if r.error is not None:
                total.errors.add(r.error)
    return out


@dataclass(frozen=True, slots=True)
class Together:
    """Requests sent with one id that were an id group on one side and each alone with the id on the other,
    as that side saw them together: how they ended, what they got, their error texts."""

    request_id: str | None
    ended: tuple[tuple[str, int], ...]  # outcome -> requests, in outcome order
    responses: int
    text_responses: int
    errors: frozenset[str]

    def values(self) -> dict[str, Any]:
        """The compared fields of each of the requests (the same for all of them: they are compared together)."""
        ended = ", ".join(f"{n} {k}" for k, n in self.ended)
        return {
            "outcome": "together", "responses": None, "text_responses": None, "final": None,
            "error": error_texts(self.errors),
            "group": (f"{sum(n for _, n in self.ended)} request(s) with id {self.request_id!r} (ended: {ended}), "
                      f"{self.responses} response(s) ({self.text_responses} text) to them"),
        }  # fmt: skip


def together(
    pairs: Sequence[tuple[RequestOutcome, RequestOutcome]], a: Iterable[RequestOutcome], b: Iterable[RequestOutcome],
    totals_a: GroupTotals, totals_b: GroupTotals,
) -> dict[tuple[str, int], tuple[Together, Together]]:
    """A's request (call, seq) -> both sides' :class:`Together` view, for the requests of an id group on one side
    whose partners on the other were each alone with the id.

    Whether requests with one id form a group is the clients' timing: a request refused at once and its
    correction with the same id sent just before the refusal came (a group) or just after (two requests, each
    exact). Pair by pair, a group's shared fields never equal an exact request's (it was `outcome error ->
    group`). So such requests are compared as what they got together on each side. Only where that is whole:
    every member paired, every partner alone with its id, on one call, and no partner another's."""
    members_a, members_b = _members(a), _members(b)
    to_b = {(ra.call, ra.seq): rb for ra, rb in pairs}
    to_a = {(rb.call, rb.seq): ra for ra, rb in pairs}
    out: dict[tuple[str, int], tuple[Together, Together]] = {}
    for ra, rb in pairs:
        if (ra.call, ra.seq) in out or (ra.group is None) == (rb.group is None):
            continue
        grouped, members, there, totals = (ra, members_a, to_b, totals_a) if ra.group else (rb, members_b, to_a, totals_b)
        g = grouped.group
        assert g is not None
        mine = members[grouped.call, g.first_seq]
        partners = [there.get((m.call, m.seq)) for m in mine]
        alone = [p for p in partners if p is not None and p.group is None]
        if len(alone) != len(mine) or len({p.call for p in alone}) != 1 or len({p.seq for p in alone}) != len(alone):
            continue
        total = totals[grouped.call, g.first_seq]
        as_group = Together(
            request_id=g.request_id, ended=tuple(sorted((k, n) for k, n in g.ended.items() if n)),
            responses=total.responses, text_responses=total.text_responses, errors=frozenset(total.errors),
        )  # fmt: skip
        as_requests = Together(
            request_id=g.request_id, ended=tuple(sorted(Counter(p.as_recorded for p in alone).items())),
            responses=sum(p.responses for p in alone), text_responses=sum(p.text_responses for p in alone),
            errors=frozenset(p.error for p in alone if p.error is not None),
        )  # fmt: skip
        views = (as_group, as_requests) if ra.group else (as_requests, as_group)
        for ra_key in ([(m.call, m.seq) for m in mine] if ra.group else [(p.call, p.seq) for p in alone]):
            out[ra_key] = views
    return out


def _members(requests: Iterable[RequestOutcome]) -> dict[tuple[str, int], list[RequestOutcome]]:
    """(call, an id group's first request seq) -> its requests."""
    out: dict[tuple[str, int], list[RequestOutcome]] = {}
    for r in requests:
        if r.group is not None:
            out.setdefault((r.call, r.group.first_seq), []).append(r)
    return out


def _values(r: RequestOutcome, causes: dict[str, str | None], totals: GroupTotals) -> dict[str, Any]:
    values = {
        # What the records show: holes do not change the verdict, which compares what both captures hold.
        "outcome": r.as_recorded,
        "responses": r.responses,
        "text_responses": r.text_responses,
        "final": r.final,
        "error": r.error,
        "status": r.status,
        "cause": causes.get(r.call),
        "violations": [v.name for v in (*r.violations, *r.violations_after_loss)],
        "group": None,
    }
    g = r.group
    if g is not None:
        # A request of an id group (ids sent again while in flight): how the group ended is its outcome
        # too. Which of its requests got responses while still alone with its id is the clients' timing
        # (the second sent just before or just after the first's first response), not the server's
        # behaviour: a group is compared by what all its requests got. So are its errors: a row shows
        # the group's first, and which came first is the server's timing.
        total = totals[r.call, g.first_seq]
        values["responses"] = values["text_responses"] = None
        values["error"] = total.error()
        values["group"] = (f"{g.describe()}, {total.responses} response(s) ({total.text_responses} text) "
                           f"to its requests")  # fmt: skip
    return values


def compare(
    a: RequestOutcome, b: RequestOutcome, causes_a: dict[str, str | None], causes_b: dict[str, str | None],
    threshold_ms: float, tolerance_pct: float, totals_a: GroupTotals, totals_b: GroupTotals,
    views: tuple[Together, Together] | None = None,
) -> tuple[tuple[Change, ...], tuple[Change, ...], float | None]:  # fmt: skip
    """What differs between two matched requests (``totals_*``: each side's :func:`group_totals`; ``views``: the
    pair's :func:`together` views, when it has them): the changes, the counts of responses that raced their
    client's end, and how late the side with fewer ended (:func:`cut_late`)."""
    tol = Tolerance(ms=threshold_ms, pct=tolerance_pct)
    va, vb = _values(a, causes_a, totals_a), _values(b, causes_b, totals_b)
    if views is not None:
        va.update(views[0].values())
        vb.update(views[1].values())
    race: tuple[Change, ...] = ()
    late: float | None = None
    if views is None and va["cause"] == vb["cause"] and va["cause"] in CLIENT_SIDE and va["status"] == vb["status"]:
        # The same client-side ending: its text names who noticed first (the client's timer or
        # Triton's for a deadline), a race, not a behaviour. The cause and status say what happened.
        vb["error"] = va["error"]
        # A request that had its final (or an error) before the client ended the call was not cut: its count
        # is the server's answer, compared as it is.
        cut = cut_late(a, b) if va["outcome"] == vb["outcome"] and va["outcome"] in CUT_BY_CLIENT else None
        if cut is not None:
            late, base = cut
            if late <= 0 or not tol.exceeded(base, base + late):
                race = tuple(Change(field=f, a=va[f], b=vb[f]) for f in ("responses", "text_responses")
                             if va[f] != vb[f])  # fmt: skip
                vb["responses"], vb["text_responses"] = va["responses"], va["text_responses"]
    if va["error"] is not None and vb["error"] is not None and ev.NONE_ERROR_TEXT in (va["error"], vb["error"]):
        # One side recorded with --payload none kept that there was an error, not its text: no change there.
        vb["error"] = va["error"]
    out = [Change(field=f, a=va[f], b=vb[f]) for f in FIELDS if va[f] != vb[f]]
    for f in TIMINGS:
        ta, tb = getattr(a, f), getattr(b, f)
        # A timing that exists on one side only is already a change of responses or outcome.
        if ta is not None and tb is not None and tol.exceeded(ta, tb):
            out.append(Change(field=f, a=ta, b=tb))
    return tuple(out), race, late


def due(r: RequestOutcome, k: int) -> float | None:
    """When ``r`` had its ``k``-th response (1 <= k <= its responses; ms from the request), at the pace it
    got them: its first and last exact, those between evenly spread (the capture keeps no more per request)."""
    first, last, n = r.first_response_ms, r.last_response_ms, r.responses
    if first is None or last is None or not 1 <= k <= n:
        return None
    return first if n == 1 else first + (last - first) * (k - 1) / (n - 1)


def cut_late(a: RequestOutcome, b: RequestOutcome) -> tuple[float, float] | None:
    """Two requests their client ended the same way (a cancel, a deadline, a disconnect at an offset), with
    other counts of responses: how long (ms) after the side with more had the next response the side with
    fewer ended without it (negative: before it was due), and A's time of the two (the tolerance's percentage
    is of it: A's next response's when A has more, else A's end). A count cut by the client's end is the
    server's pace over the client's window, so within the timing tolerance the two raced (the server a
    little faster, the end a little later), and beyond it the pace moved. None when that cannot be told: the
    same count, an id group (compared by what all its requests got), or text responses that moved otherwise
    than the count."""
    if a.group is not None or b.group is not None or a.responses == b.responses:
        return None
    more, fewer = (a, b) if a.responses > b.responses else (b, a)
    if (more.text_responses - fewer.text_responses) not in range(0, more.responses - fewer.responses + 1):
        return None
    at, end = due(more, fewer.responses + 1), fewer.duration_ms
    if at is None or end is None:
        return None
    return round(end - at, 3), at if more is a else end


def diff(
    a: CaptureSummary, b: CaptureSummary, *, strategies: Sequence[str] = STRATEGIES,
    threshold_ms: float = DEFAULT_THRESHOLD_MS, tolerance_pct: float = 0.0, model_map: Mapping[str, str] | None = None,
) -> DiffResult:  # fmt: skip
    """Match B's requests to A's and compare each pair."""
    # gRPC and HTTP requests are candidates of different kinds (captured.match_kind): never paired.
    matcher = Matcher(_renamed([*a.candidates, *a.http_candidates], model_map or {}), strategies, reuse=False)
    causes_a = {c.call: c.cause for c in a.outcomes.calls}
    causes_b = {c.call: c.cause for c in b.outcomes.calls}
    totals_a, totals_b = group_totals(a.outcomes.requests), group_totals(b.outcomes.requests)
    pairs: list[Pair] = []
    only_b: list[RequestOutcome] = []
    paired_a: set[tuple[str, int]] = set()
    requests = [(cand, rb) for cand in (*b.candidates, *b.http_candidates)
                if (rb := b.outcome(cand.call, cand.seq)) is not None]  # fmt: skip
    matches = matcher.match_all([(cand.key, cand.call) for cand, _ in requests])
    matched: list[tuple[RequestOutcome, RequestOutcome, str]] = []
    for (_, rb), m in zip(requests, matches, strict=True):
        ra = a.outcome(m.candidate.call, m.candidate.seq) if m.candidate is not None else None
        if m.candidate is None or ra is None or m.by is None:
            only_b.append(rb)
            continue
        paired_a.add((ra.call, ra.seq))
        matched.append((ra, rb, m.by))
    views = together([(ra, rb) for ra, rb, _ in matched], a.outcomes.requests, b.outcomes.requests, totals_a, totals_b)
    for ra, rb, by in matched:
        changes, race, late = compare(ra, rb, causes_a, causes_b, threshold_ms, tolerance_pct, totals_a, totals_b,
                                      views.get((ra.call, ra.seq)))  # fmt: skip
        pairs.append(Pair(a=ra, b=rb, by=by, changes=changes, raced=race, cut_ms=late))
    only_a = tuple(r for r in a.outcomes.requests if (r.call, r.seq) not in paired_a and r.call not in a.refused)
    back = {new: old for old, new in (model_map or {}).items()}
    models = per_model(((p.a, p.b, {c.field for c in p.changes}) for p in pairs), only_a, only_b, Tolerance(ms=threshold_ms, pct=tolerance_pct), back)
    return DiffResult(pairs=tuple(pairs), only_a=only_a, only_b=tuple(only_b), threshold_ms=threshold_ms,
                      strategies=tuple(strategies), calls=other_calls(a, b), unattributable=unattributable(a, b),
                      holes_a=a.outcomes.gaps, holes_b=b.outcomes.gaps, models=tuple(models),
                      tolerance_pct=tolerance_pct, refused_a=len(a.refused), refused_b=len(b.refused))  # fmt: skip


def _renamed(candidates: Sequence[Candidate], model_map: Mapping[str, str]) -> list[Candidate]:
    """A's candidates under the names B's requests carry (``--model-map``)."""
    if not model_map:
        return list(candidates)
    return [replace(c, key=replace(c.key, model=model_map.get(c.key.model, c.key.model))) if c.key.model else c
            for c in candidates]  # fmt: skip


def _other_key(call: CallOutcome, unnamed: Collection[str]) -> str:
    """``ModelReady tokens OK not ready``: the method (HTTP: with its path, which names the model), the model a
    gRPC request named (not for the methods ``unnamed``), the status, and a readiness answer's flag (a model
    that stopped being ready is still an OK call: only the answer says it)."""
    if protocol(call.method) == "http":
        return f"{short_method(call.method)} {call.status or 'open'}"
    name = call.method.rsplit("/", 1)[-1]
    key = f"{name} {call.model} " if call.model is not None and call.method not in unnamed else f"{name} "
    key += call.status or "open"
    if call.ready is not None:
        flag = READINESS.get(name, "ready")
        key += f" {flag}" if call.ready else f" not {flag}"
    return key


def _other_counts(c: CaptureSummary, unnamed: Collection[str]) -> Counter[str]:
    return Counter(_other_key(call, unnamed) for call in c.outcomes.calls
                   if not is_inference(call.method) and call.call not in c.refused)  # fmt: skip


def _unnamed(*captures: CaptureSummary) -> set[str]:
    """The gRPC methods a capture holds calls of but no model of: recorded by a proxy from before it recorded
    the model these requests name. Compared by model on one side only, the same traffic would read as
    different; those methods are compared without it on both."""
    methods: dict[str, bool] = {}
    out: set[str] = set()
    for c in captures:
        methods.clear()
        for call in c.outcomes.calls:
            if call.method in MODEL_NAMED:
                methods[call.method] = methods.get(call.method, False) or call.model is not None
        out.update(m for m, named in methods.items() if not named)
    return out


def _count_changes(ca: Counter[str], cb: Counter[str]) -> tuple[Change, ...]:
    return tuple(Change(field=k, a=ca[k], b=cb[k]) for k in sorted(ca.keys() | cb.keys()) if ca[k] != cb[k])


def other_calls(a: CaptureSummary, b: CaptureSummary) -> tuple[Change, ...]:
    """Non-inference calls (readiness, metadata...) compared as counts per method, the model a request named,
    status and a readiness answer (:func:`_other_key`)."""
    unnamed = _unnamed(a, b)
    return _count_changes(_other_counts(a, unnamed), _other_counts(b, unnamed))


def _unattributable_counts(c: CaptureSummary) -> Counter[str]:
    return Counter(f"{u.reason}{' with error' if u.error else ''}" for u in c.outcomes.unattributable)


def unattributable(a: CaptureSummary, b: CaptureSummary) -> tuple[Change, ...]:
    """Responses no request could be given, compared as counts per reason (and whether they carried an error)."""
    return _count_changes(_unattributable_counts(a), _unattributable_counts(b))

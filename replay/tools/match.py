"""Which captured request an incoming (or another capture's) request stands for: shared by serve and diff.

Pure: a :class:`Matcher` is built from the :class:`Candidate` requests of a capture and asked, one
request at a time, for the candidate that matches a :class:`Key`. It keeps which candidates were
already used, so the same script sent twice meets the captured requests in order.

Strategies, tried in the order given (default ``id,payload,order``): per request for ``serve`` (requests
come one at a time), per strategy over every request for ``diff`` (:meth:`Matcher.match_all`, where all
of B's requests are known):

* ``id``: same kind (stream/unary), model, model version asked for and non-empty Triton request id; among
  requests sharing an id, one with the same inputs (where both sides have them: ``--payload full``) comes
  first.
* ``payload``: same kind, model, version and *input* hash (:func:`payload_key`): model version, every input's
  name, datatype, shape and contents, and the parameters other than ids. The request id (and the
  ``sequence_id`` parameter) is left out on purpose: the fallback exists for clients whose ids change
  from run to run. Needs a ``--payload full`` capture.
* ``order``: the next unused request of the same kind, model and version, in capture order.

The version is the one the request asked for (``""``: the server's choice), as it asked: a request for
version 2 stands for a captured request for version 2, never for one that asked for 1 (or for any).

Within a strategy, candidates of the call already paired with the incoming one's call come first
(so a stream keeps following one captured stream), then unused ones before reused ones (``id``
and ``payload`` may replay a candidate again, ``order`` never does), then capture order.
When nothing matches, :meth:`Matcher.explain` names the closest candidate and why it failed, in
the spirit of vcrpy's "can't find a match" message. A match costs amortised O(1) whatever the number
of candidates (per group of equal model and id, input hash or nothing: candidate lanes with a cursor
at the first unused one), so ``diff`` of two captures of many requests is not quadratic.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from replay.capture.methods import HTTP_INFERENCE, INFERENCE, http_call

STRATEGIES: tuple[str, ...] = ("id", "payload", "order")
_IGNORED_PARAMS = frozenset({"sequence_id"})


def parse_strategies(text: str) -> tuple[str, ...]:
    """``"id,payload"`` -> ``("id", "payload")``; raises ValueError naming a bad one."""
    out = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in out if s not in STRATEGIES]
    if bad or not out:
        raise ValueError(
            f"unknown match strategy {', '.join(map(repr, bad)) or repr(text)} (choose from {', '.join(STRATEGIES)})"
        )
    return out


def input_hash(request: Any) -> str:
    """Hex SHA-256 of what a parsed ``ModelInferRequest`` asks for, without its ids: :func:`payload_key`'s gRPC
    rule, for a request grpc has already parsed (see the module docstring)."""
    h = hashlib.sha256()

    def put(b: bytes) -> None:
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)

    put(request.model_name.encode())
    put(request.model_version.encode())
    for i, t in enumerate(request.inputs):
        put(t.name.encode())
        put(t.datatype.encode())
        put(",".join(str(d) for d in t.shape).encode())
        put(t.contents.SerializeToString(deterministic=True))
        put(request.raw_input_contents[i] if i < len(request.raw_input_contents) else b"")
    for key in sorted(request.parameters):
        if key not in _IGNORED_PARAMS:
            put(key.encode())
            put(request.parameters[key].SerializeToString(deterministic=True))
    return h.hexdigest()


def http_json_part(body: bytes) -> tuple[dict[str, Any], bytes] | None:
    """An HTTP inference body's leading JSON object and the bytes after it (with the binary-data extension,
    the raw tensors, whose start ``Inference-Header-Content-Length`` gives); None when it has no JSON object."""
    text = body.decode("utf-8", "replace")
    try:
        head, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    if not isinstance(head, dict):
        return None
    # The JSON part decoded without a replacement: its text encodes back to the bytes it came from.
    return head, body[len(text[:end].encode("utf-8", "replace")) :]


def _http_hash(version: str, body: bytes) -> str | None:
    """:func:`payload_key` of an HTTP inference body: the gRPC rule read in JSON (see the module docstring)."""
    parts = http_json_part(body)
    if parts is None:
        return None
    head, tensors = parts
    # The same ids left out as from a ModelInferRequest: the body's "id" and the parameters named in
    # _IGNORED_PARAMS; the rest (inputs, outputs, parameters, an OpenAI body's fields) is compared as JSON.
    head = {k: v for k, v in head.items() if k != "id"}
    params = head.get("parameters")
    if isinstance(params, dict):
        head["parameters"] = {k: v for k, v in params.items() if k not in _IGNORED_PARAMS}
    h = hashlib.sha256()
    for b in (version.encode(), json.dumps(head, sort_keys=True, separators=(",", ":")).encode(), tensors):
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def payload_key(method: str, body: bytes) -> str | None:
    """The ``payload`` strategy's value (:attr:`Key.input_hash`) of a request message of a call of ``method``
    (``call_start.method``: a gRPC path or an HTTP request line): what the request asks for, without its ids.

    gRPC ModelInfer / ModelStreamInfer: :func:`input_hash` of the ``ModelInferRequest``. HTTP inference
    (infer, generate, generate_stream, OpenAI): the version the path names (as gRPC's ``model_version``), the
    body's JSON part without ``"id"`` and ``parameters.sequence_id``, compared as JSON (key order and spacing
    do not count), and the binary tensors after it as bytes. The model is not hashed for HTTP (the key's model
    already holds it). None: the message does not parse, or ``method`` carries no inference request.
    """
    if method in INFERENCE:
        # Imported here: tritonclient (and grpc under it) costs ~0.6 s, and the CLI imports this module
        # for --match's choices before any command runs.
        from google.protobuf.message import DecodeError
        from tritonclient.grpc import service_pb2 as pb

        try:
            return input_hash(pb.ModelInferRequest.FromString(body))
        except DecodeError:  # a payload that does not parse cannot be matched on; the labels still can
            return None
    call = http_call(method)
    if call is None or call.kind not in HTTP_INFERENCE:
        return None
    return _http_hash(call.version or "", body)


@dataclass(frozen=True, kw_only=True, slots=True)
class Key:
    """What matching knows about one request."""

    kind: str  # "stream" or "unary"
    model: str | None
    request_id: str | None
    input_hash: str | None  # null when the payload was not captured (or cut)
    version: str = ""  # the model version asked for ("": the server's choice)

    def describe(self) -> str:
        """``request id 'x' of model 'tokens'`` (``version '2'``) for messages."""
        rid = "without id" if not self.request_id else f"id {self.request_id!r}"
        version = f" version {self.version!r}" if self.version else ""
        return f"{self.kind} request {rid} of model {self.model!r}{version}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """A captured request that can be matched."""

    key: Key
    call: str  # call id as ``replay check`` names it
    seq: int  # the request's record
    position: int  # 0-based index among the capture's requests of the same kind and model
    #: The shared-memory regions the request names (``--payload full``: its tensors' data was in the
    #: recording client's memory, so the capture holds neither it nor the outputs Triton wrote there)
    regions: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Match:
    """The outcome of one :meth:`Matcher.match`."""

    candidate: Candidate | None
    by: str | None  # the strategy that matched
    reused: bool = False  # the candidate had been matched before


class _Lane:
    """Candidate indexes in capture order, per call too, each with a cursor at the first one that may be
    unused (``used`` only grows, so a cursor never moves back: a match costs amortised O(1))."""

    __slots__ = ("_next", "by_call", "items")

    def __init__(self) -> None:
        self.items: list[int] = []
        self._next = 0
        self.by_call: dict[str, _Lane] = {}  # empty in the per-call lanes themselves

    def add(self, i: int, call: str) -> None:
        """Candidate ``i`` (of ``call``), after every one added before."""
        self.items.append(i)
        sub = self.by_call.get(call)
        if sub is None:
            sub = self.by_call[call] = _Lane()
        sub.items.append(i)

    def first(self, used: set[int]) -> int | None:
        """The lowest unused index, None when all are used."""
        items, n = self.items, self._next
        while n < len(items) and items[n] in used:
            n += 1
        self._next = n
        return items[n] if n < len(items) else None


class Matcher:
    """Pairs requests with captured candidates; pure, keeps which candidates were used."""

    def __init__(
        self, candidates: Iterable[Candidate], strategies: Sequence[str] = STRATEGIES, *, reuse: bool = True
    ) -> None:
        self.candidates: tuple[Candidate, ...] = tuple(candidates)
        self.strategies = tuple(strategies)
        self.reuse = reuse  # id/payload may match an already used candidate again (a script replayed twice)
        self.used: set[int] = set()  # indexes into candidates
        self._by_model: dict[tuple[str, str | None, str], list[int]] = {}
        for i, c in enumerate(self.candidates):
            self._by_model.setdefault((c.key.kind, c.key.model, c.key.version), []).append(i)
        self._lanes: dict[str, dict[tuple[str, str | None, str, str | None], int | _Lane]] = {}

    @property
    def steps(self) -> tuple[str, ...]:
        """The lanes :meth:`match` tries, in order: each strategy's, ``id`` preceded by ``id+payload`` (several
        requests may share an id, as clients reuse them: where the inputs are known on both sides, the one
        with the same inputs is the one a request stands for, whatever the order)."""
        return tuple(step for s in self.strategies for step in (("id+payload", "id") if s == "id" else (s,)))

    def match(self, key: Key, prefer_call: str | None = None, *, step: str | None = None) -> Match:
        """The candidate ``key`` stands for (and mark it used), or ``Match(None, None)``; ``step``: try that one
        of :attr:`steps` only (a caller that knows every request first tries each step for all of them:
        :func:`match_all`)."""
        for lane in self.steps if step is None else (step,):
            if lane == "id+payload":
                if not key.request_id or key.input_hash is None:
                    continue
                value: str | None = f"{key.request_id}\0{key.input_hash}"
            elif lane == "id":
                if not key.request_id:
                    continue
                value = key.request_id
            elif lane == "payload":
                if key.input_hash is None:
                    continue
                value = key.input_hash
            else:
                value = None
            best = self._pick(lane, (key.kind, key.model, key.version, value), prefer_call)
            if best is None:
                continue
            reused = best in self.used
            self.used.add(best)
            return Match(candidate=self.candidates[best], by="id" if lane == "id+payload" else lane, reused=reused)
        return Match(candidate=None, by=None)

    def match_all(self, requests: Sequence[tuple[Key, str]]) -> list[Match]:
        """Every one of ``requests`` (``(key, call)``, in order) matched, each step for all of them before the
        next: a request matches by ``order`` only once no later one matches that candidate by id or inputs.
        (One at a time, an earlier request's order fallback took the candidate a later one's id named.) A
        request of a call keeps preferring the captured call its first match came from."""
        found: list[Match] = [Match(candidate=None, by=None)] * len(requests)
        follows: dict[str, str] = {}  # call -> the captured call of its first match (in request order)
        for step in self.steps:
            for i, (key, call) in enumerate(requests):
                if found[i].candidate is not None:
                    continue
                m = self.match(key, prefer_call=follows.get(call), step=step)
                if m.candidate is not None:
                    found[i] = m
                    follows.setdefault(call, m.candidate.call)
        return found

    def _pick(self, strategy: str, group: tuple[str, str | None, str, str | None], prefer_call: str | None) -> int | None:
        """The best of ``group``'s candidates: on ``prefer_call`` first, then unused before used (``order``,
        or ``reuse=False``: unused only), then capture order. Amortised O(1): lanes keep a cursor."""
        lanes = self._lanes_of(strategy)
        whole = lanes.get(group)
        if whole is None:
            return None
        reuse = self.reuse and strategy != "order"  # order matches unused candidates only
        if isinstance(whole, int):  # one candidate
            return whole if reuse or whole not in self.used else None
        if prefer_call is not None:
            mine = whole.by_call.get(prefer_call)
            if mine is not None:
                i = mine.first(self.used)
                if i is not None:
                    return i
                if reuse:
                    return mine.items[0]
        i = whole.first(self.used)
        if i is not None:
            return i
        return whole.items[0] if reuse else None

    def _lanes_of(self, strategy: str) -> dict[tuple[str, str | None, str, str | None], int | _Lane]:
        """Per (kind, model, version, id or input hash or None for ``order``; ``id+payload``: both): its
        candidates (built on first use)."""
        lanes = self._lanes.get(strategy)
        if lanes is None:
            lanes = {}
            for i, c in enumerate(self.candidates):
                value: str | None
                if strategy == "id+payload":
                    if not c.key.request_id or c.key.input_hash is None:
                        continue
                    value = f"{c.key.request_id}\0{c.key.input_hash}"
                else:
                    value = c.key.request_id if strategy == "id" else c.key.input_hash if strategy == "payload" else None
                group = (c.key.kind, c.key.model, c.key.version, value)
                had = lanes.get(group)
                if had is None:
                    lanes[group] = i  # most groups of id and payload hold one candidate: no lane for them
                    continue
                if isinstance(had, int):
                    first, had = had, _Lane()
                    had.add(first, self.candidates[first].call)
                    lanes[group] = had
                had.add(i, c.call)
            self._lanes[strategy] = lanes
        return lanes

    def explain(self, key: Key) -> str:
        """Why ``key`` matched nothing: the closest candidate and what differs (one line)."""
        tried = ", ".join(self.strategies)
        head = f"no captured request matches {key.describe()} (match strategies: {tried})"
        same_kind = [i for i, c in enumerate(self.candidates) if c.key.kind == key.kind]
        if not same_kind:
            return f"{head}; the capture has no {key.kind} requests"

        def score(i: int) -> tuple[int, int, int, int, int]:
            c = self.candidates[i].key
            return (
                c.model == key.model,
                c.version == key.version,
                bool(key.request_id) and c.request_id == key.request_id,
                key.input_hash is not None and c.input_hash == key.input_hash,
                i not in self.used,
            )

        best = max(same_kind, key=lambda i: (score(i), -i))
        c = self.candidates[best]
        why = _differences(key, c, best in self.used, self.strategies, self)
        return f"{head}; closest: {c.key.describe()} (call {c.call}, seq {c.seq}): {'; '.join(why)}"


def _differences(key: Key, c: Candidate, used: bool, strategies: Sequence[str], m: Matcher) -> list[str]:
    out: list[str] = []
    if c.key.model != key.model:
        out.append(f"model differs ({c.key.model!r} captured)")
        return out
    if c.key.version != key.version:
        out.append(f"model version differs ({c.key.version!r} captured)" if c.key.version else
                   "model version differs (the captured request asked for none)")  # fmt: skip
        return out
    if "id" in strategies:
        if not key.request_id:
            out.append("id: the request has no id")
        elif c.key.request_id != key.request_id:
            out.append(f"id differs ({c.key.request_id!r} captured)")
    if "payload" in strategies:
        if key.input_hash is None:
            out.append("payload: the request's inputs are unknown")
        elif c.key.input_hash is None:
            out.append("payload: not captured (record with --payload full to match on inputs)")
        elif c.key.input_hash != key.input_hash:
            out.append("payload: inputs differ")
    if "order" in strategies:
        pool = m._by_model.get((key.kind, key.model, key.version), [])
        version = f" version {key.version!r}" if key.version else ""
        out.append(f"order: all {len(pool)} captured {key.kind} request(s) of model {key.model!r}{version} already used")
    elif used:
        out.append("already used")
    return out

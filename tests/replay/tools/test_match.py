"""Matching requests to captured ones (shared by serve and diff): strategies, preferences, explanations."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from replay.capture.methods import INFER
from replay.tools.match import Candidate, Key, Match, Matcher, input_hash, parse_strategies, payload_key


def _key(rid: str | None, model: str = "tokens", h: str | None = None, kind: str = "stream") -> Key:
    return Key(kind=kind, model=model, request_id=rid, input_hash=h)


def _cands(*keys: Key, call: str = "c1.1") -> list[Candidate]:
    return [Candidate(key=k, call=call, seq=10 + i, position=i) for i, k in enumerate(keys)]


def test_id_wins_over_order() -> None:
    """With ids equal, the request with that id is chosen even when it is not next in order."""
    m = Matcher(_cands(_key("a"), _key("b")))
    got = m.match(_key("b"))
    assert (got.candidate and got.candidate.key.request_id, got.by) == ("b", "id")


def test_payload_matches_when_ids_change_between_runs() -> None:
    """A new id with the same inputs falls back to the input hash."""
    m = Matcher(_cands(_key("a", h="h1"), _key("b", h="h2")))
    got = m.match(_key("run2-b", h="h2"))
    assert (got.candidate and got.candidate.key.request_id, got.by) == ("b", "payload")


def test_order_takes_the_next_unused_request_of_the_model_and_never_repeats() -> None:
    """Without id or hash, requests of a model are taken in capture order, each once."""
    m = Matcher(_cands(_key("a"), _key("b"), _key("x", model="echo")))
    assert [m.match(_key("")).candidate for _ in range(3)] == [*_cands(_key("a"), _key("b")), None]


def test_among_requests_sharing_an_id_the_same_inputs_come_first() -> None:
    """Two requests sent with one id (clients reuse ids), A asking for 3 tokens, B for 4: with the inputs
    known (--payload full), B's client meets B's answers even when it comes first; without, capture order."""
    m = Matcher(_cands(_key("dup", h="A"), _key("dup", h="B")))
    got = [m.match(_key("dup", h=h)) for h in ("B", "A")]
    assert [(g.candidate and g.candidate.key.input_hash, g.by) for g in got] == [("B", "id"), ("A", "id")]
    blind = Matcher(_cands(_key("dup", h="A"), _key("dup", h="B")))
    assert blind.match(_key("dup")).candidate == blind.candidates[0]


def test_id_match_may_replay_a_used_request_unless_reuse_is_off() -> None:
    """The same script twice against serve matches again; diff (reuse off) pairs each request once."""
    cands = _cands(_key("a"))
    again = Matcher(cands)
    again.match(_key("a"))
    second = again.match(_key("a"))
    assert second.candidate is not None and second.reused
    once = Matcher(cands, ["id"], reuse=False)
    once.match(_key("a"))
    assert once.match(_key("a")).candidate is None


def test_candidates_of_the_followed_call_come_first() -> None:
    """Two captured streams with the same ids: a stream keeps following the one it started on."""
    cands = _cands(_key("a"), _key("b"), call="c1.1") + _cands(_key("a"), _key("b"), call="c1.3")
    m = Matcher(cands)
    got = m.match(_key("b"), prefer_call="c1.3")
    assert got.candidate is not None and got.candidate.call == "c1.3"


def test_selected_strategies_only() -> None:
    """--match id does not fall back to order."""
    m = Matcher(_cands(_key("a")), parse_strategies("id"))
    assert m.match(_key("zzz")).candidate is None


def test_explain_names_the_closest_candidate_and_why() -> None:
    """The NOT_FOUND text names the nearest captured request and each reason it failed."""
    m = Matcher(_cands(_key("a", h="h1"), _key("q", model="silent")), ["id", "payload"])
    text = m.explain(_key("zzz", h="h9"))
    assert "no captured request matches stream request id 'zzz' of model 'tokens'" in text
    assert "closest: stream request id 'a' of model 'tokens' (call c1.1, seq 10)" in text
    assert text.endswith(": id differs ('a' captured); payload: inputs differ")


def test_explain_for_an_unknown_model_and_for_exhausted_order() -> None:
    """A model never captured says so; an exhausted order strategy says how many were used."""
    m = Matcher(_cands(_key("a")))
    assert "model differs ('tokens' captured)" in m.explain(_key("a", model="nope"))
    m.match(_key(""))
    assert "all 1 captured stream request(s) of model 'tokens' already used" in m.explain(_key(""))
    assert "the capture has no unary requests" in m.explain(_key("a", kind="unary"))


def test_input_hash_ignores_the_id_but_not_the_inputs() -> None:
    """Same inputs under another id hash alike; another prompt does not."""

    def req(rid: str, prompt: bytes) -> pb.ModelInferRequest:
        r = pb.ModelInferRequest(model_name="tokens", id=rid)
        r.inputs.add(name="PROMPT", datatype="BYTES", shape=[1])
        r.raw_input_contents.append(len(prompt).to_bytes(4, "little") + prompt)
        r.parameters["triton_enable_empty_final_response"].bool_param = True
        return r

    assert input_hash(req("a", b"hi")) == input_hash(req("b", b"hi"))
    assert input_hash(req("a", b"hi")) != input_hash(req("a", b"ho"))


def test_parse_strategies_rejects_unknown_names() -> None:
    """A typo in --match is a usage error naming the choices."""
    assert parse_strategies("payload, order") == ("payload", "order")
    with pytest.raises(ValueError, match="unknown match strategy 'idd'"):
        parse_strategies("idd")


def test_explain_says_which_strategy_could_not_apply() -> None:
    """Each reason a user reads in NOT_FOUND: no id to match on, inputs unknown on either side, already used."""
    m = Matcher(_cands(_key("a", h=None)), ["id", "payload"])
    text = m.explain(_key("", h="h1"))
    assert "no captured request matches stream request without id of model 'tokens' (match strategies: id, payload)" in text
    assert text.endswith(
        "(call c1.1, seq 10): id: the request has no id; "
        "payload: not captured (record with --payload full to match on inputs)"
    )
    assert m.explain(_key("b", h=None)).endswith("id differs ('a' captured); payload: the request's inputs are unknown")
    used = Matcher(_cands(_key("a")), ["id"], reuse=False)
    assert used.match(_key("a")).candidate is not None
    assert used.explain(_key("a")).endswith("(call c1.1, seq 10): already used")


def test_explain_names_the_candidate_closest_in_model_then_id_then_inputs() -> None:
    """Among several captured requests the one sharing the most with the request is named."""
    cands = _cands(_key("x", model="other"), _key("x", h="h0"), _key("a", h="h0"), _key("b", h="h1"))
    m = Matcher(cands, ["id", "payload"], reuse=False)
    assert "closest: stream request id 'a' of model 'tokens' (call c1.1, seq 12)" in m.explain(_key("a", h="h9"))
    assert "closest: stream request id 'b' of model 'tokens' (call c1.1, seq 13)" in m.explain(_key("q", h="h1"))
    assert "(call c1.1, seq 11)" in m.explain(_key("q", h=None))  # nothing shared: the first of the model
    m.match(_key("a", h="h9"))  # uses seq 12
    assert "(call c1.1, seq 12)" in m.explain(_key("a", h="h9"))  # still the closest, now "already used"


def test_parse_strategies_error_names_every_bad_name_and_the_choices() -> None:
    """Every unknown name is listed, and an empty --match shows what was given."""
    with pytest.raises(ValueError) as bad:
        parse_strategies("idd,order,x")
    assert str(bad.value) == "unknown match strategy 'idd', 'x' (choose from id, payload, order)"
    with pytest.raises(ValueError) as empty:
        parse_strategies(" , ")
    assert str(empty.value) == "unknown match strategy ' , ' (choose from id, payload, order)"


def test_input_hash_follows_what_the_request_asks_for() -> None:
    """A sequence replayed under new sequence ids still matches; shape, other parameters and typed
    contents (inputs sent without raw bytes) all count; the serialized form hashes alike."""

    def req(seq_id: int = 1, shape: int = 2, flag: bool = True, contents: int = 5) -> pb.ModelInferRequest:
        r = pb.ModelInferRequest(model_name="steps", id="s")
        r.parameters["sequence_id"].int64_param = seq_id
        r.parameters["sequence_start"].bool_param = flag
        t = r.inputs.add(name="IN", datatype="INT32", shape=[shape])
        t.contents.int_contents.extend([contents] * shape)
        return r

    assert input_hash(req(seq_id=1)) == input_hash(req(seq_id=99))
    assert len({input_hash(req()), input_hash(req(shape=3)), input_hash(req(flag=False)), input_hash(req(contents=6))}) == 4
    assert payload_key(INFER, req().SerializeToString()) == input_hash(req())



def test_payload_key_of_an_http_body_follows_the_grpc_rule() -> None:
    """What an HTTP inference body asks for, as for a ModelInferRequest: the ids (``"id"``, the ``sequence_id``
    parameter) left out; the inputs, other parameters, the path's version and binary tensors in; the JSON
    compared as JSON (key order, spacing); a body that is no JSON object, or a non-inference call, has none."""
    infer = "POST /v2/models/m/infer"

    def body(rid: str = "a", seq: int = 1, start: bool = True, data: int = 1, tail: bytes = b"") -> bytes:
        doc = {"id": rid, "parameters": {"sequence_id": seq, "sequence_start": start},
               "inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [data]}]}  # fmt: skip
        return json.dumps(doc).encode() + tail

    key = payload_key(infer, body())
    assert key is not None
    assert payload_key(infer, body(rid="b", seq=99)) == key
    assert payload_key(infer, b' {"parameters":{"sequence_start":true,"sequence_id":1},"id":"c","inputs":[{"data":[1],'
                              b'"shape":[1],"datatype":"INT32","name":"IN"}]}'.strip()) == key  # fmt: skip
    others = [body(start=False), body(data=2), body(tail=b"\x00"), body(tail=b"\x01")]
    keys = {payload_key(infer, b) for b in others} | {payload_key("POST /v2/models/m/versions/2/infer", body())}
    assert len(keys) == 5 and key not in keys
    assert payload_key("POST /v2/models/m/generate", body()) == key  # the endpoint is the key's kind, not its hash
    assert payload_key(infer, b"not json") is None and payload_key(infer, b"[1]") is None
    assert payload_key("GET /v2/health/ready", b"{}") is None
    assert payload_key(INFER, b"\xff\xff") is None  # a ModelInferRequest that does not parse


def test_unused_candidates_come_first_and_an_unknown_model_matches_nothing() -> None:
    """Two captured requests with one id are replayed in turn before either repeats; among equally close
    candidates NOT_FOUND names an unused one; a model never captured matches nothing, by any strategy."""
    m = Matcher(_cands(_key("a"), _key("a")), ["id"])
    assert [m.match(_key("a")).candidate.seq for _ in range(3)] == [10, 11, 10]  # type: ignore[union-attr]
    half = Matcher(_cands(_key("b"), _key("b")), ["id"], reuse=False)
    half.match(_key("b"))
    assert "(call c1.1, seq 11)" in half.explain(_key("zzz"))
    assert Matcher(_cands(_key("a"))).match(_key("a", model="nope")) == Match(candidate=None, by=None)


def test_input_hash_tells_shapes_apart_with_the_same_bytes() -> None:
    """[2, 3] and [3, 2] of the same bytes are different requests."""

    def req(shape: list[int]) -> pb.ModelInferRequest:
        r = pb.ModelInferRequest(model_name="m")
        r.inputs.add(name="X", datatype="UINT8", shape=shape)
        r.raw_input_contents.append(bytes(6))
        return r

    assert input_hash(req([2, 3])) != input_hash(req([3, 2]))


def _reference(m: Matcher, key: Key, prefer_call: str | None) -> int | None:
    """The matching rule spelled out over every candidate (what Matcher's lanes must agree with)."""
    pool = [i for i, c in enumerate(m.candidates) if (c.key.kind, c.key.model) == (key.kind, key.model)]
    def best(hits: list[int]) -> int | None:
        if not m.reuse:
            hits = [i for i in hits if i not in m.used]
        return min(hits, key=lambda i: (m.candidates[i].call != prefer_call, i in m.used, i)) if hits else None

    for strategy in m.strategies:
        if strategy == "id":
            if not key.request_id:
                continue
            hits = [i for i in pool if m.candidates[i].key.request_id == key.request_id]
            same = [i for i in hits if key.input_hash is not None and m.candidates[i].key.input_hash == key.input_hash]
            if (got := best(same)) is not None:  # among those sharing the id, the same inputs first
                return got
        elif strategy == "payload":
            if key.input_hash is None:
                continue
            hits = [i for i in pool if m.candidates[i].key.input_hash == key.input_hash]
        else:
            hits = [i for i in pool if i not in m.used]
        if (got := best(hits)) is not None:
            return got
    return None


_small_keys = st.builds(_key, st.sampled_from([None, "", "a", "b"]), st.sampled_from(["tokens", "echo"]),
                        st.sampled_from([None, "h1", "h2"]), st.sampled_from(["stream", "unary"]))  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    cands=st.lists(st.tuples(_small_keys, st.sampled_from(["c1.1", "c1.3", "c1.5"])), max_size=12),
    asks=st.lists(st.tuples(_small_keys, st.sampled_from([None, "c1.1", "c1.3"])), max_size=15),
    strategies=st.permutations(["id", "payload", "order"]).map(tuple),
    reuse=st.booleans(),
)
def test_matcher_agrees_with_the_rule_spelled_out(
    cands: list[tuple[Key, str]], asks: list[tuple[Key, str | None]], strategies: tuple[str, ...], reuse: bool
) -> None:
    """Whatever the candidates, strategies and asks: the indexed matcher picks what the plain rule picks."""
    m = Matcher([Candidate(key=k, call=c, seq=i, position=i) for i, (k, c) in enumerate(cands)], strategies,
                reuse=reuse)  # fmt: skip
    for key, prefer in asks:
        want = _reference(m, key, prefer)
        got = m.match(key, prefer_call=prefer)
        assert (got.candidate.seq if got.candidate is not None else None) == want


def test_a_followed_stream_sent_again_replays_its_requests_from_its_first() -> None:
    """A captured stream sent the id "x" twice; a client stream following it sends "x" three times: the first
    two meet the captured ones in order, the third replays the stream's first "x" again (capture order)."""
    cands = _cands(_key("x"), _key("x"), call="c1.3") + _cands(_key("x"), call="c1.1")
    m = Matcher(cands)
    got = [m.match(_key("x"), prefer_call="c1.3") for _ in range(3)]
    assert [(g.candidate and (g.candidate.call, g.candidate.seq), g.reused) for g in got] == [
        (("c1.3", 10), False), (("c1.3", 11), False), (("c1.3", 10), True),
    ]  # fmt: skip


@pytest.mark.parametrize("strategy", ["id", "order"])
def test_a_request_for_a_model_version_stands_for_a_captured_request_for_that_version(strategy: str) -> None:
    """`versioned` asked for version 1 then 2 with one id (a meta capture: no inputs known): asked in the order 2, 1,
    each gets its own version's captured request (by id or by order alike; before, the first captured one, v1,
    answered the request for v2), and one for no version in particular matches neither."""
    v1, v2 = (Key(kind="unary", model="versioned", request_id="same", input_hash=None, version=v) for v in "12")
    m = Matcher(_cands(v1, v2), [strategy])
    asked = [Key(kind="unary", model="versioned", request_id="same" if strategy == "id" else "", input_hash=None,
                 version=v) for v in ("2", "1", "")]  # fmt: skip
    got = [m.match(k).candidate for k in asked]
    assert [c.key.version if c else None for c in got] == ["2", "1", None]
    assert m.explain(asked[2]).endswith("model version differs ('1' captured)")

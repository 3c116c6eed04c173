"""The request state machine's table: every (state, input) pair, and the domain rules it encodes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.machine.table import (
    _FALLBACK,
    _TRANSITIONS,
    ALL_PAIRS,
    END_INPUTS,
    KEPT_BY_RESPONSE,
    OPEN,
    RESPONSE_INPUTS,
    TERMINAL,
    Input,
    RequestMachine,
    State,
    Violation,
    violation_name,
)

seqs = st.one_of(st.none(), st.integers(min_value=0, max_value=2**40))


@pytest.mark.parametrize(("state", "inp"), ALL_PAIRS, ids=[f"{s.value}-{i.value}" for s, i in ALL_PAIRS])
@settings(max_examples=5, deadline=None)
@given(seq=seqs, earlier=st.integers(min_value=0, max_value=3))
def test_every_pair_is_a_transition_or_a_recorded_violation(
    state: State, inp: Input, seq: int | None, earlier: int
) -> None:
    """Each (state, input) either moves to the table's target, or records one violation and stays (or falls back)."""
    m = RequestMachine(state)
    for i in range(earlier):
        m.add_violation("earlier", i, "from before")
    allowed = m.feed(inp, seq)
    target = _TRANSITIONS.get((state, inp))
    if target is not None:
        assert allowed
        assert m.state is target
        assert len(m.violations) == earlier
    else:
        assert not allowed
        assert m.state is _FALLBACK.get((state, inp), state)
        assert len(m.violations) == earlier + 1
        v = m.violations[-1]
        assert v.name == violation_name(state, inp)
        assert v.seq == seq


@settings(max_examples=300, deadline=None)
@given(
    start=st.sampled_from(sorted(OPEN)),
    inputs=st.lists(st.sampled_from([*RESPONSE_INPUTS, Input.HALF_CLOSE]), max_size=12),
    end=st.sampled_from(sorted(END_INPUTS)),
)
def test_any_history_then_an_end_leaves_the_request_terminal(start: State, inputs: list[Input], end: Input) -> None:
    """Whatever responses came, the call's end (or the capture's) always leaves the request in a terminal state."""
    m = RequestMachine(start)
    for i, inp in enumerate(inputs):
        m.feed(inp, i)
    m.feed(end, len(inputs))
    assert m.state in TERMINAL


@settings(max_examples=300, deadline=None)
@given(inputs=st.lists(st.sampled_from(list(Input)), max_size=20))
def test_feed_never_raises_and_counts_one_violation_per_disallowed_input(inputs: list[Input]) -> None:
    """Arbitrary input sequences never raise; violations are exactly the inputs the table did not allow."""
    m = RequestMachine()
    refused = sum(not m.feed(inp, n) for n, inp in enumerate(inputs))
    assert len(m.violations) == refused


def test_fallbacks_only_cover_disallowed_pairs_and_end_terminal() -> None:
    """A fallback never shadows a table entry, and always leaves the request terminal."""
    for pair, target in _FALLBACK.items():
        assert pair not in _TRANSITIONS
        assert target in TERMINAL


def test_table_targets_are_states_and_terminal_states_accept_no_response() -> None:
    """Once ended by its call, a request accepts no response (every one is a violation)."""
    for (state, inp), target in _TRANSITIONS.items():
        assert isinstance(target, State)
        if state in TERMINAL - {State.ERROR} and inp in RESPONSE_INPUTS:
            pytest.fail(f"{state} accepts {inp}")


@pytest.mark.parametrize("state", [State.FINAL_RECEIVED, State.COMPLETED, State.ERROR, State.REPLIED])
@pytest.mark.parametrize("inp", sorted(RESPONSE_INPUTS - {Input.REPLY}))
def test_a_response_after_the_final_is_response_after_final(state: State, inp: Input) -> None:
    """After the final flag any further response is `response_after_final`, not a second completion."""
    m = RequestMachine(state)
    assert not m.feed(inp, 7)
    assert [v.name for v in m.violations] == ["response_after_final"]
    assert m.state is state


def test_completion_is_the_final_flag_and_empty_final_completes_without_text() -> None:
    """An empty final alone completes a request (sent -> final_received -> completed)."""
    m = RequestMachine()
    seen = [m.state]
    for inp in (Input.FINAL, Input.END_OK_FINAL_DUE):
        m.feed(inp)
        seen.append(m.state)
    assert seen == [State.SENT, State.FINAL_RECEIVED, State.COMPLETED]
    assert not m.violations


@pytest.mark.parametrize("end", sorted(END_INPUTS - {Input.END_OK_AFTER_CLIENT_FIN}))
def test_a_completed_request_is_not_changed_by_the_streams_later_end(end: Input) -> None:
    """After its final, a request is completed whatever ends the stream (cancel, deadline, disconnect...).
    (An HTTP body's final is its clean end, which comes with the call's: after the client's FIN it is
    not confirmed read, below.)"""
    m = RequestMachine(State.RECEIVING)
    m.feed(Input.FINAL)
    m.feed(end)
    assert m.state is State.COMPLETED
    assert not m.violations


@pytest.mark.parametrize("before", [[], [Input.RESPONSE], [Input.REPLY], [Input.RESPONSE, Input.FINAL], [Input.FINAL]])
def test_what_an_http_call_passed_on_after_its_clients_fin_confirms_nothing(before: list[Input]) -> None:
    """An HTTP call answered in full after its client's FIN (a client that timed out and closed sends the
    same FIN as one that only half-closed): `unconfirmed`, never `completed`, and no violation."""
    m = RequestMachine()
    for inp in before:
        m.feed(inp)
    m.feed(Input.END_OK_AFTER_CLIENT_FIN)
    assert (m.state, m.violations) == (State.UNCONFIRMED, [])
    m = RequestMachine()
    m.feed(Input.ERROR_FINAL)
    m.feed(Input.END_OK_AFTER_CLIENT_FIN)
    assert (m.state, m.violations) == (State.ERROR, [])


@pytest.mark.parametrize("first", [Input.ERROR_FINAL, Input.ERROR])
@pytest.mark.parametrize("end", sorted(END_INPUTS - {Input.END_OK_FINAL_DUE}))
def test_an_in_band_error_is_never_success_nor_overridden(first: Input, end: Input) -> None:
    """An error response makes the outcome `error`, even with final=true and a later OK or cancelled end."""
    m = RequestMachine(State.RECEIVING)
    m.feed(first)
    m.feed(end)
    assert m.state is State.ERROR
    assert not m.violations


def test_error_then_more_responses_then_final_is_error_without_violation() -> None:
    """After a non-final error the stream may go on until the final flag: still `error`, no violation."""
    m = RequestMachine()
    for inp in (Input.RESPONSE, Input.ERROR, Input.RESPONSE, Input.FINAL, Input.END_OK_FINAL_DUE):
        assert m.feed(inp)
    assert m.state is State.ERROR


@pytest.mark.parametrize(
    ("end", "outcome"),
    [
        (Input.END_OK, State.UNCONFIRMED),
        (Input.END_ERROR, State.ERROR),
        (Input.END_CLIENT_CANCEL, State.CANCELLED),
        (Input.END_DEADLINE, State.DEADLINE),
        (Input.END_CLIENT_DISCONNECT, State.DISCONNECTED),
        (Input.END_UPSTREAM_DISCONNECT, State.DISCONNECTED),
        (Input.END_PROXY_SHUTDOWN, State.INTERRUPTED),
        (Input.CAPTURE_ENDED, State.INCOMPLETE),
    ],
)
def test_an_open_request_takes_the_outcome_of_its_calls_end(end: Input, outcome: State) -> None:
    """Text received does not make success: a request open at its call's end gets the end's outcome, no violation."""
    m = RequestMachine(State.RECEIVING)
    m.feed(end)
    assert m.state is outcome
    assert not m.violations


def test_missing_final_when_one_was_due() -> None:
    """An OK end without the final flag that empty-final responses promised: incomplete + missing_final."""
    m = RequestMachine(State.RECEIVING)
    assert not m.feed(Input.END_OK_FINAL_DUE, 9)
    assert m.state is State.INCOMPLETE
    assert [(v.name, v.seq) for v in m.violations] == [("missing_final", 9)]


@pytest.mark.parametrize(
    ("end", "outcome"),
    [
        (Input.END_OK, State.COMPLETED),
        (Input.END_ERROR, State.ERROR),
        (Input.END_CLIENT_CANCEL, State.CANCELLED),
        (Input.END_DEADLINE, State.DEADLINE),
    ],
)
def test_unary_outcome_comes_from_the_status_not_the_response(end: Input, outcome: State) -> None:
    """A unary reply followed by a non-OK status is not a success (gRPC clients raise the status)."""
    m = RequestMachine()
    m.feed(Input.REPLY)
    assert m.state is State.REPLIED
    m.feed(end)
    assert m.state is outcome


@pytest.mark.parametrize(
    ("state", "inp", "name"),
    [
        # A response for a request whose call already ended without its final: after the end.
        (State.CANCELLED, Input.RESPONSE, "response_after_end"),
        (State.UNCONFIRMED, Input.FINAL, "response_after_end"),
        (State.INCOMPLETE, Input.ERROR_FINAL, "response_after_end"),
        (State.DEADLINE, Input.REPLY, "response_after_end"),
        # ... and for one whose final (or whole id group) was already seen: after the final.
        (State.GROUP, Input.RESPONSE, "response_after_final"),
        (State.REPLIED, Input.REPLY, "response_after_final"),
        # A unary reply on a stream request: neither after an end nor after a final.
        (State.RECEIVING, Input.REPLY, "unexpected_reply"),
        # A second end of a request whose call had ended.
        (State.COMPLETED, Input.END_OK, "end_after_end"),
        (State.CANCELLED, Input.END_CLIENT_CANCEL, "end_after_end"),
        (State.INCOMPLETE, Input.CAPTURE_ENDED, "end_after_end"),
        (State.UNCONFIRMED, Input.END_OK_FINAL_DUE, "end_after_end"),
        # Its id group's mixed ends, once the request's own outcome is already known.
        (State.COMPLETED, Input.GROUP_MIXED, "group_after_end"),
        (State.FINAL_RECEIVED, Input.GROUP_MIXED, "group_after_end"),
        (State.CANCELLED, Input.GROUP_MIXED, "group_after_end"),
        # An OK end with a final still due.
        (State.SENT, Input.END_OK_FINAL_DUE, "missing_final"),
        (State.ERROR_RECEIVED, Input.END_OK_FINAL_DUE, "missing_final"),
    ],
)
def test_each_disallowed_input_is_reported_under_the_name_check_shows(state: State, inp: Input, name: str) -> None:
    """The violation's name is what `check` prints and what users grep for: one name per rule broken."""
    m = RequestMachine(state)
    assert not m.feed(inp, 4)
    assert [(v.name, v.seq, v.detail) for v in m.violations] == [(name, 4, f"{inp.value} in state {state.value}")]


def test_a_violation_found_outside_the_table_is_kept_as_given() -> None:
    """``add_violation`` (e.g. restarted_after_cancel found by the tracker) keeps name, record and detail."""
    m = RequestMachine(State.RECEIVING)
    m.add_violation("restarted_after_cancel", 12, "sent again after its cancel")
    assert m.violations == [Violation(name="restarted_after_cancel", seq=12, detail="sent again after its cancel")]
    assert m.state is State.RECEIVING


@pytest.mark.parametrize("state", list(State), ids=[s.value for s in State])
def test_kept_by_response_is_exactly_where_feeding_a_response_changes_nothing(state: State) -> None:
    """The tracker skips the table for a plain response in these states: only right if feeding it there
    would leave the state as it is and record no violation."""
    machine = RequestMachine(state)
    allowed = machine.feed(Input.RESPONSE, 7)
    unchanged = allowed and machine.state is state and not machine.violations
    assert (state in KEPT_BY_RESPONSE) == unchanged
    assert KEPT_BY_RESPONSE == {State.RECEIVING, State.ERROR_RECEIVED}  # (what the hot path is for)
    assert not KEPT_BY_RESPONSE & {State.FINAL_RECEIVED, State.ERROR}  # (so it never sets t_done either)

"""Schema 3 is sparse: lines omit null/default fields and repeated sticky fields; readers fill them in."""

from __future__ import annotations

from pathlib import Path

import orjson

from replay.capture import events as ev
from replay.capture import schema
from replay.capture.reader import read_capture
from tests.support.paths import ROOT

DATA = ROOT / "tests" / "data"


def _response(index: int, final: bool | None = False, model: str | None = "tokens") -> ev.MessageSeen:
    return ev.MessageSeen(
        t_ns=1_780_000_000_007_000_000 + index, call="c12.345", dir="s2c", index=index, size=69, model=model,
        model_version="1", request_id="17", final=final, outputs=["TEXT"],
        output_tensors=[ev.TensorSpec(name="TEXT", datatype="BYTES", shape=[1])],
    )  # fmt: skip


def test_a_streamed_response_line_is_at_most_150_bytes() -> None:
    """The issue's target: a streamed response after the first of its call takes <= 150 bytes uncompressed."""
    enc = schema.Encoder()
    enc.encode(_response(0), 9_999_998)
    line = enc.encode(_response(1), 9_999_999)
    assert len(line) <= 150, line
    assert b"null" not in line and b"model" not in line


def test_sticky_fields_round_trip_through_a_file_state() -> None:
    """Omitted sticky fields come back from the call's previous s2c message; a change to null is written."""
    records = [_response(0), _response(1), _response(2, final=True, model=None), _response(3, model=None)]
    enc, sticky = schema.Encoder(), {}
    lines = [enc.encode(r, i) for i, r in enumerate(records)]
    assert b'"model":null' in lines[2] and b'"model"' not in lines[3]
    back = [schema.decode(orjson.loads(line), sticky=sticky)[1] for line in lines]
    assert back == records


def test_reset_makes_the_next_line_self_contained() -> None:
    """After a batch that was never written, the next message of a call spells its sticky fields out."""
    enc = schema.Encoder()
    enc.encode(_response(0), 0)
    enc.reset()
    line = enc.encode(_response(1), 1)
    assert schema.decode(orjson.loads(line))[1] == _response(1)


def test_nullable_fields_without_default_are_omitted_and_read_as_null() -> None:
    """`timeout_ms` has no default but is nullable: omitted when null, decoded as null."""
    start = ev.CallStarted(t_ns=1, call="c1.1", conn="c1", method="/m", peer="p", metadata=[], timeout_ms=None)
    line = schema.encode(start, 0)
    assert b"timeout_ms" not in line
    assert schema.decode(orjson.loads(line))[1] == start


def test_old_versions_read_the_same_as_the_sparse_golden() -> None:
    """stream_cancel as schema 1, 2 and 3 wrote it decodes to the same records."""
    def read(name: str) -> list[tuple[int, ev.Record]]:
        return list(read_capture(DATA / name))

    assert read("stream_cancel_v1.jsonl") == read("stream_cancel_v2.jsonl") == read("stream_cancel.jsonl")
    assert (DATA / "stream_cancel.jsonl").stat().st_size < (DATA / "stream_cancel_v2.jsonl").stat().st_size


def test_a_capture_file_reads_back_exactly_as_written(tmp_path: Path) -> None:
    """What the writer's encoder puts in a file is what the reader gives back, record for record: requests
    keep their model, a response's changed sticky field (Triton's empty final has model_version "") is
    written, a call's state ends with it, and every line ends with a newline."""
    from tests.data.make_golden import Builder

    b = Builder().start()
    for call in ("c1.1", "c1.3"):
        b.call(call)
        b.request(call, "a")
        b.response(call, "a", "x")  # model_version "1"
        b.response(call, "a", None, final=True)  # model_version ""
        b.request(call, "b", model="echo")
        b.response(call, "b", "y", model="echo")
        b.half_close(call)
        b.end(call)
    b.finish()
    path = tmp_path / "capture.jsonl"
    path.write_bytes(b.render())
    assert [record for _, record in read_capture(path)] == b.records
    assert path.read_bytes().count(b"\n") == len(b.records)


def test_a_line_encoded_alone_means_what_it_says_in_any_file() -> None:
    """encode() (self-contained lines, e.g. for --admin subscribers) spells out a response's null sticky
    fields, so a reader that saw another response of the call before reads this one's own values."""
    seen: schema.Sticky = {}
    assert schema.decode(orjson.loads(schema.encode(_response(0), 0)), sticky=seen) == (0, _response(0))
    alone = ev.MessageSeen(t_ns=1, call="c12.345", dir="s2c", index=1, size=9, request_id="17", final=True)
    assert schema.decode(orjson.loads(schema.encode(alone, 1)), sticky=seen) == (1, alone)
    request = ev.MessageSeen(t_ns=2, call="c12.345", dir="c2s", index=0, size=9, model="tokens", request_id="18")
    assert b"outputs" not in schema.encode(request, 2)  # sticky fields are a response's only


def test_a_response_repeating_some_sticky_fields_writes_only_the_changed_ones() -> None:
    """Triton's empty final keeps the model but says model_version "" and no outputs: its line names what
    changed and leaves the repeated model out."""
    enc = schema.Encoder()
    enc.encode(_response(0), 0)
    final = ev.MessageSeen(t_ns=2, call="c12.345", dir="s2c", index=1, size=9, model="tokens", model_version="",
                           request_id="17", final=True)  # fmt: skip
    line = orjson.loads(enc.encode(final, 1))
    assert "model" not in line
    assert (line["model_version"], line["outputs"], line["output_tensors"]) == ("", None, None)


def test_a_calls_sticky_state_ends_with_its_call_end() -> None:
    """After a call's call_end the encoder keeps nothing of it: a message on that call id again (a new call
    of a later proxy run, say) spells its sticky fields out."""
    enc = schema.Encoder()
    first = enc.encode(_response(0), 0)
    enc.encode(ev.CallEnded(t_ns=3, call="c12.345", status="OK", details=None, cause="ok", trailers=None,
                            initial_metadata=None, duration_ms=1.0, messages_c2s=1, messages_s2c=1), 1)  # fmt: skip
    again = enc.encode(_response(0), 2)
    assert orjson.loads(again) == {**orjson.loads(first), "seq": 2}


def _call_end(call: str) -> ev.CallEnded:
    return ev.CallEnded(t_ns=3, call=call, status="OK", details=None, cause="ok", trailers=None,
                        initial_metadata=None, duration_ms=1.0, messages_c2s=1, messages_s2c=1)  # fmt: skip


def test_the_readers_per_file_state_holds_open_calls_only() -> None:
    """A reader keeps a call's sticky fields until its call_end, then nothing of it: a capture of millions
    of calls reads in memory that grows with the calls open at once, not with the calls seen.

    Both decoders: the fast path, and the generic one it must equal (which reads older versions and
    every line the fast path refuses)."""
    enc = schema.Encoder()
    lines = [enc.encode(_response(0), 0), enc.encode(_response(1), 1), enc.encode(_call_end("c12.345"), 2)]
    for decode in (lambda raw, sticky: schema.decode(raw, sticky=sticky),
                   lambda raw, sticky: schema._decode(raw, "f.jsonl", None, sticky)):  # fmt: skip
        sticky: schema.Sticky = {}
        decode(orjson.loads(lines[0]), sticky)
        assert set(sticky) == {"c12.345"}
        assert decode(orjson.loads(lines[1]), sticky)[1] == _response(1)
        decode(orjson.loads(lines[2]), sticky)
        assert sticky == {}
        # A line read alone (no file state) is not an error and leaves nothing behind either.
        assert decode(orjson.loads(lines[2]), None)[1] == _call_end("c12.345")


def test_a_messages_side_file_place_is_written_in_its_line() -> None:
    """`payload_at` (where `--payload full` bytes went in the side file) is in the line, as written by the
    writer's encoder and by the self-contained one, and reads back as the same [offset, length]."""
    request = ev.MessageSeen(t_ns=2, call="c12.345", dir="c2s", index=0, size=4096, model="tokens", request_id="18",
                             payload_sha256="ab" * 32)  # fmt: skip
    for line in (schema.Encoder().encode(request, 5, [1024, 4096]), schema.encode(request, 5, [1024, 4096])):
        assert orjson.loads(line)["payload_at"] == [1024, 4096]
        seq, back = schema.decode(orjson.loads(line), sticky={})
        assert (seq, back.payload_at) == (5, [1024, 4096])

"""A time-boxed fuzz of the compiled parsers of untrusted bytes against their Python versions (opt-in).

Skipped unless ``TRITON_TAP_FUZZ_SECONDS`` is set: ``python -m tests.sanitize`` sets it and runs this
under AddressSanitizer and UBSan (docs/testing.md#the-sanitizer-tier), where a read past a buffer
stops the run even when the answer happened to be right. Set alone, it is the same fuzz without them.

Three parsers read bytes from outside: the frame reader and the message assembler (``proxy/wire``,
compiled from their source: what a client or Triton sends), the labels' field scanner and cache
(``proxy/triton/labels.py``, compiled from its source: the protobuf messages in those frames), each
against the same file run uncompiled, and the capture line decoder (``replay/capture/schema.py`` with its fast
path ``shapes.py`` compiled from its source: a capture file, maybe damaged or foreign) against the same
files run uncompiled. Each gets the given seconds of
inputs mutated from real seeds (valid frames of every type, Triton messages built with protobuf, the
golden captures' lines): bytes flipped, inserted, deleted, repeated, spliced between seeds. Each input
is compared the way its differential test compares (their helpers, imported: one definition of
"equal"). The random seed is printed, and taken from ``TRITON_TAP_FUZZ_SEED`` to replay a run.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tritonclient.grpc import service_pb2 as pb

from proxy.wire import frames as wire
from replay import compiled
from replay.capture import schema, shapes
from tests.proxy.triton.test_label_key import _FUNCS, _fill
from tests.proxy.triton.test_label_key import _same as _same_labels
from tests.proxy.triton.test_labels_compiled import CALLS, SOURCE, _both
from tests.proxy.wire.test_frames import _frame
from tests.proxy.wire.test_wire_compiled import _BLOCK, SOURCE_FRAMES, SOURCE_MESSAGES, _assemble, _read
from tests.replay.capture.test_capture_compiled import SOURCE as SOURCE_SCHEMA
from tests.replay.capture.test_capture_compiled import _answer
from tests.sanitize import FUZZ_ENV
from tests.support.paths import DATA

#: The random generator's seed, to replay a run (default: a new one, printed).
SEED_ENV = "TRITON_TAP_FUZZ_SEED"

pytestmark = pytest.mark.skipif(not os.environ.get(FUZZ_ENV), reason=f"opt-in: set {FUZZ_ENV} (python -m tests.sanitize)")

#: Bytes that mean something to one of the parsers: JSON punctuation, varint continuation, frame flags.
_INTERESTING = b'\x00\x01\x04\x08\x20\x7f\x80\xff"\\{}[],:0-.eE \n\t'


def _mutate(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    """``data`` changed in one to four of the ways a damaged or hostile input differs from a good one."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        how = rng.randrange(7)
        at = rng.randrange(len(b) + 1)
        if how == 0 and b:  # one bit flipped
            i = min(at, len(b) - 1)
            b[i] ^= 1 << rng.randrange(8)
        elif how == 1:  # a byte that means something inserted
            b[at:at] = bytes([rng.choice(_INTERESTING)])
        elif how == 2 and b:  # a byte replaced by any byte
            b[min(at, len(b) - 1)] = rng.randrange(256)
        elif how == 3:  # a run deleted (the input cut, when it reaches the end)
            del b[at : at + rng.randint(1, 16)]
        elif how == 4:  # a run repeated
            n = rng.randint(1, 32)
            b[at:at] = b[at : at + n]
        elif how == 5:  # spliced with another seed
            other = rng.choice(seeds)
            b = b[:at] + other[rng.randrange(len(other) + 1) :]
        else:  # a length or varint made large
            b[at:at] = rng.choice([b"\xff\xff\xff", b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", b"99999999999999999999"])
    return bytes(b)


def _fuzz(name: str, seeds: list[bytes], check: Callable[[random.Random, bytes], None]) -> None:
    """``check`` on mutated seeds for the configured seconds; a failure names the seed and the input."""
    seconds = float(os.environ[FUZZ_ENV])
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    for one in seeds:  # the seeds themselves first: they must agree before their mutants mean anything
        check(rng, one)
    count, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        data = _mutate(rng, rng.choice(seeds), seeds)
        try:
            check(rng, data)
        except Exception as e:  # a difference, or an error only one side raised: named, to replay it
            raise AssertionError(f"{name}: {SEED_ENV}={seed}, input {data[:300]!r}: {e!r}") from e
        count += 1
    print(f"fuzz {name}: {count} inputs in {seconds:g} s ({SEED_ENV}={seed})")
    assert count > 0


def _frame_seeds() -> list[bytes]:
    one = [
        _frame(wire.DATA, 0, 1, b"hello"),
        _frame(wire.DATA, wire.END_STREAM | wire.PADDED, 3, b"\x02ab\x00\x00"),
        _frame(wire.HEADERS, wire.END_HEADERS | wire.END_STREAM, 1, _BLOCK),
        _frame(wire.HEADERS, 0, 1, _BLOCK[:3]) + _frame(wire.CONTINUATION, wire.END_HEADERS, 1, _BLOCK[3:]),
        _frame(wire.PRIORITY, 0, 1, bytes(5)),
        _frame(wire.RST_STREAM, 0, 1, bytes(4)),
        _frame(wire.SETTINGS, 0, 0, (4).to_bytes(2, "big") + (65535).to_bytes(4, "big")),
        _frame(wire.PING, 0, 0, b"12345678"),
        _frame(wire.GOAWAY, 0, 0, bytes(8) + b"debug"),
        _frame(wire.WINDOW_UPDATE, 0, 1, (1000).to_bytes(4, "big")),
        _frame(0xFA, 0xFF, 7, b"unknown type"),
    ]
    return [*one, b"".join(one), b"".join(reversed(one))]


def _needs_compiled() -> None:
    if not compiled.is_compiled(wire):
        pytest.skip(f"proxy.wire is not compiled here: {compiled.active()['proxy.wire.frames']}")


def test_the_compiled_frame_reader_agrees_with_its_source() -> None:
    _needs_compiled()

    def check(rng: random.Random, stream: bytes) -> None:
        cuts = sorted(rng.randrange(len(stream) + 1) for _ in range(rng.randrange(4)))
        assert _read(wire, stream, cuts) == _read(SOURCE_FRAMES, stream, cuts)

    _fuzz("frames", _frame_seeds(), check)


def test_the_compiled_assembler_agrees_with_its_source() -> None:
    _needs_compiled()
    from proxy.wire import messages as wire_messages

    bodies = [b"", b"x", bytes(range(40)), b"\x0a\x03abc" * 5]
    seeds = [b"".join(bytes([flag]) + len(b).to_bytes(4, "big") + b for b in bodies) for flag in (0, 1)]

    def check(rng: random.Random, data: bytes) -> None:
        cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randrange(4)))
        keep, split_at = rng.choice([0, 3, 16, 10_000]), rng.choice([None, 8])
        hashing, as_bytes = rng.random() < 0.2, rng.random() < 0.5
        want = _assemble(SOURCE_MESSAGES, data, cuts, keep, split_at, hashing, as_bytes)
        assert _assemble(wire_messages, data, cuts, keep, split_at, hashing, as_bytes) == want

    _fuzz("messages", seeds, check)


def _triton_messages() -> dict[str, list[bytes]]:
    params = {"triton_final_response": ("bool_param", True), "sequence_id": ("uint64_param", 2**63)}
    tensors = [("TEXT", "BYTES", [1, 1], {"n": ("int64_param", -3)}), ("X", "FP32", [2], {})]
    raw = [b"\x00\x01\x02\x03", b"payload bytes"]
    request = _fill(pb.ModelInferRequest(), "tokens", "1", "r-1", params, tensors, raw, True)
    response = _fill(pb.ModelInferResponse(), "tokens", "", "r-1", params, tensors, raw, False)
    stream = pb.ModelStreamInferResponse(error_message="")
    stream.infer_response.CopyFrom(response)
    failed = pb.ModelStreamInferResponse(error_message="failed")
    return {
        "request": [request.SerializeToString(), pb.ModelInferRequest(model_name="m").SerializeToString()],
        "response": [response.SerializeToString()],
        "stream": [stream.SerializeToString(), failed.SerializeToString()],
    }


def test_the_compiled_labels_agree_with_their_source_and_protobuf() -> None:
    _needs_compiled()
    assert SOURCE is not None
    messages = _triton_messages()
    kinds = sorted(_FUNCS)
    assert kinds == sorted(messages)
    seeds = [m for kind in kinds for m in messages[kind]]

    def check(rng: random.Random, body: bytes) -> None:
        for args in CALLS:  # the scan alone, as each kind of message is scanned
            _both(body, args, True)
        _same_labels(rng.choice(kinds), body)  # the cache against protobuf's decode

    _fuzz("labels", seeds, check)


def test_the_line_decoder_agrees_with_its_source() -> None:
    if not compiled.is_compiled(shapes):
        pytest.skip("replay.capture.shapes is not compiled here")
    seeds = [line for path in sorted(DATA.glob("**/*.jsonl")) for line in _lines_of(path)]
    assert len(seeds) > 100
    c_sticky: schema.Sticky = {}
    py_sticky: schema.Sticky = {}

    def check(rng: random.Random, line: bytes) -> None:
        assert _answer(schema, line, c_sticky) == _answer(SOURCE_SCHEMA, line, py_sticky)
        assert repr(c_sticky) == repr(py_sticky)

    _fuzz("lines", seeds, check)


def _lines_of(path: Path) -> list[bytes]:
    """A golden capture's lines as the reader meets them (newline kept); damaged ones too."""
    return [line + b"\n" for line in path.read_bytes().split(b"\n") if line]

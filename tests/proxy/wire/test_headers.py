"""Header blocks as the capture records them, and the proxy's own status blocks (proxy.wire.headers)."""

from __future__ import annotations

import base64

from hypothesis import given
from hypothesis import strategies as st

from proxy.wire.headers import Block, grpc_message, grpc_status, header, pairs, status_trailers, text


def test_pairs_keep_wire_order_and_duplicates() -> None:
    """Every field is recorded, in order, duplicates included, as latin-1 strings."""
    got = pairs([(b":status", b"200"), (b"x-a", b"1"), (b"x-a", b"\xe9")])
    assert got == [[":status", "200"], ["x-a", "1"], ["x-a", "é"]]


@given(st.binary(max_size=64))
def test_true_binary_values_are_recorded_as_base64(raw: bytes) -> None:
    """A ``-bin`` value in gRPC's true-binary form (NUL + bytes) reads as the unpadded base64 form."""
    shown = text(b"trace-bin", b"\0" + raw)
    assert shown == base64.b64encode(raw).decode("ascii").rstrip("=")
    assert base64.b64decode(shown + "=" * (-len(shown) % 4)) == raw


def test_only_bin_keys_are_decoded_as_true_binary() -> None:
    """A NUL-led value of an ordinary key, or a base64 ``-bin`` value, is recorded as it came."""
    assert text(b"x-plain", b"\0ab") == "\0ab"
    assert text(b"trace-bin", b"AAEC") == "AAEC"


def test_header_finds_the_first_field_by_name() -> None:
    """The first value of a name, None when absent."""
    hs = [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")]
    assert header(hs, b"a") == b"1"
    assert header(hs, b"c") is None


def test_grpc_status_percent_decodes_the_message() -> None:
    """grpc-status comes raw (the caller judges it); grpc-message is percent-decoded."""
    assert grpc_status([(b"grpc-status", b"3"), (b"grpc-message", b"bad%20input%3A%20x")]) == (b"3", "bad input: x")
    assert grpc_status([(b"grpc-status", b"0")]) == (b"0", None)
    assert grpc_status([]) == (None, None)


def test_status_trailers_with_and_without_response_headers() -> None:
    """Trailers-only when the client had no response headers yet; plain trailers otherwise."""
    assert status_trailers(14, "gone", True) == [
        (b":status", b"200"), (b"content-type", b"application/grpc"), (b"grpc-status", b"14"), (b"grpc-message", b"gone"),
    ]  # fmt: skip
    assert status_trailers(13, "oops", False) == [(b"grpc-status", b"13"), (b"grpc-message", b"oops")]
    code, message = grpc_status(status_trailers(14, "upstream lost", False))
    assert (code, message) == (b"14", "upstream lost")


_FIELDS = st.lists(st.tuples(st.sampled_from([b"grpc-status", b"grpc-message", b"x-a-bin", b"x-b"]),
                             st.binary(max_size=8)), max_size=5)  # fmt: skip


@given(_FIELDS)
def test_what_a_block_derives_is_what_its_list_gives_and_is_kept(fields: list[tuple[bytes, bytes]]) -> None:
    """pairs and grpc_status of a Block equal those of the same plain list, and a second ask returns what
    the first kept (the same object: records made from one block share it)."""
    block = Block(fields)
    assert pairs(block) == pairs(list(fields)) and grpc_status(block) == grpc_status(list(fields))
    assert pairs(block) is pairs(block) and grpc_status(block) is grpc_status(block)
    assert list(block) == fields and set(block.derived) == {"pairs", "grpc_status"}


def test_the_proxys_own_grpc_message_is_percent_encoded_and_reads_back() -> None:
    """gRPC clients percent-decode grpc-message: the proxy's own message (an OS error may be in any language,
    a path may hold '%') goes out as printable ASCII with '%' escaped, and reads back as it was written."""
    message = "triton-tap: upstream é unreachable: 50% done\n"
    trailers = status_trailers(14, message, with_response_headers=False)
    value = dict(trailers)[b"grpc-message"]
    assert value == b"triton-tap: upstream %C3%A9 unreachable: 50%25 done%0A"
    assert grpc_status(trailers) == (b"14", message)


@given(st.text())
def test_any_message_goes_out_as_printable_ascii_and_reads_back(message: str) -> None:
    """Whatever the text (a lone surrogate is an OS error's undecodable file name), the value is printable
    ASCII; text without a lone surrogate reads back exactly, and one with it still goes out (escaped)."""
    value = grpc_message(message)
    assert all(0x20 <= b <= 0x7E for b in value)
    try:
        message.encode()
    except UnicodeEncodeError:
        assert b"\\ud" in value
    else:
        assert grpc_status([(b"grpc-status", b"2"), (b"grpc-message", value)]) == (b"2", message)

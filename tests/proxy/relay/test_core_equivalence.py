"""The protocol core under its shell relays every scripted conversation as the Tunnel before it did.

Each conversation of :mod:`tests.support.h2conv` (calls, cancels with late frames, deadlines,
disconnects, GOAWAY both ways, shutdown, abort, an unreachable upstream, an upstream lost or
breaking HTTP/2 before and after its SETTINGS, CONTINUATION, flow control, ``:authority``
rewriting) runs between a real h2 client and a real h2 server through the relay, in every payload
mode; what is compared is every record (times aside) and every byte written to each side, input by
input. The expected outcomes were produced by the Tunnel the core replaced and are kept in
``equivalence.json``, written by that Tunnel in the commit that still had it (never regenerate it
from the core: the file is the evidence that behaviour did not change).

In-memory transports: the comparison needs exact control of which bytes arrive in which read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from proxy.relay.options import RelayOptions
from proxy.relay.relay import Relay
from proxy.relay.shell import Connection
from tests.support.h2conv import CONVERSATIONS, NO_SERVER, CoreRig, Rig
from tests.support.transport import MemoryTransport

GOLDEN = Path(__file__).with_name("equivalence.json")

#: (name, relay keywords) of the relay set-ups every conversation runs through.
SETUPS: dict[str, dict[str, Any]] = {
    "meta": {"options": RelayOptions(payload="meta")},
    "none": {"options": RelayOptions(payload="none")},
    "full-side": {"options": RelayOptions(payload="full", payload_cap=None)},
    "full-inline-redact": {"options": RelayOptions(payload="full", payload_store="inline", redact_inputs=frozenset({"INPUT"}), redact_key=b"k")},
    "authority": {"options": RelayOptions(payload="meta"), "upstream_server_name": "triton.internal"},
}  # fmt: skip


class NewRig(Rig):
    """The conversation through :class:`proxy.relay.shell.Connection` and its :class:`~proxy.relay.core.H2Core`."""

    def __init__(self, setup: dict[str, Any], server: bool, connect: bool) -> None:
        super().__init__(server)
        self.relay = Relay(("127.0.0.1", 1), self.records.append, **setup)
        self.conn = Connection(self.relay, "c1")
        self.dt, self.ut = MemoryTransport(), MemoryTransport()
        self.conn.client.transport = self.dt
        self.conn.open(self.dt)
        self.relay.tunnels.add(self.conn)
        if connect:
            self.conn.upstream.connection_made(self.ut)

    def _down(self, data: bytes) -> None:
        self.conn.client.data_received(data)

    def _up(self, data: bytes) -> None:
        self.conn.upstream.data_received(data)

    def _lose(self, side: str, exc: Exception | None) -> None:
        (self.conn.client if side == "client" else self.conn.upstream).connection_lost(exc)

    def _fire_timers(self) -> None:
        for name in list(self.conn._timers):
            self.conn._timers.pop(name).cancel()
            self.conn._fire(name)

    def _take(self, side: str) -> bytes:
        return (self.dt if side == "client" else self.ut).take()

    def closed(self, side: str) -> bool:
        return (self.dt if side == "client" else self.ut).closed

    def shutdown(self) -> None:
        self._input(self.relay.begin_shutdown)

    def abort(self, cause: str) -> None:
        self._input(self.relay.abort_all, cause)

    def connect_failed(self, reason: str) -> None:
        self._input(lambda: self.conn.perform(self.conn.core.connect_failed(reason)))


def run(rig_type: Any, conversation: str, setup: str) -> dict[str, Any]:
    """One conversation through one relay implementation: what it recorded and wrote."""

    async def go() -> dict[str, Any]:
        rig = rig_type(SETUPS[setup], conversation not in NO_SERVER, not conversation.startswith("refused_upstream"))
        CONVERSATIONS[conversation](rig)
        return rig.outcome()  # type: ignore[no-any-return]

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(go())
    finally:
        loop.close()


CASES = [(c, s) for c in CONVERSATIONS for s in SETUPS]

def _refused(details: str, cause: str, dropped: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A call refused with REFUSED_STREAM because it was opened above a GOAWAY's last stream id never reached
    the upstream, and the Tunnel recorded it as the upstream's `error`. Above the proxy's own shutdown GOAWAY it
    is `proxy_shutdown`, with no upstream reset (there was none); above the upstream's GOAWAY,
    `upstream_disconnect` (the upstream's refusal by GOAWAY is still its code). Both are marked `refused`, a
    field the Tunnel did not have."""

    def edit(expected: dict[str, Any]) -> None:
        ends = [r for r in expected["records"] if r["kind"] == "call_end" and r.get("details") == details]
        assert ends, "no refused call in the evidence"
        for r in ends:
            assert r["cause"] == "error" and all(r.get(k) == v for k, v in dropped.items()), r
            r["cause"] = cause
            assert "refused" not in r
            r["refused"] = True
            for k in dropped:
                del r[k]  # (the sparse form leaves a field at its default out)

    return edit


def _upstream_ends_after_its_error_goaway(expected: dict[str, Any]) -> None:
    """The Tunnel closed the client at the upstream's error GOAWAY and ended its calls as upstream_disconnect;
    but the upstream still ends them (gRPC C-core sends each its status before it closes), so the core waits
    for that. Here the client goes first: its call ends as client_disconnect, and only the upstream is closed."""
    recs = expected["records"]
    assert [r["kind"] for r in recs] == ["call_start", "protocol_error", "cancel", "call_end"]
    cancel, end = recs[2], recs[3]
    assert cancel["cause"] == end["cause"] == "upstream_disconnect" and not cancel["forwarded_upstream"]
    cancel["cause"] = end["cause"] = "client_disconnect"
    assert (end["status"], end["details"]) == ("UNAVAILABLE", "triton-tap: upstream connection lost")
    end["status"], end["details"] = "CANCELLED", None
    assert expected["closed"] == [True, True]
    expected["closed"] = [False, True]


#: Where the core now differs from the Tunnel's evidence on purpose (a fix), as edits of that evidence, each
#: checking that it finds the Tunnel's values first.
FIXED: dict[str, Callable[[dict[str, Any]], None]] = {
    "shutdown_keeps_back_new_streams": _refused("triton-tap: connection is shutting down (GOAWAY): stream not processed",
                                                "proxy_shutdown", {"upstream_rst_code": 7}),
    "upstream_goaway_drains": _refused("triton-tap: upstream connection is shutting down (GOAWAY)", "upstream_disconnect", {}),
    "upstream_goaway_error": _upstream_ends_after_its_error_goaway,
}  # fmt: skip


def _evidence(conversation: str, setup: str) -> dict[str, Any]:
    """The Tunnel's outcome of ``conversation`` under ``setup``, with the :data:`FIXED` edits made."""
    expected: dict[str, Any] = json.loads(GOLDEN.read_text())[f"{conversation}/{setup}"]
    if conversation in FIXED:
        FIXED[conversation](expected)
    return expected


@pytest.mark.parametrize(("conversation", "setup"), CASES, ids=[f"{c}-{s}" for c, s in CASES])
def test_the_core_relays_each_conversation_as_the_tunnel_did(conversation: str, setup: str) -> None:
    """The core under the asyncio shell (the proxy's own classes, on in-memory transports)."""
    expected = _evidence(conversation, setup)
    got = json.loads(json.dumps(run(NewRig, conversation, setup)))
    assert got["records"] == expected["records"]
    assert got["writes"] == expected["writes"]
    assert got["closed"] == expected["closed"]


@pytest.mark.parametrize(("conversation", "setup"), CASES, ids=[f"{c}-{s}" for c, s in CASES])
def test_the_bare_core_relays_each_conversation_alike(conversation: str, setup: str) -> None:
    """The core alone, its outputs carried out by the test (no shell, no event loop): the same."""
    expected = _evidence(conversation, setup)
    rig = CoreRig(SETUPS[setup], conversation not in NO_SERVER, not conversation.startswith("refused_upstream"))
    CONVERSATIONS[conversation](rig)
    got = json.loads(json.dumps(rig.outcome()))
    assert got == expected


def test_the_conversations_cover_what_they_claim() -> None:
    """The evidence is worth what the conversations reach: each kind of ending and frame is in it."""
    golden = json.loads(GOLDEN.read_text())
    assert set(golden) == {f"{c}/{s}" for c, s in CASES}
    recs = [r for g in golden.values() for r in g["records"]]
    causes = {r["cause"] for r in recs if r["kind"] in ("call_end", "cancel")}
    assert causes >= {"ok", "error", "client_cancel", "deadline", "client_disconnect", "upstream_disconnect",
                      "proxy_shutdown"}  # fmt: skip
    kinds = {r["kind"] for r in recs}
    assert kinds >= {"call_start", "message", "half_close", "call_end", "cancel", "late", "protocol_error"}
    late = [r for r in recs if r["kind"] == "late"]
    assert {r["frame"] for r in late} >= {"message", "trailers", "rst"}
    # the in-flight rule: a request whose final response passed is not in the cancel's in-flight set
    cancel = next(r for r in golden["cancel_with_late_frames/meta"]["records"] if r["kind"] == "cancel")
    assert cancel["in_flight"] == ["run", "wait"] and cancel["responded"] == ["run"]


# equivalence.json was written by this module's write_golden(), with the old Tunnel's rig
# (tests/proxy/relay/old_tunnel_rig.py), in the commit that still had that Tunnel; both went with it.

"""A capture's client side as scripts to send again: pure, no I/O beyond reading the capture.

One :class:`CallScript` per captured call: its connection, method, the headers to send (hop-by-hop
ones dropped, redacted values left out unless ``--header`` supplies them), its request messages and
half-close as offsets from the call's start, and how the *client* ended it (an explicit cancel, a
disconnect, a deadline) with the offset and the number of responses the client had seen at that
moment. Calls whose request bytes the capture does not hold (``--payload meta``/``none``, a payload
cut by ``--payload-cap``, an input cut by ``--redact-input``) are :class:`Unsendable`, with why; so are
HTTP requests whose body the recorded client never finished (:func:`cut_short`): sending them whole would
give the server a request nobody sent; and calls using Triton's shared memory (:mod:`replay.capture.shm`):
the region registrations name memory of the recording host, and an inference request naming a region
has its data there, not in the capture. Calls the recording proxy refused unprocessed are marked
(:attr:`CallScript.refused`): they are not sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from replay.capture import events as ev
from replay.capture.ids import CaptureIds
from replay.capture.methods import INFERENCE, http_call, protocol, short_method
from replay.capture.payload import has_payload, payload_bytes
from replay.capture.shm import manages_regions, request_regions
from replay.cli.base import parse_pairs
from replay.errors import UserError

#: Connection-specific headers HTTP/2 forbids or a new connection sets itself (RFC 9113 8.2.2).
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host",
                        "content-length"})  # fmt: skip
#: How the capture writes a value it did not keep (``proxy.relay.options.REDACTED``).
REDACTED = "<redacted>"
#: Endings the client caused: these are re-enacted; every other ending is the server's to repeat.
CLIENT_ENDINGS = frozenset({"client_cancel", "client_disconnect", "deadline"})

NO_BYTES = "no request bytes (recorded with --payload meta or none; record with --payload full)"
CUT = "a request payload cut by --payload-cap"
REDACTED_INPUT = "an input removed by --redact-input"
COMPRESSED_MAP = "a compressed request cannot be re-addressed by --model-map"
CUT_SHORT = "a request body its client never finished (cut short)"
HTTP_10 = "an HTTP/1.0 request (send speaks HTTP/1.1, which changes how a server may frame its reply)"
CUT_SHORT_CHUNKED = "a chunked request body its client left before any reply, maybe unfinished (no cut-short mark)"
# A registration sent again hands the target the recording host's shared-memory key: where a process
# of the target's host holds memory under that key, Triton would read inputs from it and write outputs
# into it. Status and unregister calls go with them: they are about regions this run never registered.
SHM_CALL = ("a shared-memory register, unregister or status call (its regions are memory of the recording "
            "host; sent again, the target would map whatever its own host holds under that key)")  # fmt: skip
SHM_INFER = ("an inference request whose tensors are in shared memory (their data was in the recording "
             "client's memory, not in the capture; the target would read and write its own region of that name)")  # fmt: skip


@dataclass(frozen=True, kw_only=True, slots=True)
class Message:
    """One request message: when (ns after the call's start) and its exact bytes."""

    at_ns: int
    body: bytes
    compressed: bool
    model: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Ending:
    """How the client ended the call: ``cause`` at ``at_ns`` after the start, after ``responses`` responses;
    ``rst_code``: the code of the client's RST_STREAM, when the capture has it (a client that refused a
    response over its receive limit reset with ENHANCE_YOUR_CALM, not CANCEL)."""

    cause: str
    at_ns: int
    responses: int
    rst_code: int | None = None


@dataclass(kw_only=True)
class CallScript:
    """One captured call, as a client would send it again."""

    id: str
    conn: str
    method: str
    t_start: int  # capture clock (unix ns)
    headers: list[tuple[str, str]]  # pseudo-headers first, wire order
    timeout_ms: float | None
    messages: list[Message] = field(default_factory=list)
    half_close_ns: int | None = None
    ending: Ending | None = None  # None: the server ended it (or the capture stopped first)
    recorded_cause: str | None = None
    t_end: int | None = None  # capture clock: its end (its cancel, or its call_end), None when not recorded
    redacted: list[str] = field(default_factory=list)  # header keys whose value the capture does not hold
    unsendable: str | None = None
    # The recording proxy refused it unprocessed (REFUSED_STREAM at a GOAWAY): not sent, since the client may have
    # retried it by itself, and its retry is a call of the capture's own when it went through the proxy.
    refused: bool = False
    _responses: int = 0
    _c2s_bytes: int = 0  # HTTP: the request body bytes the capture saw (de-chunked, as sent)
    _cut_marked: bool = False  # a c2s message the recorder marked cut short

    @property
    def models(self) -> set[str]:
        """Models its requests name."""
        return {m.model for m in self.messages if m.model is not None}

    @property
    def http(self) -> bool:
        """An HTTP/1.1 call (sent by :mod:`proxy.resend.h1client`), not a gRPC one."""
        return protocol(self.method) == "http"

    @property
    def short_method(self) -> str:
        """``ModelInfer`` and friends."""
        return short_method(self.method)


@dataclass(frozen=True, kw_only=True, slots=True)
class Unsendable:
    """Calls that cannot be sent, grouped by why."""

    reasons: dict[str, int]
    calls: int

    def message(self, total: int) -> str:
        """The one-line error."""
        why = "; ".join(f"{n} with {r}" for r, n in sorted(self.reasons.items(), key=lambda kv: -kv[1]))
        return (f"{self.calls} of {total} call(s) cannot be sent: {why} "
                "(--skip-unsendable sends the others)")  # fmt: skip


def _why_unsendable(rec: ev.MessageSeen) -> str | None:
    if not has_payload(rec):
        return NO_BYTES
    if rec.payload_truncated:
        return CUT
    if any(t.hmac_sha256 is not None or t.size is not None for t in rec.inputs or ()):
        return REDACTED_INPUT
    return None


def scripts(records: Iterable[tuple[int, ev.Record]], unstarted: set[str] | None = None) -> list[CallScript]:
    """Every call of a capture (several captures: later ids prefixed ``2:``, ``3:``... as ``check`` does).

    ``unstarted``: given, gets the ids of the calls whose records are in the capture without their
    ``call_start`` (begun before its first file, or that line lost): how to send them is unknown.
    """
    out: dict[str, CallScript] = {}
    ids = CaptureIds()
    ids.follow(records)  # a reader tells where each capture begins
    for _seq, rec in records:
        if ids.starts(rec) or isinstance(rec, ev.CaptureStarted):
            continue
        if isinstance(rec, ev.CallStarted):
            cid = ids.of(rec.call)
            if cid not in out:
                out[cid] = _start(cid, ids.of(rec.conn), rec)
            continue
        raw = getattr(rec, "call", None)
        if not isinstance(raw, str):
            continue
        call = out.get(ids.of(raw))
        if call is None:
            if unstarted is not None:
                unstarted.add(ids.of(raw))
            continue
        if call.recorded_cause is not None:
            continue
        _feed(call, rec)
    for call in out.values():
        if call.http and call.unsendable is None:
            call.unsendable = cut_short(call)
    return list(out.values())


def _header(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in reversed(headers) if k.lower() == name), None)


def cut_short(call: CallScript) -> str | None:
    """Why an HTTP call's request body was never finished by its client, else None (from the whole capture).

    In order: the recorder marked a ``c2s`` message cut (``decode_error`` :data:`~replay.capture.events.BODY_CUT`); the capture holds
    fewer body bytes than the request's ``Content-Length``; a chunked request whose client ended the call
    before any reply (an older recorder wrote what arrived of a chunked body as if whole: the capture cannot
    tell an unfinished body from a finished one whose client gave up waiting, so send does not guess).
    """
    if call._cut_marked:
        return CUT_SHORT
    length = _header(call.headers, "content-length")
    if length is not None and length.strip().isdigit() and call._c2s_bytes < int(length):
        return CUT_SHORT
    chunked = "chunked" in (_header(call.headers, "transfer-encoding") or "").lower()
    if chunked and call.ending is not None and call.ending.responses == 0:
        return CUT_SHORT_CHUNKED
    return None


def _start(cid: str, conn: str, rec: ev.CallStarted) -> CallScript:
    headers: list[tuple[str, str]] = []
    redacted: list[str] = []
    http = protocol(rec.method) == "http"
    for name, value in rec.metadata:
        # An HTTP/1.1 request goes out as recorded: its host and framing headers are part of it.
        if name in HOP_BY_HOP and not http:
            continue
        if value == REDACTED:
            redacted.append(name)
            continue
        headers.append((name, value))
    unsendable = None
    if manages_regions(rec.method):
        unsendable = SHM_CALL
    elif http and rec.http_version not in (None, "1.1"):
        # h11's client writes every request as HTTP/1.1: sent so, it would not be the recorded one.
        unsendable = HTTP_10
    return CallScript(id=cid, conn=conn, method=rec.method, t_start=rec.t_ns, headers=headers,
                      timeout_ms=rec.timeout_ms, redacted=redacted, unsendable=unsendable)  # fmt: skip


def _feed(call: CallScript, rec: ev.Record) -> None:
    at = max(0, getattr(rec, "t_ns", call.t_start) - call.t_start)
    if isinstance(rec, ev.MessageSeen):
        if rec.dir == "s2c":
            if not ev.message_cut(rec.decode_error):
                call._responses += 1  # (what arrived of a response the call's end cut is none)
            return
        call._c2s_bytes += rec.size
        if rec.decode_error is not None and rec.decode_error.startswith(ev.BODY_CUT):
            call._cut_marked = True
        if ev.message_cut(rec.decode_error):
            # A gRPC request the call's end cut: its bytes are not a message (their cap is not why).
            call.unsendable = call.unsendable or CUT_SHORT
            return
        why = _why_unsendable(rec) if not (rec.size == 0 and protocol(call.method) == "http") else None
        if why is not None:
            call.unsendable = call.unsendable or why
            return
        body = payload_bytes(rec) if rec.size else b""
        assert body is not None
        if request_regions(call.method, body, rec.compressed):
            call.unsendable = call.unsendable or SHM_INFER
        call.messages.append(Message(at_ns=at, body=body, compressed=rec.compressed,
                                     model=rec.model))  # fmt: skip
    elif isinstance(rec, ev.HalfClosed):
        call.half_close_ns = at
    elif isinstance(rec, ev.CallCancelled | ev.CallEnded):
        call.refused = isinstance(rec, ev.CallEnded) and ev.was_refused(rec)
        call.recorded_cause = rec.cause
        call.t_end = rec.t_ns
        if rec.cause in CLIENT_ENDINGS:
            # The code is the cancel record's; its call_end, which comes after, does not repeat it.
            rst = rec.rst_code if isinstance(rec, ev.CallCancelled) else call.ending.rst_code if call.ending else None
            call.ending = Ending(cause=rec.cause, at_ns=at, responses=call._responses, rst_code=rst)


# -- selection ----------------------------------------------------------------------------------

ONLY_KEYS = ("model", "method", "call", "conn")


def parse_only(texts: Sequence[str]) -> list[dict[str, set[str]]]:
    """``--only model=a|b,method=ModelInfer`` (repeatable: any of them) -> filters; raises UserError."""
    out: list[dict[str, set[str]]] = []
    for text in texts:
        f: dict[str, set[str]] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            if not sep or key not in ONLY_KEYS or not value:
                raise UserError(f"--only {text!r}: expected KEY=VALUE[,KEY=VALUE...] with KEY one of {', '.join(ONLY_KEYS)}")
            f.setdefault(key, set()).update(v for v in value.split("|") if v)
        if not f:
            raise UserError(f"--only {text!r} selects nothing")
        out.append(f)
    return out


def selected(call: CallScript, filters: Sequence[Mapping[str, set[str]]]) -> bool:
    """Whether ``call`` passes ``--only`` (no filter: every call; several: any of them)."""
    if not filters:
        return True

    def one(f: Mapping[str, set[str]]) -> bool:
        return all(
            (key != "model" or bool(call.models & values))
            and (key != "method" or call.short_method in values or call.method in values)
            and (key != "call" or call.id in values)
            and (key != "conn" or call.conn in values)
            for key, values in f.items()
        )

    return any(one(f) for f in filters)


def parse_headers(texts: Sequence[str]) -> dict[str, str]:
    """``--header KEY=VALUE``: lower-case keys (HTTP/2), no pseudo or hop-by-hop headers."""
    out = {k.lower(): v for k, v in parse_pairs(texts, "--header", empty_value=True).items()}
    for k in out:
        if k.startswith(":") or k in HOP_BY_HOP:
            raise UserError(f"--header {k!r}: pseudo and hop-by-hop headers are not sent")
    return out


def remodel(body: bytes, method: str, model_map: Mapping[str, str]) -> bytes:
    """An inference request's bytes with its ``model_name`` re-addressed by ``--model-map`` (else unchanged)."""
    if not model_map or method not in INFERENCE:  # an HTTP call's model is in its path: see remodel_path
        return body
    from tritonclient.grpc import service_pb2 as pb

    msg = pb.ModelInferRequest.FromString(body)
    new = model_map.get(msg.model_name)
    if new is None:
        return body
    msg.model_name = new
    return bytes(msg.SerializeToString())


def remodel_path(method: str, model_map: Mapping[str, str]) -> str:
    """An HTTP request line with the model of its ``/v2/models/{m}/...`` path re-addressed by ``--model-map``."""
    call = http_call(method)
    if call is None or call.model is None or call.model not in model_map:
        return method
    old = f"/v2/models/{call.model}"
    return f"{call.verb} " + call.target.replace(old, f"/v2/models/{model_map[call.model]}", 1)


def prepare(
    calls: Sequence[CallScript], *, filters: Sequence[Mapping[str, set[str]]], model_map: Mapping[str, str],
    headers: Mapping[str, str], skip_unsendable: bool,
) -> tuple[list[CallScript], dict[str, int]]:  # fmt: skip
    """The calls to send (selected, re-addressed, with ``--header`` values); and what was skipped, by reason.

    Raises :class:`UserError` naming how many calls cannot be sent and why, unless ``skip_unsendable``.
    """
    chosen = [c for c in calls if selected(c, filters)]
    for c in chosen:
        if c.unsendable is None and model_map and any(m.compressed and m.model in model_map for m in c.messages):
            c.unsendable = COMPRESSED_MAP
    bad: dict[str, int] = {}
    for c in chosen:
        if c.unsendable is not None:
            bad[c.unsendable] = bad.get(c.unsendable, 0) + 1
    if bad and not skip_unsendable:
        raise UserError(Unsendable(reasons=bad, calls=sum(bad.values())).message(len(chosen)))
    out = [c for c in chosen if c.unsendable is None]
    for c in out:
        if c.http:
            c.method = remodel_path(c.method, model_map)
        c.messages = [Message(at_ns=m.at_ns, body=remodel(m.body, c.method, model_map), compressed=m.compressed,
                              model=model_map.get(m.model, m.model) if m.model else m.model) for m in c.messages]  # fmt: skip
        given = [k for k in c.redacted if k in headers]
        kept = [(k, v) for k, v in c.headers if k not in headers]
        c.headers = kept + [(k, headers[k]) for k in headers]
        c.redacted = [k for k in c.redacted if k not in given]
    return out, bad

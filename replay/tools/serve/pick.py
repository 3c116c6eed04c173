"""Which captured call answers a readiness, metadata or config RPC, and when its answer cannot be
rebuilt (pure: the loaded index in, a call or the reason for the refusal out)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from replay.tools.serve.index import CapturedCall
from replay.tools.serve.responses import READINESS


def _same_request(call: CapturedCall, wanted: bytes, request_type: type[Any]) -> bool | None:
    """Whether ``call`` was asked ``wanted`` (a request serialised deterministically); None: its bytes were
    not captured."""
    asked = call.asked_bytes()
    if asked is None:
        return None
    return bool(request_type.FromString(asked).SerializeToString(deterministic=True) == wanted)


def pick_other(name: str, calls: Sequence[CapturedCall], request: Any, used: Collection[str]) -> CapturedCall | str:
    """The captured call of RPC ``name`` that answers ``request``, or the NOT_FOUND message why none does.

    A call asked the same request is preferred, then one whose request was not captured; among those,
    the first not ``used`` yet (else the last), so repeated asks walk through the captured answers.
    """
    if not calls:
        return f"triton-tap serve: the capture has no {name} call to answer with"
    wanted = request.SerializeToString(deterministic=True)
    verdicts = [(c, _same_request(c, wanted, type(request))) for c in calls]
    pool = [c for c, v in verdicts if v is True] or [c for c, v in verdicts if v is None]
    if not pool:
        asked = " ".join(str(request).split()) or "empty request"
        return (f"triton-tap serve: no captured {name} call had this request ({asked}); "
                f"{len(calls)} captured {name} call(s) asked something else")  # fmt: skip
    return next((c for c in pool if c.id not in used), pool[-1])


def missing_answer(name: str, call: CapturedCall) -> str | None:
    """The FAILED_PRECONDITION message when ``call``'s OK answer to ``name`` cannot be rebuilt, else None."""
    ok = call.end is None or call.end.status == "OK"
    first = call.first_response()
    if ok and first is not None and name not in READINESS and not first.real:
        return (f"triton-tap serve: the capture holds no bytes of the {name} answer (recorded with "
                "--payload meta); record with --payload full to serve it")  # fmt: skip
    return None

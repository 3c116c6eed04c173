"""Which captured call answers a readiness, metadata or config RPC, and when its answer cannot be
rebuilt (pure: the loaded index in, a call or the reason for the refusal out)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from replay.capture.methods import MODEL_NAMED, READINESS
from replay.tools.serve.index import CapturedCall


def _same_request(call: CapturedCall, wanted: bytes, request: Any) -> bool | None:
    """Whether ``call`` was asked ``request`` (``wanted``: it serialised deterministically): by its captured
    bytes, else by the model (and version) its labels say it named; None: the capture does not say."""
    asked = call.asked_bytes()
    if asked is not None:
        return bool(type(request).FromString(asked).SerializeToString(deterministic=True) == wanted)
    named = MODEL_NAMED.get(call.method)
    if named is None or call.asked_model is None:
        return None
    name_field, version_field = named
    model, version = call.asked_model
    return bool(getattr(request, name_field) == model
                and (version_field is None or version is None or getattr(request, version_field) == version))  # fmt: skip


def pick_other(name: str, calls: Sequence[CapturedCall], request: Any, used: Collection[str]) -> CapturedCall | str:
    """The captured call of RPC ``name`` that answers ``request``, or the NOT_FOUND message why none does.

    A call asked the same request is preferred (its bytes, or in a meta capture the model its request named),
    then one whose request the capture does not tell (a meta capture from before requests were labelled: see
    :func:`unsure`); among those, the first not ``used`` yet (else the last), so repeated asks walk through
    the captured answers.
    """
    if not calls:
        return f"triton-tap serve: the capture has no {name} call to answer with"
    wanted = request.SerializeToString(deterministic=True)
    verdicts = [(c, _same_request(c, wanted, request)) for c in calls]
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


def unsure(name: str, call: CapturedCall, request: Any) -> str | None:
    """The warning when ``call`` answers a request naming a model but the capture does not say which model
    ``call`` asked about (a meta capture recorded before these requests were labelled), else None."""
    named = MODEL_NAMED.get(call.method)
    if named is None or call.asked_model is not None or call.asked_bytes() is not None:
        return None
    return (f"triton-tap serve: the capture does not say which model call {call.id} asked about (recorded with "
            f"--payload meta by an older proxy): it answers {name} for {getattr(request, named[0])!r} as it was "
            "answered then, which may be another model's answer")  # fmt: skip

"""The two cases of the protocol (see :mod:`proxy.cancelcheck.protocol`): cancel an executing request,
cancel a queued one; and the idle baseline they are measured against. Each case runs on fresh clients
and returns what it observed; :mod:`proxy.cancelcheck.verdict` decides."""

from __future__ import annotations

import time

from proxy.cancelcheck import verdict as vd
from proxy.cancelcheck.clients import Book, Client, open_client
from proxy.cancelcheck.evidence import end_window, start_window
from proxy.cancelcheck.options import Setup
from replay.errors import UpstreamError


def _client(setup: Setup, book: Book) -> Client:
    return open_client(setup.opts.method, setup.url, book, **setup.client_kw)


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else (a - b) * 1000.0


def baseline(setup: Setup) -> float:
    """Time to first response (ms) of the probe on the idle model."""
    book = Book()
    c = _client(setup, book)
    try:
        c.send(setup.opts.model, setup.probe_inputs(), "cc-baseline")
        c.done_sending()
        if not book.wait(lambda: book.get("cc-baseline").done is not None, setup.opts.window_s * 2):
            raise UpstreamError(f"the probe request to {setup.opts.model!r} did not finish within {setup.opts.window_s * 2:.0f} s")
        s = book.get("cc-baseline")
        if s.error is not None:
            raise UpstreamError(f"the probe request failed: {s.error} {s.detail}")
        first = s.first if s.first is not None else s.done
        return (first - s.sent) * 1000.0  # type: ignore[operator]
    finally:
        c.close()


def _wait_started(setup: Setup, book: Book, rid: str) -> bool:
    """Wait for the first response; ``future`` calls have none, so a fixed wait stands in."""
    if setup.opts.method == "future":
        time.sleep(setup.opts.start_wait_ms / 1000.0)
        return book.get(rid).done is None
    return book.wait(lambda: book.get(rid).first is not None or book.get(rid).done is not None, setup.opts.window_s)


def _settle_ms(setup: Setup) -> float:
    # Long enough that a request the model could serve concurrently would have answered.
    return max(150.0, 3 * setup.baseline_ms)


def executing_case(setup: Setup) -> vd.CaseObservation:
    opts = setup.opts
    book = Book()
    main, neighbour = _client(setup, book), _client(setup, book)
    rid, sibling, probe = "cc-exec", "cc-exec-sibling", "cc-exec-neighbour"
    try:
        main.send(opts.model, setup.long_inputs(), rid)
        if main.scope == "stream":
            main.send(opts.model, setup.long_inputs(), sibling)
        main.done_sending()
        if not _wait_started(setup, book, rid) or book.get(rid).done is not None:
            return vd.CaseObservation(
                case="executing", request_id=rid, allowance_ms=opts.allowance_ms,
                skipped=f"the long request gave no response within {opts.window_s:.0f} s or finished before the cancel "
                        f"({book.get(rid).error or 'completed'}): use a larger --length or --inputs",
            )  # fmt: skip
        neighbour.send(opts.model, setup.probe_inputs(), probe)
        neighbour.done_sending()
        time.sleep(_settle_ms(setup) / 1000.0)
        blocked = book.get(probe).first is None and book.get(probe).done is None
        pre = book.get(rid)
        responses = pre.responses
        tail, before = start_window(setup)
        t_cancel = time.monotonic()
        rate = None
        if responses >= 2 and pre.first is not None and t_cancel > pre.first:
            rate = (responses - 1) / (t_cancel - pre.first)
        main.cancel(rid)
        book.wait(lambda: book.get(probe).done is not None, opts.window_s * 3)
        p = book.get(probe)
        first = p.first if p.first is not None else (p.done if p.error is None else None)
        after = _ms(first, t_cancel) if blocked else None
        log, deltas = end_window(setup, tail, before, rid, t_cancel, "executing")
        s = book.get(rid)
        casualties: tuple[str, ...] = ()
        not_covered: list[str] = []
        if main.scope == "stream":
            sib = book.get(sibling)
            casualties = (f"{sibling} (in flight on the same stream, ended {sib.error or 'normally'})",)
        if opts.method == "future":
            not_covered.append(
                f"a unary call shows no partial response: processing start was assumed after {opts.start_wait_ms:.0f} ms"
            )
        neighbour_ok = p.done is not None and p.error is None
        detail = (
            f"{probe} on another client completed normally"
            if neighbour_ok
            else f"{probe} on another client ended {p.error or 'not within the window'} {p.detail}".strip()
        )
        return vd.CaseObservation(
            case="executing", request_id=rid, allowance_ms=opts.allowance_ms, client_status=s.error,
            responses_before_cancel=responses, unary=opts.method == "future", rate_per_s=rate,
            remaining=max(0, opts.length - responses) if opts.inputs is None else None,
            probe=vd.ProbeObservation(baseline_ms=setup.baseline_ms, blocked_before_cancel=blocked,
                                      after_cancel_ms=after, window_ms=opts.window_s * 3000.0),
            log=log, metrics=deltas, neighbour_ok=neighbour_ok, neighbour_detail=detail,
            casualties=casualties, not_covered=tuple(not_covered),
        )  # fmt: skip
    finally:
        main.close()
        neighbour.close()


def queued_case(setup: Setup) -> vd.CaseObservation:
    opts = setup.opts
    book = Book()
    blocker, queued, prober = _client(setup, book), _client(setup, book), _client(setup, book)
    rid, block, probe = "cc-queued", "cc-queued-blocker", "cc-queued-probe"
    try:
        blocker.send(opts.model, setup.long_inputs(), block)
        blocker.done_sending()
        if not _wait_started(setup, book, block) or book.get(block).done is not None:
            return vd.CaseObservation(
                case="queued", request_id=rid, allowance_ms=opts.allowance_ms,
                skipped="the blocker request gave no response or finished at once: use a larger --length or --inputs",
            )
        queued.send(opts.model, setup.long_inputs(), rid)
        queued.done_sending()
        time.sleep(_settle_ms(setup) / 1000.0)
        q = book.get(rid)
        if q.first is not None or q.done is not None:
            return vd.CaseObservation(
                case="queued", request_id=rid, allowance_ms=opts.allowance_ms,
                skipped="the model answered a second request while the first was executing (more than one instance, "
                        "or it works off its instance): there is no queued state to cancel",
            )  # fmt: skip
        prober.send(opts.model, setup.probe_inputs(), probe)
        prober.done_sending()
        tail, before = start_window(setup)
        t_cancel = time.monotonic()
        queued.cancel(rid)
        book.wait(lambda: book.get(probe).done is not None and book.get(block).done is not None, opts.window_s * 4)
        b, p = book.get(block), book.get(probe)
        first = p.first if p.first is not None else (p.done if p.error is None else None)
        # The probe waits for the blocker anyway: measured from the blocker's end.
        freed = max(b.done or t_cancel, t_cancel)
        after = _ms(first, freed)
        if after is not None:
            # Both stamps come from callback threads: a probe answered "before" the blocker's end is 0.
            after = max(0.0, after)
        # The cancelled request can reach the backend only once the blocker is done: the log is watched for
        # a whole window from then, so its allowance is not cut short by the blocker's run time.
        log, deltas = end_window(setup, tail, before, rid, freed, "queued")
        neighbour_ok = b.done is not None and b.error is None and p.error is None and p.done is not None
        detail = (
            f"{block} (executing on another client) and {probe} completed normally"
            if neighbour_ok
            else f"{block}: {b.error or ('done' if b.done else 'not done')}; {probe}: {p.error or ('done' if p.done else 'not done')}"
        )
        return vd.CaseObservation(
            case="queued", request_id=rid, allowance_ms=opts.allowance_ms, client_status=book.get(rid).error,
            responses_before_cancel=0, unary=opts.method == "future",
            probe=vd.ProbeObservation(baseline_ms=setup.baseline_ms, blocked_before_cancel=True,
                                      after_cancel_ms=after, window_ms=opts.window_s * 4000.0,
                                      reference=f"the end of {block}, which ran ahead of it"),
            log=log, metrics=deltas, neighbour_ok=neighbour_ok, neighbour_detail=detail, ahead_ended=b.done is not None,
        )  # fmt: skip
    finally:
        for c in (blocker, queued, prober):
            c.close()

"""``triton-tap check-cancel``: run the cancellation acceptance protocol against a live Triton.

The shell around :mod:`proxy.cancelcheck.verdict` (which decides): it drives real tritonclient requests,
measures, reads Triton's verbose log / metrics endpoint when given, optionally runs the traffic
through an in-process recording proxy, and hands the observations to the pure verdict.

Protocol (each case on fresh clients; request ids ``cc-*``):

1. baseline: one short probe request on the idle model, time to first response;
2. executing case: a long request, wait for its first response (for ``future``, which has no
   partial responses, a fixed wait), start a neighbour probe on another client, cancel the long
   request with the chosen client method; the probe's first response after the cancel, the log and
   the metrics are the evidence; the neighbour must complete normally. With ``stream``/``aio`` a
   sibling request on the same stream is the expected casualty of the stream-scope cancel;
3. queued case: a long blocker on one client, a long request on another client that must not have
   started (no response), cancel that one, then a probe: it should be served right after the
   blocker, not after the cancelled request.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy import __version__
from proxy.cancelcheck import verdict as vd
from proxy.ops.evidence import lines_since, metric_deltas, sample_metrics
from replay.errors import UpstreamError, UserError

_DEFAULT_PROMPT = "check-cancel"


@dataclass
class CheckOptions:
    """What ``check-cancel`` takes."""

    target: str
    model: str
    method: str = "stream"  # stream | future | aio
    inputs: dict[str, Any] | None = None
    probe_inputs: dict[str, Any] | None = None
    length: int = 300
    allowance_ms: float = 300.0
    window_s: float = 6.0
    start_wait_ms: float = 300.0
    cases: tuple[str, ...] = ("executing", "queued")
    log_path: Path | None = None
    metrics_url: str | None = None
    through_proxy: bool = False
    capture_dir: Path | None = None


# -- requests and what happened to them -------------------------------------------------------------


@dataclass
class _Seen:
    sent: float
    first: float | None = None
    responses: int = 0
    done: float | None = None  # final response / stream or call ended
    error: str | None = None  # status name of an error ending (e.g. CANCELLED)
    detail: str = ""


class _Book:
    """Per request id: when it was sent, answered, finished (filled from client callbacks)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self.seen: dict[str, _Seen] = {}

    def sent(self, rid: str) -> None:
        with self._cv:
            self.seen[rid] = _Seen(sent=time.monotonic())

    def response(self, rid: str, final: bool) -> None:
        with self._cv:
            s = self.seen.get(rid)
            if s is None:
                return
            now = time.monotonic()
            if final:
                s.done = s.done or now
            else:
                s.responses += 1
                s.first = s.first or now
            self._cv.notify_all()

    def ended(self, rids: list[str], status: str | None, detail: str = "") -> None:
        with self._cv:
            now = time.monotonic()
            for rid in rids:
                s = self.seen.get(rid)
                if s is not None and s.done is None:
                    s.done = now
                    s.error = status
                    s.detail = detail
            self._cv.notify_all()

    def wait(self, cond: Callable[[], bool], timeout: float) -> bool:
        with self._cv:
            return self._cv.wait_for(cond, timeout)

    def get(self, rid: str) -> _Seen:
        with self._cv:
            return self.seen[rid]


def _status_name(err: Any) -> str:
    status = err.status() if hasattr(err, "status") else None
    text = str(status or "")
    return text.removeprefix("StatusCode.") or "UNKNOWN"


class _StreamClient:
    """tritonclient.grpc stream: ``stop_stream(cancel_requests=True)`` cancels the whole stream."""

    scope = "stream"

    def __init__(self, url: str, book: _Book) -> None:
        import tritonclient.grpc as grpcclient

        self.book = book
        self.rids: list[str] = []
        self.client = grpcclient.InferenceServerClient(url)
        self.client.start_stream(callback=self._callback)

    def _callback(self, result: Any, error: Any) -> None:
        if error is not None:
            self.book.ended(list(self.rids), _status_name(error), error.message() or "")
            return
        r = result.get_response()
        p = r.parameters.get("triton_final_response")
        final = bool(p.bool_param) if p is not None else False
        self.book.response(r.id, final and not r.outputs)
        if final and r.outputs:
            self.book.response(r.id, True)

    def send(self, model: str, inputs: list[Any], rid: str) -> None:
        self.rids.append(rid)
        self.book.sent(rid)
        self.client.async_stream_infer(model, inputs, request_id=rid, enable_empty_final_response=True)

    def done_sending(self) -> None:
        """No more requests on this client (the sync stream stays open until cancel/close)."""

    def cancel(self, rid: str) -> None:
        self.client.stop_stream(cancel_requests=True)
        # tritonclient calls back with CANCELLED from its stream thread; what it reports is the
        # client status (a missing callback stays "nothing", never an assumed CANCELLED).
        self.book.wait(lambda: self.book.get(rid).done is not None, 5.0)

    def close(self) -> None:
        try:
            self.client.stop_stream(cancel_requests=True)
        finally:
            self.client.close()


class _FutureClient:
    """tritonclient.grpc ``async_infer``: ``CallContext.cancel()`` cancels one request."""

    scope = "request"

    def __init__(self, url: str, book: _Book) -> None:
        import tritonclient.grpc as grpcclient

        self.book = book
        self.client = grpcclient.InferenceServerClient(url)
        self.ctx: dict[str, Any] = {}

    def send(self, model: str, inputs: list[Any], rid: str) -> None:
        self.book.sent(rid)

        def done(result: Any, error: Any) -> None:
            if error is not None:
                self.book.ended([rid], _status_name(error), error.message() or "")
            else:
                self.book.response(rid, False)
                self.book.response(rid, True)

        self.ctx[rid] = self.client.async_infer(model, inputs, callback=done, request_id=rid)

    def done_sending(self) -> None:
        """No more requests on this client."""

    def cancel(self, rid: str) -> None:
        self.ctx[rid].cancel()

    def close(self) -> None:
        self.client.close()


class _AioClient:
    """tritonclient.grpc.aio ``stream_infer``: the response iterator's ``cancel()`` ends the stream."""

    scope = "stream"

    def __init__(self, url: str, book: _Book) -> None:
        self.book = book
        self.url = url
        self.rids: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="check-cancel-aio", daemon=True)
        self.thread.start()
        self.queue: asyncio.Queue[dict[str, Any] | None] | None = None
        self.task: asyncio.Future[None] | None = None
        self.iterator: Any = None
        self.client: Any = None

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    async def _requests(self) -> AsyncIterator[dict[str, Any]]:
        assert self.queue is not None
        while True:
            item = await self.queue.get()
            if item is None:
                return
            yield item

    async def _consume(self) -> None:
        try:
            async for result, error in self.iterator:
                if error is not None:
                    self.book.ended(list(self.rids), _status_name(error), str(error))
                    return
                r = result.get_response()
                self.book.response(r.id, False)
        except asyncio.CancelledError:
            self.book.ended(list(self.rids), "CANCELLED", "aio stream cancel()")
            raise
        except Exception as e:
            self.book.ended(list(self.rids), _status_name(e), str(e))
            return
        # The aio client drops enable_empty_final_response: the stream's OK end is the final.
        self.book.ended(list(self.rids), None)

    async def _start(self, model: str, inputs: list[Any], rid: str) -> None:
        import tritonclient.grpc.aio as aioclient

        self.client = aioclient.InferenceServerClient(self.url)
        self.queue = asyncio.Queue()
        await self.queue.put({"model_name": model, "inputs": inputs, "request_id": rid})
        self.iterator = self.client.stream_infer(self._requests())
        self.task = asyncio.ensure_future(self._consume())

    def send(self, model: str, inputs: list[Any], rid: str) -> None:
        self.rids.append(rid)
        self.book.sent(rid)
        if self.queue is None:
            self._run(self._start(model, inputs, rid))
        else:
            item = {"model_name": model, "inputs": inputs, "request_id": rid}
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def done_sending(self) -> None:
        """Half-close the stream: it then ends (OK) once the server finished every request."""
        if self.queue is not None:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, None)

    def cancel(self, rid: str) -> None:
        async def _cancel() -> None:
            self.iterator.cancel()

        self._run(_cancel())

    def close(self) -> None:
        async def _close() -> None:
            if self.task is not None and not self.task.done():
                self.iterator.cancel()
                self.task.cancel()
                await asyncio.gather(self.task, return_exceptions=True)
            if self.client is not None:
                await self.client.close()

        try:
            self._run(_close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


_CLIENTS: dict[str, type[_StreamClient] | type[_FutureClient] | type[_AioClient]] = {
    "stream": _StreamClient,
    "future": _FutureClient,
    "aio": _AioClient,
}


# -- server side evidence ---------------------------------------------------------------------------


class LogTail:
    """Lines appended to a file after :meth:`mark` (Triton's log is append-only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        """Remember the current end of the file."""
        try:
            self.offset = self.path.stat().st_size
        except OSError as e:
            raise UserError(f"--log {str(self.path)!r} cannot be read: {e.strerror or e}") from None

    def read(self) -> list[str]:
        """The complete lines appended since :meth:`mark`."""
        return lines_since(self.path, self.offset)


# -- inputs ---------------------------------------------------------------------------------------


_NP_TYPES = {
    "BOOL": "bool", "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64",
    "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
    "FP16": "float16", "FP32": "float32", "FP64": "float64",
}  # fmt: skip


def _dtype_name(config_type: str) -> str:
    t = config_type.removeprefix("TYPE_")
    return "BYTES" if t == "STRING" else t


def recipe(config: Any, length: int) -> dict[str, Any]:
    """Built-in inputs for a model with one BYTES prompt and one INT32 length among its required inputs."""
    required = [i for i in config.input if not i.optional]
    strings = [i for i in required if _dtype_name(model_type_name(i.data_type)) == "BYTES"]
    ints = [i for i in required if _dtype_name(model_type_name(i.data_type)) == "INT32"]
    others = [i.name for i in required if i not in strings and i not in ints]
    if len(strings) != 1 or len(ints) != 1 or others:
        names = ", ".join(f"{i.name} ({_dtype_name(model_type_name(i.data_type))})" for i in required)
        raise UserError(
            f"model {config.name!r} needs inputs the built-in recipe (one BYTES prompt + one INT32 length) "
            f"cannot build: {names or 'none'}; give --inputs JSON"
        )
    return {strings[0].name: [_DEFAULT_PROMPT], ints[0].name: [length]}


def model_type_name(value: int) -> str:
    """``TYPE_INT32`` etc. for a model_config DataType value."""
    from tritonclient.grpc import model_config_pb2

    name: str = model_config_pb2.DataType.Name(value)
    return name


def build_inputs(config: Any, values: dict[str, Any]) -> list[Any]:
    """tritonclient InferInputs from ``{name: nested list}``, typed from the model config."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    by_name = {i.name: i for i in config.input}
    out = []
    for name, value in values.items():
        spec = by_name.get(name)
        if spec is None:
            raise UserError(f"--inputs: model {config.name!r} has no input {name!r} (it has {', '.join(by_name)})")
        dtype = _dtype_name(model_type_name(spec.data_type))
        try:
            if dtype == "BYTES":
                arr = np.array(value, dtype=np.object_)
                arr = np.vectorize(lambda x: x.encode() if isinstance(x, str) else x, otypes=[np.object_])(arr)
            else:
                arr = np.array(value, dtype=_NP_TYPES[dtype])
        except (KeyError, ValueError, TypeError) as e:
            raise UserError(f"--inputs: value of {name!r} is not a {dtype} array: {e}") from None
        t = grpcclient.InferInput(name, list(arr.shape), dtype)
        t.set_data_from_numpy(arr)
        out.append(t)
    missing = [i.name for i in config.input if not i.optional and i.name not in values]
    if missing:
        raise UserError(f"--inputs: model {config.name!r} also needs {', '.join(missing)}")
    return out


# -- the protocol -----------------------------------------------------------------------------------


@dataclass
class _Setup:
    url: str
    opts: CheckOptions
    config: Any
    long_inputs: Callable[[], list[Any]]
    probe_inputs: Callable[[], list[Any]]
    baseline_ms: float = 0.0
    notes: list[str] = field(default_factory=list)
    metrics_ok: bool = True  # False when --metrics did not answer before the run


def _client(setup: _Setup, book: _Book) -> Any:
    return _CLIENTS[setup.opts.method](setup.url, book)


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else (a - b) * 1000.0


def _baseline(setup: _Setup) -> float:
    book = _Book()
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


def _wait_started(setup: _Setup, book: _Book, rid: str) -> bool:
    """Wait for the first response; ``future`` calls have none, so a fixed wait stands in."""
    if setup.opts.method == "future":
        time.sleep(setup.opts.start_wait_ms / 1000.0)
        return book.get(rid).done is None
    return book.wait(lambda: book.get(rid).first is not None or book.get(rid).done is not None, setup.opts.window_s)


def _settle_ms(setup: _Setup) -> float:
    # Long enough that a request the model could serve concurrently would have answered.
    return max(150.0, 3 * setup.baseline_ms)


def _server_evidence_start(setup: _Setup) -> tuple[LogTail | None, dict[str, float] | None]:
    tail = None
    if setup.opts.log_path is not None:
        tail = LogTail(setup.opts.log_path)
        tail.mark()
    before = None
    if setup.opts.metrics_url is not None and setup.metrics_ok:
        before = _metrics_or_none(setup)
    return tail, before


def _metrics_or_none(setup: _Setup) -> dict[str, float] | None:
    assert setup.opts.metrics_url is not None
    try:
        return sample_metrics(setup.opts.metrics_url)
    except Exception as e:  # a non-HTTP port raises http.client errors, not OSError
        note = f"metrics endpoint {setup.opts.metrics_url} unreadable: {type(e).__name__}: {e}"
        if note not in setup.notes:
            setup.notes.append(note)
        return None


def _server_evidence_end(
    setup: _Setup, tail: LogTail | None, before: dict[str, float] | None, rid: str, t_cancel: float, case: vd.Case
) -> tuple[vd.LogObservation | None, dict[str, float] | None]:
    # The window is what lets work that goes on show itself (log lines, counters).
    remaining = setup.opts.window_s - (time.monotonic() - t_cancel)
    if remaining > 0 and (tail is not None or before is not None):
        time.sleep(remaining)
    log = None
    if tail is not None:
        try:
            lines = tail.read()
        except OSError as e:
            setup.notes.append(f"--log {str(tail.path)!r} unreadable after the cancel: {e.strerror or e}")
        else:
            log = vd.scan_log(lines, rid, setup.opts.allowance_ms, setup.opts.window_s * 1000.0, case=case)
    deltas = None
    if before is not None:
        after = _metrics_or_none(setup)
        if after is not None:
            deltas = metric_deltas(before, after, setup.opts.model)
    return log, deltas


def _executing_case(setup: _Setup) -> vd.CaseObservation:
    opts = setup.opts
    book = _Book()
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
        tail, before = _server_evidence_start(setup)
        t_cancel = time.monotonic()
        rate = None
        if responses >= 2 and pre.first is not None and t_cancel > pre.first:
            rate = (responses - 1) / (t_cancel - pre.first)
        main.cancel(rid)
        book.wait(lambda: book.get(probe).done is not None, opts.window_s * 3)
        p = book.get(probe)
        first = p.first if p.first is not None else (p.done if p.error is None else None)
        after = _ms(first, t_cancel) if blocked else None
        log, deltas = _server_evidence_end(setup, tail, before, rid, t_cancel, "executing")
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


def _queued_case(setup: _Setup) -> vd.CaseObservation:
    opts = setup.opts
    book = _Book()
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
        tail, before = _server_evidence_start(setup)
        t_cancel = time.monotonic()
        queued.cancel(rid)
        book.wait(lambda: book.get(probe).done is not None and book.get(block).done is not None, opts.window_s * 4)
        b, p = book.get(block), book.get(probe)
        first = p.first if p.first is not None else (p.done if p.error is None else None)
        # The probe waits for the blocker anyway: measured from the blocker's end.
        after = _ms(first, max(b.done or t_cancel, t_cancel))
        if after is not None:
            # Both stamps come from callback threads: a probe answered "before" the blocker's end is 0.
            after = max(0.0, after)
        log, deltas = _server_evidence_end(setup, tail, before, rid, t_cancel, "queued")
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
            log=log, metrics=deltas, neighbour_ok=neighbour_ok, neighbour_detail=detail,
        )  # fmt: skip
    finally:
        for c in (blocker, queued, prober):
            c.close()


def _connect(opts: CheckOptions) -> tuple[Any, str | None]:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    try:
        client = grpcclient.InferenceServerClient(opts.target)
    except Exception as e:
        raise UserError(f"--target {opts.target!r}: {e}") from None
    try:
        try:
            meta = client.get_server_metadata()
        except InferenceServerException as e:
            # Only a transport failure means nobody answered; any other status came from a server.
            status = str(e.status() or "")
            if status.endswith(("UNAVAILABLE", "DEADLINE_EXCEEDED")) or not status:
                raise UpstreamError(f"Triton at {opts.target} is unreachable: {e.message()}") from None
            raise UpstreamError(
                f"the server at {opts.target} refused Triton's ServerMetadata ({status.rsplit('.', 1)[-1]}): "
                f"{e.message()} (is it a Triton gRPC endpoint?)"
            ) from None
        try:
            config = client.get_model_config(opts.model).config
        except InferenceServerException as e:
            raise UserError(f"model {opts.model!r} is not available on {opts.target}: {e.message()}") from None
    finally:
        client.close()
    return config, meta.version or None


def _scope_for(method: str) -> str:
    return "request" if method == "future" else "stream"


def run_check(opts: CheckOptions) -> vd.Report:
    """Run the protocol; raises UserError/UpstreamError when it cannot run."""
    from importlib.metadata import version

    if opts.method not in _CLIENTS:
        raise UserError(f"--method must be stream, future or aio, got {opts.method!r}")
    config, server_version = _connect(opts)
    decoupled = bool(config.model_transaction_policy.decoupled)
    if opts.method == "future" and decoupled:
        raise UserError(f"model {opts.model!r} is decoupled: Triton refuses unary calls to it; use --method stream or aio")
    if opts.method != "future" and not decoupled:
        raise UserError(f"model {opts.model!r} is not decoupled: use --method future")
    long_values = opts.inputs if opts.inputs is not None else recipe(config, opts.length)
    probe_values = opts.probe_inputs if opts.probe_inputs is not None else (
        recipe(config, 1) if opts.inputs is None else opts.inputs
    )
    build_inputs(config, long_values)  # fail early on bad --inputs
    build_inputs(config, probe_values)
    proxy = None
    url = opts.target
    if opts.through_proxy:
        import tempfile

        from proxy.lab.background import ProxyThread

        capture_dir = opts.capture_dir or Path(tempfile.mkdtemp(prefix="check-cancel-"))
        proxy = ProxyThread(opts.target, capture_dir, payload="meta", drain_timeout=2).start()
        url = f"127.0.0.1:{proxy.proxy.port}"
    setup = _Setup(
        url=url, opts=opts, config=config,
        long_inputs=lambda: build_inputs(config, long_values),
        probe_inputs=lambda: build_inputs(config, probe_values),
    )  # fmt: skip
    if opts.metrics_url is not None:
        # Checked once up front: a dead or non-HTTP endpoint is one note, not a failure per case.
        setup.metrics_ok = _metrics_or_none(setup) is not None
    cases: list[vd.CaseObservation] = []
    try:
        setup.baseline_ms = _baseline(setup)
        if "executing" in opts.cases:
            cases.append(_executing_case(setup))
        if "queued" in opts.cases:
            cases.append(_queued_case(setup))
    finally:
        if proxy is not None:
            proxy.stop()
    if proxy is not None:
        cases = [_with_capture(c, proxy.proxy.capture_path) for c in cases]
    not_covered = list(setup.notes)
    if opts.log_path is None:
        not_covered.append("Triton's verbose log (--log): per-request RELEASED times and responses produced after the cancel")
    if opts.metrics_url is None:
        not_covered.append("metrics (--metrics)")
    if not opts.through_proxy:
        not_covered.append("the proxy's view (--through-proxy): cancel latency upstream, late frames, in-flight ids")
    return vd.Report(
        tool_version=__version__, client_version=version("tritonclient"), protocol="grpc", method=opts.method,
        scope=_scope_for(opts.method), server_version=server_version, model=opts.model,
        backend=config.backend or config.platform or None, via="proxy" if opts.through_proxy else "direct",
        allowance_ms=opts.allowance_ms, cases=tuple((c, vd.decide(c)) for c in cases),
        not_covered=tuple(not_covered),
    )  # fmt: skip


def _with_capture(obs: vd.CaseObservation, capture: Path) -> vd.CaseObservation:
    """Add what the proxy recorded about this cancel (cancel record, late frames)."""
    import dataclasses

    from replay.capture import events as ev
    from replay.capture.reader import read_capture

    if obs.skipped is not None:
        return obs
    cancel: ev.CallCancelled | None = None
    late = 0
    for _seq, rec in read_capture([capture]):
        if isinstance(rec, ev.CallCancelled) and obs.request_id in rec.in_flight:
            cancel = rec
        elif isinstance(rec, ev.LateFrameSeen) and cancel is not None and rec.call == cancel.call:
            late += 1
    if cancel is None:
        return dataclasses.replace(obs, not_covered=(*obs.not_covered, "the proxy recorded no cancel for this request"))
    return dataclasses.replace(
        obs, upstream_rst_us=cancel.upstream_rst_us, late_frames=late,
        proxy_in_flight=tuple(cancel.in_flight), proxy_responded=tuple(cancel.responded),
    )  # fmt: skip


def parse_json_inputs(text: str, flag: str) -> dict[str, Any]:
    """``--inputs`` / ``--probe-inputs``: a JSON object ``{name: array}`` (or @FILE)."""
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as e:
            raise UserError(f"{flag}: cannot read {text[1:]!r}: {e.strerror or e}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{flag}: not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise UserError(f"{flag}: must be a JSON object {{input name: array}}")
    return value

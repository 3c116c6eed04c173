"""``triton-tap check-cancel``: run the cancellation acceptance protocol against a live Triton.

The shell around :mod:`proxy.cancelcheck.verdict` (which decides): it drives real tritonclient requests
(:mod:`~proxy.cancelcheck.clients`, inputs from :mod:`~proxy.cancelcheck.inputs`), measures
(:mod:`~proxy.cancelcheck.cases`), reads Triton's verbose log / metrics endpoint when given and what an
in-process recording proxy captured (:mod:`~proxy.cancelcheck.evidence`), and hands the observations to
the pure verdict. This module checks the target and runs the cases.

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

from pathlib import Path
from typing import Any

from proxy import __version__
from proxy.admin.connect import ClientTls, client_tls, closed_on_us, tls_hint
from proxy.cancelcheck import verdict as vd
from proxy.cancelcheck.cases import baseline, executing_case, queued_case
from proxy.cancelcheck.clients import CLIENTS, tls_kw
from proxy.cancelcheck.evidence import metrics_or_none, with_capture
from proxy.cancelcheck.inputs import build_inputs, recipe
from proxy.cancelcheck.options import CheckOptions, Setup
from replay.errors import UpstreamError, UserError
from replay.hostport import parse_hostport

__all__ = ["CheckOptions", "run_check"]


def _connect(opts: CheckOptions, tls: ClientTls | None) -> tuple[Any, str | None]:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    try:
        client = grpcclient.InferenceServerClient(opts.target, **tls_kw(tls))
    except Exception as e:
        raise UserError(f"--target {opts.target!r}: {e}") from None
    try:
        try:
            meta = client.get_server_metadata()
        except InferenceServerException as e:
            # Only a transport failure means nobody answered; any other status came from a server.
            status = str(e.status() or "")
            if status.endswith(("UNAVAILABLE", "DEADLINE_EXCEEDED")) or not status:
                message = str(e.message())
                # A TLS port closes a plaintext client's connection: say when that is why.
                hint = tls_hint(*parse_hostport(opts.target, "--target"), tls) if closed_on_us(message) else ""
                raise UpstreamError(
                    f"Triton at {opts.target} is unreachable: {message}" + (f"; {hint}" if hint else "")
                ) from None
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

    if opts.method not in CLIENTS:
        raise UserError(f"--method must be stream, future or aio, got {opts.method!r}")
    tls = client_tls(opts.ca, opts.server_name, opts.cert, opts.key)
    config, server_version = _connect(opts, tls)
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
    cases: list[vd.CaseObservation] = []
    # From the proxy's start on, whatever ends the run (an error, Ctrl-C anywhere) stops it: its
    # capture ends with capture_end, and no proxy thread is left behind.
    try:
        if opts.through_proxy:
            import tempfile

            from proxy.lab.background import ProxyThread

            capture_dir = opts.capture_dir or Path(tempfile.mkdtemp(prefix="check-cancel-"))
            # The clients speak h2c to the in-process proxy on loopback; the proxy speaks TLS to Triton.
            proxy = ProxyThread(
                opts.target, capture_dir, payload="meta", drain_timeout=2, upstream_tls=tls is not None,
                upstream_ca=opts.ca, upstream_cert=opts.cert, upstream_key=opts.key,
                upstream_server_name=opts.server_name,
            ).start()  # fmt: skip
            url = f"127.0.0.1:{proxy.proxy.port}"
        setup = Setup(
            url=url, opts=opts, config=config,
            long_inputs=lambda: build_inputs(config, long_values),
            probe_inputs=lambda: build_inputs(config, probe_values),
            client_kw={} if proxy is not None else tls_kw(tls),
        )  # fmt: skip
        if opts.metrics_url is not None:
            # Checked once up front: a dead or non-HTTP endpoint is one note, not a failure per case.
            setup.metrics_ok = metrics_or_none(setup) is not None
        setup.baseline_ms = baseline(setup)
        if "executing" in opts.cases:
            cases.append(executing_case(setup))
        if "queued" in opts.cases:
            cases.append(queued_case(setup))
    finally:
        if proxy is not None:
            proxy.stop()
    if proxy is not None:
        cases = [with_capture(c, proxy.proxy.capture_path) for c in cases]
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

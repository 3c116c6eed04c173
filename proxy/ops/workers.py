"""``record --workers N``: N proxy processes on one port, writing one capture set.

One asyncio process is one core. With ``--workers N`` a supervisor starts N worker processes, each a
whole :class:`proxy.ops.server.RecordingProxy` with its own capture writer, all bound to the same
port with ``SO_REUSEPORT``: the kernel spreads new connections over the workers (by a hash of the
connection's addresses), so a connection and its calls live in one worker from start to end and
the workers share nothing. Why that and not one acceptor handing sockets to the workers: the
acceptor would be one more process on the path of every connection set-up and a single point of
failure, and passing file descriptors (``SCM_RIGHTS``) costs a round of syscalls per connection;
with ``SO_REUSEPORT`` the kernel does the same balancing for free, and nothing here depends on N
(16 workers are 16 more of the same processes). The price: balancing is per *connection*, and a
gRPC channel is one HTTP/2 connection, so one client channel is served by one worker (one core).

Each worker writes its own chain of capture files, named after the set and the worker
(:func:`replay.capture.naming.worker_stem`), and says so in ``capture_start`` (``capture_set``,
``worker``, ``workers``); readers treat the set as one capture (:mod:`replay.capture.reader`).
Connection ids are ``w<k>c<n>``, so call ids are unique across the set. SIGTERM/SIGINT to the
supervisor is passed to every worker, each drains its calls as a single proxy does, and the
supervisor exits when all have, with the worst exit status (a worker the signal ended before its own
handler was in place, before it opened anything, stopped as asked). SIGHUP to the supervisor is passed
to every worker too: each reopens its capture file. A worker that fails stops the others.
Metrics: each worker serves its own ``/metrics``, on ``--metrics`` port + k (port 0: a free port
each, in each worker's ``recording`` log line); add them up in Prometheus (``sum by``). The admin
service likewise, on ``--admin`` port + k: each worker's status, tail, mark and rotate are its own (one
shared port would hand each command to one worker at random).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from types import FrameType

import structlog

from proxy.ops.server import ProxyConfig, check_upstream
from proxy.ops.tls import listen_ssl, upstream_ssl
from replay.capture import naming
from replay.errors import TritonTapError, UserError, exit_code_for
from replay.hostport import bind_error, cannot_listen, format_hostport, parse_hostport

log = structlog.get_logger("triton_tap.workers")


def _reserve(host: str, port: int) -> socket.socket:
    """A bound, never listening SO_REUSEPORT socket: fixes the port (0: a free one) for every worker."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise cannot_listen(format_hostport(host, port), e) from None
    return sock


def worker_configs(cfg: ProxyConfig, port: int, set_stem: str) -> list[ProxyConfig]:
    """Each worker's configuration: the same port, its index, the set, its own metrics and admin ports."""
    host = parse_hostport(cfg.listen, "--listen", allow_port_zero=True)[0]
    out = []
    for k in range(cfg.workers):
        out.append(dataclasses.replace(cfg, listen=format_hostport(host, port), worker=k, capture_set=set_stem,
                                       metrics=_plus(cfg.metrics, "--metrics", k), admin=_plus(cfg.admin, "--admin", k)))  # fmt: skip
    return out


def _plus(address: str | None, flag: str, k: int) -> str | None:
    """Worker ``k``'s own ``address`` of a per-worker service: its port + k (port 0: a free port each)."""
    if address is None:
        return None
    host, port = parse_hostport(address, flag, allow_port_zero=True)
    return format_hostport(host, port + k if port else 0)


def _check_worker_ports(cfg: ProxyConfig, listen_port: int) -> None:
    """Every worker's own admin and metrics port (the flag's port + k) can be bound: refused here in one line,
    before any worker starts, as without --workers (a port past 65535, one another server of the set has, or
    one in use came out of worker k as several lines, with a capture set of the workers that had started)."""
    taken: dict[int, str] = {listen_port: "the --listen port"}
    wanted: list[tuple[str, str, int, str, int]] = []  # (flag, address, worker, host, port)
    for flag, address in (("--admin", cfg.admin), ("--metrics", cfg.metrics)):
        if address is None:
            continue
        host, first = parse_hostport(address, flag, allow_port_zero=True)
        if not first:
            continue  # a free port each
        for k in range(cfg.workers):
            port = first + k
            where = f"{flag} {address} with --workers {cfg.workers}: worker {k}'s port"
            if port > 65535:
                raise UserError(f"{where} would be {port}, past 65535 (each worker serves on the port + its index)")
            if port in taken:
                raise UserError(f"{where} {port} is {taken[port]} (each worker serves on the port + its index)")
            taken[port] = f"worker {k}'s {flag} port"
            wanted.append((flag, address, k, host, port))
    for flag, address, k, host, port in wanted:
        if (error := bind_error(host, port)) is not None:
            raise UserError(f"{flag} {address}, worker {k}: {cannot_listen(format_hostport(host, port), error)}")


def supervise(cfg: ProxyConfig, log_level: str) -> int:
    """Run ``cfg.workers`` worker processes until SIGTERM/SIGINT (or one fails); their worst exit status."""
    # What every worker would refuse alike is refused here, before any starts: one line, as without
    # --workers, not one error per worker among the set's log lines.
    upstream_tls = upstream_ssl(cfg)
    listen_ssl(cfg)
    if cfg.upstream:
        check_upstream(*parse_hostport(cfg.upstream, "--upstream"), cfg.connect_timeout, upstream_tls,
                       cfg.upstream_server_name, h2=True)  # fmt: skip
    host, port = parse_hostport(cfg.listen, "--listen", allow_port_zero=True)
    reserved = _reserve(host, port)
    port = reserved.getsockname()[1]
    try:
        _check_worker_ports(cfg, port)
    except BaseException:
        reserved.close()
        raise
    set_stem = naming.stem(naming.stamp(time.time_ns()), os.getpid())
    procs: list[subprocess.Popen[bytes]] = []
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    def reopen(signum: int, frame: FrameType | None) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGHUP)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    # SIGHUP (logrotate's reopen) is ignored while the workers start, and they inherit that across exec:
    # one before a worker's own handler is in place is then lost (its capture was just opened), where
    # SIGHUP's default would end the supervisor and orphan the workers, or end a worker.
    old[signal.SIGHUP] = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        for wcfg in worker_configs(cfg, port, set_stem):
            p = subprocess.Popen([sys.executable, "-m", "proxy.ops.workers"], stdin=subprocess.PIPE)
            assert p.stdin is not None
            p.stdin.write(pickle.dumps((wcfg, log_level, os.getpid())))
            p.stdin.close()
            procs.append(p)
        signal.signal(signal.SIGHUP, reopen)
        log.info("workers_started", listen=format_hostport(host, port), workers=cfg.workers, capture_set=set_stem,
                 pids=[p.pid for p in procs])  # fmt: skip
        codes: list[int] = []
        for _ in procs:
            pid, status = os.wait()
            code = os.waitstatus_to_exitcode(status)
            if stopping and code in (-signal.SIGTERM, -signal.SIGINT):
                # Stopped by the signal itself: it came before the worker's own handler, which is in
                # place before the worker opens a capture or listens, so nothing was recorded or lost.
                code = 0
            codes.append(code)
            if not code and not stopping:
                # Stopped on its own (a SIGTERM sent to it, not to the supervisor): it drained and closed its
                # chain; the others go on serving the port, the set's later calls theirs.
                log.warning("worker_stopped", pid=pid, workers_left=len(procs) - len(codes))
            if code and not stopping:
                # A worker that failed (start-up, a crash) takes the set down: a capture set with a
                # silent hole in its traffic would claim more than the wire showed.
                log.warning("worker_failed", pid=pid, exit_code=code)
                stop(signal.SIGTERM, None)
        for p in procs:
            p.wait()  # reaped above: only sets returncode
        return max((c if c > 0 else 1 for c in codes if c), default=0)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        reserved.close()


def _die_with(supervisor: int) -> bool:
    """Linux: a SIGTERM to this worker when the supervisor dies, however (a SIGKILL runs no handler to stop
    the workers): orphans would go on relaying and recording on the port, beside a restarted set. The worker
    drains on it as on the supervisor's own SIGTERM. False when the supervisor is gone already."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):  # (not Linux: no such call; the supervisor's signals still stop them)
        pass
    return os.getppid() == supervisor  # (checked after: a supervisor that died before the call sent nothing)


#: prctl(2) option: the signal the calling process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


def _worker_main() -> int:
    from proxy.ops import eventloop, logs
    from proxy.ops.server import run

    cfg, log_level, supervisor = pickle.loads(sys.stdin.buffer.read())
    logs.configure(log_level)
    if not _die_with(supervisor):
        print(f"triton-tap worker {cfg.worker}: the supervisor {supervisor} is gone; not starting", file=sys.stderr)
        return 1
    # SIGINT from a terminal reaches the whole process group: the supervisor forwards SIGTERM, and
    # the worker's own handler (proxy.ops.server.run) drains on either.
    try:
        eventloop.run(run(cfg), cfg.event_loop)
    except TritonTapError as e:
        print(f"triton-tap worker {cfg.worker}: {e}", file=sys.stderr)
        return exit_code_for(e)
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main())

"""Client certificates on the listening side and certificate reload, with real tritonclient (ssl=True).

The upstream is the fake Triton over h2c: what is tested is the proxy's listening side (the packaged
CPU tritonserver plays no part in the client's handshake with the proxy). Certificates come from a
CA generated per test (tests/support/tls.py).
"""

from __future__ import annotations

import asyncio
import queue
import shutil
import socket
import ssl
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from proxy.ops.server import RecordingProxy
from tests.support.capture import of_kind, records
from tests.support.proxy import stop_proxy
from tests.support.tls import make_pki, server_side_copy


def _client(port: int, ca: Path, cert: Path | None = None, key: Path | None = None) -> grpcclient.InferenceServerClient:
    kw: dict[str, Any] = {"root_certificates": str(ca)}
    if cert is not None and key is not None:
        kw |= {"certificate_chain": str(cert), "private_key": str(key)}
    return grpcclient.InferenceServerClient(f"127.0.0.1:{port}", ssl=True, **kw)


def _echo(client: grpcclient.InferenceServerClient) -> None:
    data = np.arange(8, dtype=np.uint8)
    inp = grpcclient.InferInput("INPUT", [data.size], "UINT8")
    inp.set_data_from_numpy(data)
    out = client.infer("echo", [inp], client_timeout=20).as_numpy("OUTPUT")
    assert np.array_equal(out, data)


def _metrics(proxy: RecordingProxy) -> str:
    assert proxy.metrics_server is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_server.port}/metrics", timeout=10) as r:
        text: str = r.read().decode()
    return text


def test_client_certificate_required_verified_and_recorded(
    tmp_path: Path, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """With --tls-client-ca: a client with a certificate works and its subject is in call_start; without one,
    or with one from another CA, it is refused at the handshake, counted, and leaves no tunnel behind."""
    pki, other = make_pki(tmp_path / "a"), make_pki(tmp_path / "b")
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", tls_cert=pki.server_cert, tls_key=pki.server_key,
                        tls_client_ca=pki.ca, metrics="127.0.0.1:0")  # fmt: skip
    good = _client(proxy.port, pki.ca, pki.client_cert, pki.client_key)
    _echo(good)
    good.close()
    for cert, key in ((None, None), (other.client_cert, other.client_key)):
        bad = _client(proxy.port, pki.ca, cert, key)
        with pytest.raises(InferenceServerException) as info:
            _echo(bad)
        bad.close()
        assert "UNAVAILABLE" in str(info.value.status())
    assert proxy.upkeep is not None
    refused = proxy.upkeep.tls.counters.refused
    assert sum(refused.values()) >= 2, refused
    text = _metrics(proxy)
    assert "triton_tap_tls_handshakes_refused_total{" in text
    assert proxy.relay is not None and len(proxy.relay.tunnels) <= 1  # refused clients are not kept
    stop_proxy(proxy)
    recs = records(proxy.capture_path)
    assert recs[0]["options"]["tls_client_ca"] is True
    starts = of_kind(recs, "call_start")
    assert starts and {s["client_subject"] for s in starts} == {"CN=triton-tap test client"}


def test_without_client_ca_no_subject_is_recorded(fake_upstream: Any, tmp_path: Path,
                                                   start_proxy: Callable[..., RecordingProxy]) -> None:  # fmt: skip
    """Plain server TLS: clients need no certificate, and call_start says client_subject null."""
    pki = make_pki(tmp_path / "a")
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", tls_cert=pki.server_cert, tls_key=pki.server_key)
    c = _client(proxy.port, pki.ca)
    _echo(c)
    c.close()
    stop_proxy(proxy)
    assert {s["client_subject"] for s in of_kind(records(proxy.capture_path), "call_start")} == {None}


def test_certificate_rotation_keeps_open_streams_and_serves_new_ones(
    tmp_path: Path, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """A stream is open; the server certificate and client CA are replaced on disk and reloaded (SIGHUP's
    path): the open stream goes on, new clients must trust the new CA and present a certificate it signed."""
    old, new = make_pki(tmp_path / "old"), make_pki(tmp_path / "new")
    live = server_side_copy(old, tmp_path / "live")
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", tls_cert=live.server_cert, tls_key=live.server_key,
                        tls_client_ca=live.ca, tls_watch_s=0)  # fmt: skip
    streaming = _client(proxy.port, old.ca, old.client_cert, old.client_key)
    q: queue.Queue[Any] = queue.Queue()
    streaming.start_stream(callback=lambda result, error: q.put((result, error)))
    inp = grpcclient.InferInput("PROMPT", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"p"], dtype=object))
    streaming.async_stream_infer("m", [inp], request_id="before", parameters={"n": 2})
    assert all(e is None for _, e in (q.get(timeout=20) for _ in range(2)))

    for name in ("server_cert", "server_key", "ca"):
        shutil.copy(getattr(new, name), getattr(live, name))
    asyncio.run_coroutine_threadsafe(_reload(proxy), proxy.loop).result(20)

    fresh = _client(proxy.port, new.ca, new.client_cert, new.client_key)
    _echo(fresh)
    fresh.close()
    stale = _client(proxy.port, old.ca, old.client_cert, old.client_key)  # trusts only the old server cert
    with pytest.raises(InferenceServerException):
        _echo(stale)
    stale.close()
    # The stream opened before the reload still works, on the same connection.
    streaming.async_stream_infer("m", [inp], request_id="after", parameters={"n": 2})
    got = [q.get(timeout=20) for _ in range(2)]
    assert all(e is None for _, e in got)
    assert {r.get_response().id for r, _ in got} == {"after"}
    streaming.stop_stream()
    streaming.close()
    assert proxy.upkeep is not None and proxy.upkeep.tls.counters.reloads == {"ok": 1}
    stop_proxy(proxy)
    recs = [r for p in proxy.writer.paths for r in records(p)] if proxy.writer else []
    stream_calls = {s["call"] for s in of_kind(recs, "call_start") if s["method"].endswith("ModelStreamInfer")}
    assert len(stream_calls) == 1  # one stream across the reload
    (end,) = [e for e in of_kind(recs, "call_end") if e["call"] in stream_calls]
    assert end["cause"] == "ok"


async def _reload(proxy: RecordingProxy) -> None:
    proxy.reload("signal")


def test_certificate_file_change_is_picked_up_without_a_signal(
    tmp_path: Path, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """--tls-watch: replacing the files is enough (cert-manager renews secrets in place)."""
    old, new = make_pki(tmp_path / "old"), make_pki(tmp_path / "new")
    live = server_side_copy(old, tmp_path / "live")
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", tls_cert=live.server_cert, tls_key=live.server_key,
                        tls_watch_s=0.05)  # fmt: skip
    for name in ("server_cert", "server_key"):
        shutil.copy(getattr(new, name), getattr(live, name))
    assert proxy.upkeep is not None
    counters = proxy.upkeep.tls.counters
    deadline = asyncio.run(_wait(lambda: counters.reloads.get("ok", 0) >= 1))
    assert deadline
    c = _client(proxy.port, new.ca)
    _echo(c)
    c.close()


async def _wait(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            return False
        await asyncio.sleep(0.02)
    return True


def test_bad_new_certificate_keeps_the_old_one(
    tmp_path: Path, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """A reload that cannot load the files (half-written key) fails loudly and keeps serving the old certificate."""
    old = make_pki(tmp_path / "old")
    live = server_side_copy(old, tmp_path / "live")
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", tls_cert=live.server_cert, tls_key=live.server_key,
                        tls_watch_s=0)  # fmt: skip
    live.server_key.write_text("-----BEGIN PRIVATE KEY-----\ntruncated\n")
    asyncio.run_coroutine_threadsafe(_reload(proxy), proxy.loop).result(20)
    assert proxy.upkeep is not None and proxy.upkeep.tls.counters.reloads == {"failed": 1}
    c = _client(proxy.port, old.ca)
    _echo(c)
    c.close()


def test_a_client_that_rejects_the_proxys_certificate_is_logged_as_its_rejection(
    tmp_path: Path, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """A client that trusts another CA ends the handshake with an alert: counted, and logged as the client rejecting
    the proxy's certificate (it was logged `tls_client_refused`, the proxy turning the client away: an expired
    --tls-cert read as every client being refused)."""
    import structlog

    pki, other = make_pki(tmp_path / "a"), make_pki(tmp_path / "b")
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", tls_cert=pki.server_cert, tls_key=pki.server_key)
    with structlog.testing.capture_logs() as logs:
        # (OpenSSL's client, as curl's: it sends its alert within the server's handshake)
        ctx = ssl.create_default_context(cafile=other.ca)
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as raw, pytest.raises(ssl.SSLError):
            ctx.wrap_socket(raw, server_hostname="localhost")
        assert proxy.upkeep is not None
        counters = proxy.upkeep.tls.counters
        deadline = time.monotonic() + 30  # (the proxy's loop counts the failed handshake after the client saw it)
        while not any("_ALERT_" in reason for reason in counters.refused):
            assert time.monotonic() < deadline, counters.refused
            time.sleep(0.01)
    events = [e["event"] for e in logs if e["event"].startswith("tls_client")]
    assert events and set(events) == {"tls_client_rejected_handshake"}, logs


def test_an_out_of_date_certificate_is_named_at_start_and_at_reload(
    tmp_path: Path, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """An expired --tls-cert loads without a word from OpenSSL, and then every client refuses the proxy. It is
    named at start (flag, path, when it expired); a reload to a valid one is quiet; a reload to one not yet
    valid is named again."""
    import datetime

    import structlog

    from proxy.ops.tls import out_of_date

    day = datetime.timedelta(days=1)
    expired, fine, early = (make_pki(tmp_path / name, server_shift=shift)
                            for name, shift in (("expired", -2 * day), ("fine", 0 * day), ("early", 2 * day)))  # fmt: skip
    assert (out_of_date(fine.server_cert), out_of_date(fine.client_cert)) == (None, None)
    assert (out_of_date(expired.server_cert) or "").startswith("expired at ")
    assert (out_of_date(early.server_cert) or "").startswith("not valid before ")
    live = server_side_copy(expired, tmp_path / "live")

    def warned(logs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        return [(e["flag"], e["path"], e["problem"].split(" at ")[0].split(" before ")[0])
                for e in logs if e["event"] == "tls_certificate_out_of_date"]  # fmt: skip

    with structlog.testing.capture_logs() as logs:
        proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", tls_cert=live.server_cert, tls_key=live.server_key,
                            tls_watch_s=0)  # fmt: skip
    assert warned(logs) == [("--tls-cert", str(live.server_cert), "expired")], logs
    for pki, want in ((fine, []), (early, [("--tls-cert", str(live.server_cert), "not valid")])):
        for name in ("server_cert", "server_key"):
            shutil.copy(getattr(pki, name), getattr(live, name))
        with structlog.testing.capture_logs() as logs:
            asyncio.run_coroutine_threadsafe(_reload(proxy), proxy.loop).result(20)
        assert warned(logs) == want, logs

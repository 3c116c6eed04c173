"""The admin service over TLS: the relay's client-certificate rule and reloads, and the client commands' flags.

The upstream is the fake Triton over h2c (only the admin port's TLS is tested); certificates come from
a CA generated per test (tests/support/tls.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from proxy.admin.pb import admin_pb2 as pb
from proxy.admin.pb import admin_pb2_grpc as pb_grpc
from proxy.cli import main
from proxy.ops.server import RecordingProxy
from tests.support.tls import make_pki, server_side_copy

TRITON_TAP = Path(sys.executable).parent / "triton-tap"


def _channel(address: str, ca: Path, cert: Path | None = None, key: Path | None = None) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(
        root_certificates=ca.read_bytes(),
        private_key=key.read_bytes() if key is not None else None,
        certificate_chain=cert.read_bytes() if cert is not None else None,
    )
    # A channel of its own (no subchannel shared with an earlier one): each gets its own handshake.
    return grpc.secure_channel(address, creds, options=[("grpc.use_local_subchannel_pool", 1)])


def _status(chan: grpc.Channel) -> Any:
    return pb_grpc.AdminServiceStub(chan).Status(pb.StatusRequest(), timeout=20)  # type: ignore[no-untyped-call]


def _refused(address: str, ca: Path, cert: Path | None = None, key: Path | None = None) -> bool:
    with _channel(address, ca, cert, key) as chan:
        try:
            _status(chan)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e
            return True
    return False


def _admin(p: RecordingProxy) -> str:
    return str(p.admin.address)


def test_with_client_ca_the_admin_port_requires_a_client_certificate(
    tmp_path: Path, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy], capsys: pytest.CaptureFixture[str]
) -> None:
    """--tls-client-ca: the admin port (live request metadata, mark, rotate) refuses a client without a
    certificate or with one another CA signed, as the relay's port does; `status --cert --key` gets in, and
    `status` without them is told the port requires a client certificate."""
    pki, other = make_pki(tmp_path / "a"), make_pki(tmp_path / "b")
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", tls_cert=pki.server_cert, tls_key=pki.server_key,
                        tls_client_ca=pki.ca, admin="127.0.0.1:0")  # fmt: skip
    addr = _admin(proxy)
    assert _refused(addr, pki.ca)
    assert _refused(addr, pki.ca, other.client_cert, other.client_key)
    assert not _refused(addr, pki.ca, pki.client_cert, pki.client_key)

    flags = ["--admin", addr, "--ca", str(pki.ca)]
    assert main(["status", *flags, "--cert", str(pki.client_cert), "--key", str(pki.client_key)]) == 0
    assert "tls listen=on" in capsys.readouterr().out
    assert main(["mark", *flags, "note"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "as a server that requires a client certificate does: give --cert PEM --key PEM" in err, err


async def _reload(proxy: RecordingProxy) -> None:
    proxy.reload("signal")


def test_a_reload_reaches_the_admin_port(
    tmp_path: Path, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """The server certificate and client CA are replaced and reloaded (SIGHUP's path): new admin connections
    get the new certificate and need a client certificate the new CA signed; a connection made before the
    reload goes on with what it shook hands with."""
    import asyncio

    old, new = make_pki(tmp_path / "old"), make_pki(tmp_path / "new")
    live = server_side_copy(old, tmp_path / "live")
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", tls_cert=live.server_cert, tls_key=live.server_key,
                        tls_client_ca=live.ca, tls_watch_s=0, admin="127.0.0.1:0")  # fmt: skip
    addr = _admin(proxy)
    before = _channel(addr, old.ca, old.client_cert, old.client_key)
    try:
        _status(before)
        for name in ("server_cert", "server_key", "ca"):
            shutil.copy(getattr(new, name), getattr(live, name))
        asyncio.run_coroutine_threadsafe(_reload(proxy), proxy.loop).result(20)
        assert proxy.upkeep is not None and proxy.upkeep.tls.counters.reloads == {"ok": 1}

        assert not _refused(addr, new.ca, new.client_cert, new.client_key)
        assert _refused(addr, old.ca, old.client_cert, old.client_key)  # the old server certificate is gone
        assert _refused(addr, new.ca, old.client_cert, old.client_key)  # the old client CA is gone
        _status(before)  # the same connection as before the reload
    finally:
        before.close()


def test_a_reload_that_fails_keeps_the_admin_port_on_its_certificate(
    tmp_path: Path, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """A half-written key fails the reload for the relay and the admin port alike: both keep the old files;
    the next reload, of files that load, reaches the admin port."""
    import asyncio

    old, new = make_pki(tmp_path / "old"), make_pki(tmp_path / "new")
    live = server_side_copy(old, tmp_path / "live")
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", tls_cert=live.server_cert, tls_key=live.server_key,
                        tls_watch_s=0, admin="127.0.0.1:0")  # fmt: skip
    addr = _admin(proxy)
    shutil.copy(new.server_cert, live.server_cert)
    live.server_key.write_text("-----BEGIN PRIVATE KEY-----\ntruncated\n")
    asyncio.run_coroutine_threadsafe(_reload(proxy), proxy.loop).result(20)
    assert proxy.upkeep is not None and proxy.upkeep.tls.counters.reloads == {"failed": 1}
    assert not _refused(addr, old.ca)
    shutil.copy(new.server_key, live.server_key)
    asyncio.run_coroutine_threadsafe(_reload(proxy), proxy.loop).result(20)
    assert proxy.upkeep.tls.counters.reloads == {"failed": 1, "ok": 1}
    assert _refused(addr, old.ca) and not _refused(addr, new.ca)


def _tap(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"} | {"PYTHONWARNINGS": "ignore"}
    return subprocess.run([str(TRITON_TAP), *args], capture_output=True, text=True, timeout=120, check=False, env=env)


def test_admin_command_errors_over_tls_are_one_line(
    tmp_path: Path, fake_upstream: Any, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """Against a TLS admin port: without --ca the error says the port speaks TLS (grpc says only "Socket
    closed"); with a --ca that did not sign its certificate, grpc's C core adds no log line of its own."""
    pki = make_pki(tmp_path / "a")
    proxy = start_proxy(f"127.0.0.1:{fake_upstream.port}", tls_cert=pki.server_cert, tls_key=pki.server_key,
                        admin="127.0.0.1:0")  # fmt: skip
    addr = _admin(proxy)
    for extra, says in (([], "the port speaks TLS: give --ca PEM"),
                        (["--ca", str(pki.other_ca)], "CERTIFICATE_VERIFY_FAILED")):  # fmt: skip
        proc = _tap("status", "--admin", addr, *extra)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1 and says in lines[0], proc.stderr
    assert _tap("status", "--admin", addr, "--ca", str(pki.ca), "--server-name", "localhost").returncode == 0

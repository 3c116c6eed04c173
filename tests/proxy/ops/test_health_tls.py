"""`triton-tap health` against a proxy that serves TLS (`record --tls-cert`, with and without
`--tls-client-ca`): `--ca`/`--server-name`/`--cert`/`--key`, and a plaintext check that a TLS port closes.

The proxy is the real one (in process) and `health` a process of the console script. Its upstream is a
scripted gRPC server that answers `grpc.health.v1.Health/Check` with SERVING: what is tested is the
client's handshake with the proxy, where Triton's only part is that answer (the fake Triton has no health
service, and the packaged tritonserver would add its start-up time and nothing more).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from proxy.ops.server import RecordingProxy
from tests.support.loop_thread import BackgroundLoop
from tests.support.tls import Pki, make_pki

TRITON_TAP = Path(sys.executable).parent / "triton-tap"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A fresh CA with server (localhost, 127.0.0.1, triton.staging.test) and client certificates."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def serving(bg: BackgroundLoop) -> Iterator[str]:
    """An h2c upstream whose health service answers SERVING; its address."""

    async def check(request: bytes, context: Any) -> bytes:
        return b"\x08\x01"  # HealthCheckResponse.status = SERVING

    async def start() -> tuple[Any, int]:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(check)}),))  # fmt: skip
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    server, port = bg.run(start())
    yield f"127.0.0.1:{port}"
    bg.run(server.stop(None))


def _health(proxy: RecordingProxy, *flags: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRITON_TAP), "health", "--target", f"127.0.0.1:{proxy.port}", *map(str, flags)],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


def _refused(proxy: RecordingProxy) -> dict[str, int]:
    assert proxy.upkeep is not None
    return dict(proxy.upkeep.tls.counters.refused)


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("triton-tap: error: health check via 127.0.0.1:"), line
    return line


def test_health_checks_a_tls_proxy_over_tls(pki: Pki, serving: str, start_proxy: Callable[..., RecordingProxy]) -> None:
    """--ca (with --server-name naming another name of the certificate, and with --wait): SERVING, exit 0,
    and not one handshake refused by the proxy."""
    proxy = start_proxy(serving, tls_cert=pki.server_cert, tls_key=pki.server_key)
    for flags in (["--ca", pki.ca], ["--ca", pki.ca, "--server-name", "triton.staging.test"],
                  ["--ca", pki.ca, "--wait", "10"]):  # fmt: skip
        proc = _health(proxy, *flags)
        assert (proc.returncode, proc.stderr) == (0, "SERVING\n"), flags
    assert _refused(proxy) == {}


def test_plaintext_health_of_a_tls_proxy_says_tls_is_why(pki: Pki, serving: str,
                                                         start_proxy: Callable[..., RecordingProxy]) -> None:  # fmt: skip
    """Without --ca the TLS port closes each try: the one line says the port speaks TLS and names --ca, once
    and with --wait (where grpc alone says only "Socket closed")."""
    proxy = start_proxy(serving, tls_cert=pki.server_cert, tls_key=pki.server_key)
    once = _one_error_line(_health(proxy))
    waited = _one_error_line(_health(proxy, "--wait", "1"))
    for line in (once, waited):
        assert "failed: UNAVAILABLE: " in line and "Socket closed" in line, line
        assert "; the port speaks TLS: give --ca PEM (the CA that signed its certificate)" in line, line
        assert "--cert" not in line  # this proxy asks for no client certificate
    assert waited.endswith(" tries)") and "; still so after waiting 1 s (" in waited


def test_health_of_a_mutual_tls_proxy_presents_the_client_certificate(
    pki: Pki, serving: str, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """With --tls-client-ca: --ca --cert --key is SERVING; --ca alone, or no TLS at all, fails in one line
    that names --cert/--key."""
    proxy = start_proxy(serving, tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=pki.ca)
    proc = _health(proxy, "--ca", pki.ca, "--cert", pki.client_cert, "--key", pki.client_key)
    assert (proc.returncode, proc.stderr) == (0, "SERVING\n")
    no_cert = _one_error_line(_health(proxy, "--ca", pki.ca))
    assert no_cert.endswith("; the port closed the connection after the TLS handshake, as a server that requires "
                            "a client certificate does: give --cert PEM --key PEM"), no_cert  # fmt: skip
    plain = _one_error_line(_health(proxy))
    assert "; the port speaks TLS: give --ca PEM (the CA that signed its certificate), and --cert/--key: " in plain


def test_a_certificate_that_does_not_verify_fails_in_one_line(
    pki: Pki, serving: str, start_proxy: Callable[..., RecordingProxy]
) -> None:
    """Another CA, or a name the certificate does not hold: exit 1, the handshake's reason, no hint to add --ca."""
    proxy = start_proxy(serving, tls_cert=pki.server_cert, tls_key=pki.server_key)
    other = _one_error_line(_health(proxy, "--ca", pki.other_ca))
    assert "CERTIFICATE_VERIFY_FAILED" in other and "give --ca" not in other, other
    name = _one_error_line(_health(proxy, "--ca", pki.ca, "--server-name", "elsewhere.test"))
    assert "Hostname Verification Check failed" in name and "give --ca" not in name, name


@pytest.mark.parametrize(("flags", "error"), [
    (["--cert", "{client_cert}", "--key", "{client_key}"], "--cert needs --ca (TLS is on with --ca)"),
    (["--server-name", "triton.staging.test"], "--server-name needs --ca (TLS is on with --ca)"),
    (["--ca", "{ca}", "--cert", "{client_cert}"],
     "--cert and --key go together (the client certificate and its private key)"),
    (["--ca", "{client_key}"], "--ca '{client_key}' holds no PEM certificate: "),
    (["--ca", "{ca}", "--cert", "{client_cert}", "--key", "{server_key}"],
     "--cert '{client_cert}' with --key '{server_key}' does not load: "),
    (["--ca", "{ca}", "--cert", "{missing}", "--key", "{client_key}"], "cannot read --cert '{missing}': "),
])  # fmt: skip
def test_bad_tls_flags_are_exit_2_in_one_line(pki: Pki, tmp_path: Path, flags: list[str], error: str) -> None:
    """A TLS flag that cannot work is said before any connection: exit 2, one line (nothing listens at the target)."""
    names = {n: str(getattr(pki, n)) for n in ("ca", "client_cert", "client_key", "server_key")}
    names["missing"] = str(tmp_path / "missing.pem")
    proc = subprocess.run([str(TRITON_TAP), "health", "--target", "127.0.0.1:1", *(f.format(**names) for f in flags)],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("triton-tap: error: " + error.format(**names)), line


@pytest.mark.parametrize(
    ("details", "closed"),
    [
        ("failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Socket closed", True),
        # the same refusal when the server's close came with the client's bytes unread (CI's 3.11 pure tier once)
        ("failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: recvmsg:Connection reset "
         "by peer (104)", True),
        ("failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Connection refused", False),
    ],
)  # fmt: skip
def test_a_close_and_a_reset_after_the_connection_are_both_told_as_closed(details: str, closed: bool) -> None:
    """Which grpc details send health and check-cancel to ask whether TLS is why (the hint was missing on a reset)."""
    from proxy.admin.connect import closed_on_us

    assert closed_on_us(details) is closed

"""`triton-tap check-cancel` against a real tritonserver that serves gRPC over mutual TLS
(`--grpc-use-ssl-mutual`): `--ca`/`--server-name`/`--cert`/`--key`, directly and `--through-proxy`
(the in-process proxy then speaks TLS to Triton), and what a run without them says.

`steps_serial` honours cancellation (tests/e2e/test_check_cancel_e2e.py has the protocol's cases on a
plaintext Triton); here only the executing case runs, the connection being what is tested.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.lab.tritonserver import TritonServer, model_repository
from tests.support.tls import Pki, make_pki
from tests.support.triton_server import started

pytestmark = pytest.mark.timeout(400)

FAST = ["--cases", "executing", "--length", "400", "--window", "4", "--allowance-ms", "1000"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A fresh CA; the server certificate names localhost, 127.0.0.1 and triton.staging.test."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def mtls_triton(pki: Pki, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """A tritonserver serving steps_serial over gRPC with mutual TLS (its HTTP port, used for readiness, stays plain)."""
    repo = tmp_path_factory.mktemp("repo_tls")
    shutil.copytree(model_repository() / "steps_serial", repo / "steps_serial", symlinks=False)
    server = started(TritonServer(repo, workdir=tmp_path_factory.mktemp("triton_tls"), extra_args=(
        "--grpc-use-ssl=true", "--grpc-use-ssl-mutual=true", f"--grpc-server-cert={pki.server_cert}",
        f"--grpc-server-key={pki.server_key}", f"--grpc-root-cert={pki.ca}")), request)  # fmt: skip
    yield server
    server.stop()


def _cli(*args: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from proxy.cli import main; sys.exit(main(sys.argv[1:]))", *map(str, args)],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip


def _run(target: str, *flags: Any) -> tuple[int, dict[str, Any]]:
    proc = _cli("check-cancel", "--target", target, "--model", "steps_serial", *FAST, "--json", *flags)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_check_cancel_runs_against_a_mutual_tls_triton(mtls_triton: TritonServer, pki: Pki, tmp_path: Path) -> None:
    """With the client certificate, directly (the name expected: another name of the certificate) and through
    the proxy: the run completes, the work stopped, exit 0; the proxy's capture is there."""
    client = ["--ca", pki.ca, "--cert", pki.client_cert, "--key", pki.client_key]
    code, doc = _run(mtls_triton.grpc_url, *client, "--server-name", "triton.staging.test")
    assert code == 0, doc
    assert (doc["server_version"], doc["via"], doc["exit_code"]) == ("2.51.0", "direct", 0)
    assert [(c["case"], c["work_stopped"], c["neighbour_ok"]) for c in doc["cases"]] == [("executing", True, True)]
    code, doc = _run(mtls_triton.grpc_url, *client, "--through-proxy", "--capture-dir", tmp_path)
    assert code == 0, doc
    assert (doc["via"], [(c["case"], c["work_stopped"]) for c in doc["cases"]]) == ("proxy", [("executing", True)])
    assert any("cancel forwarded upstream" in e for e in doc["cases"][0]["evidence"])
    assert list(tmp_path.glob("capture-*"))


def test_check_cancel_without_the_tls_flags_says_which_is_missing(mtls_triton: TritonServer, pki: Pki) -> None:
    """No --ca, or --ca without the client certificate: exit 1 in one line that names what to add (tritonclient
    alone says only "Socket closed"); a wrong --server-name is the certificate check's own reason."""
    target = mtls_triton.grpc_url
    for flags, hint in (([], "; the port speaks TLS: give --ca PEM (the CA that signed its certificate), and "
                             "--cert/--key: it closed the connection after the handshake"),
                        (["--ca", pki.ca], "; the port closed the connection after the TLS handshake, as a server "
                                           "that requires a client certificate does: give --cert PEM --key PEM")):  # fmt: skip
        proc = _cli("check-cancel", "--target", target, "--model", "steps_serial", *flags)
        assert proc.returncode == 1, proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"triton-tap: error: Triton at {target} is unreachable: ") and hint in line, line
    proc = _cli("check-cancel", "--target", target, "--model", "steps_serial", "--ca", pki.ca, "--cert",
                pki.client_cert, "--key", pki.client_key, "--server-name", "elsewhere.test")  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "is unreachable: " in line and "Hostname Verification Check failed" in line and "give --" not in line, line

"""`triton-tap lab triton`'s flags: Triton's usual ports by default, and what is wrong with them said in one line
(exit 2) before any server starts. (Starting, serving and stopping: tests/e2e/test_lab_triton_e2e.py.)"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from proxy.cli import build_parser, main
from proxy.lab.tritonserver import model_repository


def test_the_ports_default_to_tritons_own_and_the_models_to_ours() -> None:
    args = build_parser().parse_args(["lab", "triton"])
    assert (args.grpc_port, args.http_port, args.metrics_port) == (8001, 8000, 8002)
    assert args.models is None  # resolved when it runs: proxy/lab/models
    assert (model_repository() / "echo" / "config.pbtxt").is_file()


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    try:
        code = main(["lab", "triton", *argv])
    except SystemExit as e:  # argparse's own refusal of a flag's value
        code = e.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_a_busy_port_is_named_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        err = _error(capsys, "--grpc-port", "0", "--http-port", str(port), "--metrics-port", "0")
    # One wording for a busy port across commands (replay.hostport.cannot_listen), the reason said once.
    assert err.endswith(f"--http-port {port}: cannot listen on 127.0.0.1:{port}: address already in use\n"), err


def test_a_port_whose_last_server_s_connections_wait_out_time_wait_is_free() -> None:
    """A Triton killed for a restart drill leaves its closed connections in TIME_WAIT on its port; tritonserver
    binds it again (SO_REUSEADDR) and so does the check. (It said "address already in use" for about 60 s.)"""
    from proxy.lab.command import _check_ports

    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (as tritonserver's servers bind)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            conn, _ = server.accept()
            conn.close()  # the server's side closes first: its end of the connection waits in TIME_WAIT
            assert client.recv(1) == b""
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # (what the check did: refused while the TIME_WAIT lasts)
    _check_ports({"grpc": port, "http": 0, "metrics": 0})


def test_one_port_twice_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(capsys, "--grpc-port", "0", "--http-port", "18123", "--metrics-port", "18123")
    assert "--http-port and --metrics-port are both 18123" in err, err


@pytest.mark.parametrize("port", ["-1", "65536", "http"])
def test_a_port_is_a_number_0_to_65535(capsys: pytest.CaptureFixture[str], port: str) -> None:
    err = _error(capsys, "--grpc-port", port)
    assert "--grpc-port" in err, err


def test_models_must_be_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = _error(capsys, "--grpc-port", "0", "--http-port", "0", "--metrics-port", "0",
                 "--models", str(tmp_path / "missing"))  # fmt: skip
    assert "--models" in err and "is not a directory" in err, err

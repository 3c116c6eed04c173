"""``record``'s HTTP pair: which ports are relayed, and the one-line refusals (nothing is bound)."""

from __future__ import annotations

import argparse
import re

import pytest

from proxy.cli import _grpc_pair, add_record_arguments, run_record
from proxy.ops.server import ProxyConfig, RecordingProxy
from replay.errors import UserError


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_record_arguments(p)
    return p.parse_args(list(argv))


def test_grpc_pair_as_before_when_only_grpc() -> None:
    assert _grpc_pair(_args()) == ("127.0.0.1:8011", "127.0.0.1:8001")
    assert _grpc_pair(_args("--listen", "127.0.0.1:9011")) == ("127.0.0.1:9011", "127.0.0.1:8001")


def test_http_pair_alone_relays_no_grpc() -> None:
    http = ("--http-listen", "127.0.0.1:9000", "--http-upstream", "127.0.0.1:8000")
    assert _grpc_pair(_args(*http)) == ("", "")
    assert _grpc_pair(_args(*http, "--upstream", "triton:8001")) == ("127.0.0.1:8011", "triton:8001")


def test_half_an_http_pair_is_refused() -> None:
    with pytest.raises(UserError, match="go together"):
        _grpc_pair(_args("--http-listen", "127.0.0.1:9000"))


def test_workers_refuse_http_in_one_line() -> None:
    args = _args("--http-listen", "127.0.0.1:9000", "--http-upstream", "127.0.0.1:8000", "--workers", "2")
    with pytest.raises(UserError, match="--workers relays gRPC only"):
        run_record(args)


def test_proxy_config_refusals() -> None:
    with pytest.raises(UserError, match="nothing to relay"):
        RecordingProxy(ProxyConfig(listen="", upstream=""))
    with pytest.raises(UserError, match="use the same port"):
        RecordingProxy(ProxyConfig(listen="127.0.0.1:9000", http_listen="127.0.0.1:9000", http_upstream="h:8000"))
    for admin in ("127.0.0.1:9000", "127.0.0.1:9002", "127.0.0.1:9003"):
        # The admin service's port is no other server's: it bound the relay's first and took its clients.
        with pytest.raises(UserError, match=re.escape(f"and --admin {admin} use the same port")):
            RecordingProxy(ProxyConfig(listen="127.0.0.1:9000", http_listen="127.0.0.1:9002", http_upstream="h:8000",
                                       metrics="127.0.0.1:9003", admin=admin))  # fmt: skip
    with pytest.raises(UserError, match=re.escape("--metrics 127.0.0.1:9002 and --admin 127.0.0.1:9002 use the same port")):
        RecordingProxy(ProxyConfig(listen="127.0.0.1:9000", metrics="127.0.0.1:9002", admin="127.0.0.1:9002"))
    RecordingProxy(ProxyConfig(listen="127.0.0.1:0", upstream="h:1", metrics="127.0.0.1:0", admin="127.0.0.1:0"))
    with pytest.raises(UserError, match="go together"):
        RecordingProxy(ProxyConfig(http_listen="127.0.0.1:9001"))
    only_http = RecordingProxy(ProxyConfig(listen="", upstream="", http_listen="127.0.0.1:0", http_upstream="h:8000"))
    assert only_http.grpc_addrs is None and only_http.http_addrs == (("127.0.0.1", 0), ("h", 8000))

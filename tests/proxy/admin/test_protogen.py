"""The committed generated code is what grpcio-tools makes of protos/ (the CI check)."""

from __future__ import annotations

from proxy.admin import protogen


def test_regenerating_gives_no_diff() -> None:
    """python -m proxy.admin.protogen --check: the committed proxy/admin/pb/ matches protos/ (version stamps aside)."""
    assert protogen.main(["--check"]) == 0


def test_the_check_sees_a_changed_proto() -> None:
    """A proto edit that was not regenerated is caught."""
    files = protogen.generate()
    committed = (protogen.OUT / "admin_pb2.pyi").read_text()
    assert protogen.same(committed, files["admin_pb2.pyi"])
    assert not protogen.same(committed, files["admin_pb2.pyi"].replace("note", "text"))

"""Compile protos/triton_tap/admin/v1/admin.proto into proxy/admin/pb/ with grpcio-tools.

The generated modules are committed (an editable install needs no build step, and a reviewer sees
what changed); ``python -m proxy.admin.protogen --check`` (and a test) fails when regenerating
would change them. protoc names the generated module after the proto's path
(``triton_tap.admin.v1.admin_pb2``); the one import line of the gRPC module is rewritten to our
package, nothing else is touched.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos"
PROTO = "triton_tap/admin/v1/admin.proto"
OUT = Path(__file__).resolve().parent / "pb"
_IMPORT = "from triton_tap.admin.v1 import admin_pb2 as"
_OURS = "from proxy.admin.pb import admin_pb2 as"
FILES = ("admin_pb2.py", "admin_pb2.pyi", "admin_pb2_grpc.py")


def generate() -> dict[str, str]:
    """The generated files' text, by name."""
    from grpc_tools import protoc  # build-time tool: imported only here

    include = str(Path(protoc.__file__).parent / "_proto")
    with tempfile.TemporaryDirectory() as tmp:
        args = ["protoc", f"-I{PROTOS}", f"-I{include}", f"--python_out={tmp}", f"--pyi_out={tmp}",
                f"--grpc_python_out={tmp}", str(PROTOS / PROTO)]  # fmt: skip
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {PROTO}")
        out = {name: (Path(tmp) / "triton_tap/admin/v1" / name).read_text() for name in FILES}
    out["admin_pb2_grpc.py"] = out["admin_pb2_grpc.py"].replace(_IMPORT, _OURS)
    return out


_VERSIONED = re.compile(r"^(# Protobuf Python Version:.*|GRPC_GENERATED_VERSION = .*|\s*\d+,\s*$)", re.M)


def same(a: str, b: str) -> bool:
    """Equal but for the grpcio-tools/protobuf version stamps (another tools release changes only those)."""
    return _VERSIONED.sub("", a) == _VERSIONED.sub("", b)


def main(argv: list[str]) -> int:
    """Write the generated files, or with ``--check`` exit 1 when they differ from the committed ones."""
    files = generate()
    stale = [n for n, text in files.items() if not (OUT / n).exists() or not same((OUT / n).read_text(), text)]
    if "--check" in argv:
        for n in stale:
            print(f"proxy/admin/pb/{n} is stale: run python -m proxy.admin.protogen", file=sys.stderr)
        return 1 if stale else 0
    for n in stale:
        (OUT / n).write_text(files[n])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A measurement prototype, not a capture format: ``--payload full`` with the message bytes in a raw side file.

    python -m bench --scenarios large,streaming --paths proxy-meta,proxy-full \\
        --extra-proxy sidefile=bench.payload_sidefile

Runs ``python -m proxy`` with ``--payload full`` (whatever ``--payload`` it is given: ``--extra-proxy``
passes ``meta``), but where the proxy base64-encodes a message's bytes into the record's ``payload``
field, this writes the raw bytes to ``<capture-dir>/payload-prototype.bin`` instead and stores a short
reference (``@offset+length``) in ``payload``. Hashing (``payload_sha256``), labelling, the JSONL
writer and everything else are the real proxy's. So the difference to ``proxy-full`` is exactly
what base64 inside the JSON line costs (encode, str, orjson, compressing base64 text) against one
raw write, measured end to end in the same run (bench/README.md, "--payload full").

The write happens on the event loop (the real design would hand the bytes to the writer thread
with the record), so this over-states the side file's cost on the data plane, if anything. The
captures it leaves are not readable by ``replay`` (the references mean nothing to it): measurement only.
"""

from __future__ import annotations

import base64
import os
import sys
import types
from typing import Any


def _capture_dir(argv: list[str]) -> str:
    for i, a in enumerate(argv):
        if a == "--capture-dir" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--capture-dir="):
            return a.split("=", 1)[1]
    return "captures"


class _SideFile:
    """Stands in for the ``base64`` module inside :mod:`proxy.relay.messages`."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self._fd = os.open(os.path.join(directory, "payload-prototype.bin"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._offset = 0

    def b64encode(self, data: Any) -> bytes:
        at = self._offset
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._offset += len(data)
        return b"@%d+%d" % (at, len(data))

    def b64decode(self, data: Any) -> bytes:  # anything else in that module that decodes
        return base64.b64decode(data)


def main() -> int:
    argv = sys.argv[1:]
    if "--payload" in argv:
        argv[argv.index("--payload") + 1] = "full"
    else:
        argv += ["--payload", "full"]
    import proxy.relay.messages as messages
    from proxy.cli import record_main

    shim = _SideFile(_capture_dir(argv))
    messages.base64 = types.SimpleNamespace(b64encode=shim.b64encode, b64decode=shim.b64decode)  # type: ignore[assignment,attr-defined]
    return record_main(argv)


if __name__ == "__main__":
    sys.exit(main())

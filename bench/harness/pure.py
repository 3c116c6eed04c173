"""``python -m bench.harness.pure ARGS``: ``python -m proxy ARGS`` without any compiled module (``TRITON_TAP_PURE=1``).

For A/B runs of the compiled fast paths against their Python versions in one interleaved benchmark:
``python -m bench --extra-proxy pure=bench.harness.pure``. The Python paths are the code as it was before the
compiled ones (plus a call or two: ``python -m bench.icount`` counts 111.7k instructions per streamed
response here against 111.0k before them, 2026-12-02).
"""

from __future__ import annotations

import runpy

if __name__ == "__main__":
    from replay import compiled

    compiled.turn_off()  # before anything loads a compiled module
    runpy.run_module("proxy", run_name="__main__", alter_sys=True)

"""triton-tap's live I/O shell: the HTTP/2 relay, the capture writer, the CLI."""

from __future__ import annotations

# First: which of our modules run compiled is decided before any of them is imported (replay/compiled.py).
import replay.compiled  # noqa: F401

__version__ = "0.1.0"

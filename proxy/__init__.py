"""triton-tap's live I/O shell: the HTTP/2 relay, the capture writer, the CLI."""

from __future__ import annotations

__version__ = "0.1.0"

"""``python -m proxy``: run the recording proxy (same flags as ``triton-tap record``)."""

from __future__ import annotations

import sys

from proxy.cli import record_main

sys.exit(record_main())

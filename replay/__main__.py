"""``python -m replay``: the offline commands (``check``)."""

from __future__ import annotations

import sys

from replay.cli.main import main

if __name__ == "__main__":
    sys.exit(main())

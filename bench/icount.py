"""``python -m bench.icount``: instruction counts, :mod:`bench.probes.icount` (see bench/README.md)."""

import sys

if __name__ == "__main__":
    from bench.probes.icount import main

    sys.exit(main())

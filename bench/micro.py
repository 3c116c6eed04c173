"""``python -m bench.micro``: the in-process relay probe, :mod:`bench.probes.micro` (see bench/README.md)."""

import sys

if __name__ == "__main__":
    from bench.probes.micro import main

    sys.exit(main())

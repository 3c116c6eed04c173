"""``python -m bench``: the benchmark harness (see bench/README.md)."""

import sys

from bench.harness.run import main

sys.exit(main())

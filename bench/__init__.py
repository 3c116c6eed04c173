"""The benchmark harness: ``python -m bench`` (see bench/README.md); probes in bench.probes."""

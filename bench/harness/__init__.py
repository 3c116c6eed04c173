"""The benchmark harness: ``python -m bench`` runs every path (direct, the proxy, the floor, nginx) through
the same scenarios in interleaved rounds and writes one results file (see bench/README.md)."""

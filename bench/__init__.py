"""triton-tap benchmark harness: ``python -m bench`` (see bench/README.md)."""

"""Probes: narrower measurements than a full run, each its own command (see bench/README.md): the relay
in process (micro), instruction counts (icount), native and Python profiles of the proxy, perf_analyzer
against the real tritonserver, and the offline tools' speed and memory."""

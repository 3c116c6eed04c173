"""The in-memory asyncio transport that drives a relay connection without sockets, for the relay's pure tests.

Defined once in :mod:`bench.probes.transport` (``python -m bench.micro`` needs it too, and bench must
not import tests).
"""

from bench.probes.transport import MemoryTransport

__all__ = ["MemoryTransport"]

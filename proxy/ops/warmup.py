"""Start-up work the first calls would otherwise pay for, done before the proxy serves (``triton-tap record``).

What a fresh proxy still did lazily once traffic came, measured with a real tritonserver behind it (the
first and later unary calls timed through fresh proxies by ``python -m proxy.lab.firstcall``,
``-X importtime`` and cProfile around them; docs/benchmarks.md has the figures):

- no module is imported by the first call (every import happens at start-up);
- the capture writer's thread was started by the first batch, on the event loop's thread: a
  ``Thread.start()`` waits until the new thread runs (0.2 to 1.7 ms measured, mid-traffic). The
  writer now starts it when it opens the capture (:meth:`proxy.capture.writer.CaptureWriter.open`);
- the objects start-up leaves behind (imports, the parser, the proxy's own: ~55,000) were traversed
  by the first collections under traffic: a 1.1 to 1.4 ms generation-1 collection within the first
  300 unary calls, and later a full collection over the whole start-up heap (12 ms measured during
  start-up). :func:`warm_up` collects once (~18 ms, before the proxy serves) and then freezes what is
  alive, so later collections see only what traffic allocates: none came in 3,000 unary calls.

structlog's loggers bind on first use (a few microseconds each once the ``recording`` line has run its
processors): not worth doing ahead.
"""

from __future__ import annotations

import gc


def warm_up() -> int:
    """Collect once, then move every object alive out of the collector's generations (``gc.freeze``):
    they are start-up's (modules, the parser, the proxy's own objects), live as long as the process, and
    no later collection traverses them again. Returns how many objects are frozen.

    Only for a process that is the proxy (the CLI's :func:`proxy.ops.server.run`): an in-process proxy
    (tests, ``replay send``, ``check-cancel --through-proxy``) shares a heap that is not its to freeze.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()

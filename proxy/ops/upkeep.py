"""What keeps a long-running proxy healthy: SIGHUP, certificate file watch, and their metrics.

One entry point, :meth:`Upkeep.reload`, is what SIGHUP calls: the capture writer closes its file
after the records emitted so far and goes on in a new one (the request waits in the writer's queue,
as the admin service's Rotate does), and the TLS files are read again for new connections. Separately, a watch task re-reads the TLS files when they change
on disk (cert-manager renewing a Kubernetes secret in place), without touching the capture.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from proxy.capture.writer import CaptureWriter
from proxy.ops.tls import ReloadableTls

log = structlog.get_logger("triton_tap.proxy")


class Upkeep:
    """SIGHUP handling and the certificate watch of one :class:`~proxy.ops.server.RecordingProxy`."""

    def __init__(self, writer: CaptureWriter, tls: ReloadableTls, watch_s: float) -> None:
        self.writer = writer
        self.tls = tls
        self.watch_s = watch_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start watching the certificate files (when there are any and ``watch_s`` > 0)."""
        if self.watch_s > 0 and (self.tls.base is not None or self.tls.upstream is not None):
            self._task = asyncio.get_running_loop().create_task(self._watch(), name="triton-tap-tls-watch")

    def reload(self, why: str = "signal") -> None:
        """SIGHUP: reopen the capture file and reload the certificates (open calls are not touched)."""
        log.info("reload", why=why)
        self.writer.request_reopen(why)
        self.tls.reload(why)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.watch_s)
            if self.tls.changed():
                self.tls.reload("file_changed")

    async def close(self) -> None:
        """Stop the watch task."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def collect(self) -> Iterator[Any]:
        """Metric families of the capture's housekeeping and of TLS (read at scrape time, no locks)."""
        ops = self.writer.ops
        yield CounterMetricFamily("triton_tap_capture_files_removed", "capture files deleted by --max-total-mb retention",
                                  value=ops.files_removed)  # fmt: skip
        yield CounterMetricFamily("triton_tap_capture_bytes_removed", "bytes of capture files deleted by retention",
                                  value=ops.bytes_removed)  # fmt: skip
        yield GaugeMetricFamily("triton_tap_capture_dir_bytes", "bytes of capture files in the capture directory "
                                "(at the last retention scan; 0 without --max-total-mb)", value=ops.dir_bytes)  # fmt: skip
        yield GaugeMetricFamily("triton_tap_capture_paused", "1 while records are not written because free space is "
                                "under --min-free-mb (forwarding goes on)", value=int(ops.paused))  # fmt: skip
        yield CounterMetricFamily("triton_tap_capture_pauses", "times writing paused for low free space", value=ops.pauses)
        yield CounterMetricFamily("triton_tap_capture_records_not_written_low_disk", "records not written while "
                                  "paused for low free space (part of records_dropped)", value=ops.low_disk_dropped)  # fmt: skip
        reopens = CounterMetricFamily("triton_tap_capture_reopens", "capture file reopened: signal (SIGHUP), "
                                      "unlinked or moved (the live file was deleted or renamed)", labels=["reason"])  # fmt: skip
        for reason, n in sorted(dict(ops.reopens).items()):
            reopens.add_metric([reason], n)
        yield reopens
        c = self.tls.counters
        refused = CounterMetricFamily("triton_tap_tls_handshakes_refused", "client TLS handshakes that failed "
                                      "(no or untrusted client certificate, bad TLS), by OpenSSL reason", labels=["reason"])  # fmt: skip
        for reason, n in sorted(dict(c.refused).items()):
            refused.add_metric([reason], n)
        yield refused
        reloads = CounterMetricFamily("triton_tap_tls_reloads", "certificate reloads (SIGHUP or file change)",
                                      labels=["result"])  # fmt: skip
        for result, n in sorted(dict(c.reloads).items()):
            reloads.add_metric([result], n)
        yield reloads

"""The standard `process_*` metrics on the agent's /metrics, as every Prometheus exporter serves them.

CPU seconds, resident and virtual memory, open and maximum file descriptors and the start time are what an
operator graphs first when an exporter misbehaves (a leak shows as a rising `process_resident_memory_bytes` or
`process_open_fds`), and what the usual exporter dashboards query by name. prometheus_client's ProcessCollector
reads them from /proc/<pid>/stat, /proc/<pid>/status, /proc/<pid>/limits and /proc/<pid>/fd (client_python's
process_collector.py); the root is a parameter so a test can point it at a fixture tree. They describe this
process, not the node, so they are rendered per scrape beside the cached snapshot body, and a platform without
/proc simply has none (the collector yields nothing rather than failing the scrape).
"""

from __future__ import annotations

import logging
import struct
import zlib

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_latest_openmetrics

log = logging.getLogger(__name__)

_OPENMETRICS_EOF = b"# EOF\n"
_GZIP_HEADER = 10  # gzip.compress(…, mtime=0): magic, method, flags 0, mtime, xfl, os; no file name (RFC 1952 §2.3)
_GZIP_TRAILER = 8  # CRC32 and ISIZE, little-endian


def prepend_to_gzip(head: bytes, *, gzipped_tail: bytes, plain_tail: bytes, level: int = 1) -> bytes:
    """One gzip member holding ``head`` then the tail, reusing the tail's cached compressed data.

    ``head`` becomes non-final deflate blocks ended by a sync flush (byte-aligned, RFC 1951 §3.2.3); the tail's own
    deflate data follows unchanged (its back-references never reach before its start), and the trailer gets the
    CRC32 and size of the whole. A single member matters: curl and other zlib users stop after the first member of
    a multi-member stream, where Go's reader (Prometheus) would go on.
    """
    compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    head_blocks = compressor.compress(head) + compressor.flush(zlib.Z_SYNC_FLUSH)
    crc = zlib.crc32(plain_tail, zlib.crc32(head))
    size = (len(head) + len(plain_tail)) & 0xFFFFFFFF
    return (gzipped_tail[:_GZIP_HEADER] + head_blocks + gzipped_tail[_GZIP_HEADER:-_GZIP_TRAILER]
            + struct.pack("<II", crc, size))


class ProcessMetrics:
    """``body(openmetrics=…)``: the process_* families of ``pid`` (default this process) as exposition text."""

    def __init__(self, *, proc_root: str = "/proc", pid: str = "self") -> None:
        self._registry = CollectorRegistry(auto_describe=False)  # our own registry, never the global one
        ProcessCollector(namespace="", pid=lambda: pid, proc=proc_root, registry=self._registry)
        self.failures = 0

    def body(self, *, openmetrics: bool) -> bytes:
        """Text 0.0.4, or OpenMetrics without its `# EOF` (the snapshot body that follows ends the document);
        empty when reading /proc fails, so a broken /proc costs these series, never the scrape."""
        try:
            if openmetrics:
                return generate_latest_openmetrics(self._registry).removesuffix(_OPENMETRICS_EOF)
            return generate_latest(self._registry)
        except Exception:  # a surprise in /proc parsing: log it, serve the node's metrics anyway
            self.failures += 1
            log.exception("reading the process_* metrics failed")
            return b""

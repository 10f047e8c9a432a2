"""Record/replay: the versioned JSON-lines trace of what the agent sampled and attributed, tick by tick.

A trace lets detection and the eviction rules be re-run offline on exactly what a node saw (``gpu-watchdog
replay``), and lets a user hand us a reproduction without giving us their cluster. The format is documented in
docs/trace-format.md; the schema is ``trace.schema.json`` in this package. Writers write version 2 (compact,
:mod:`watchdog.trace.compact`; gzip for ``.gz``), readers read 1 and 2 (:mod:`watchdog.trace.parsing` for speed);
:mod:`watchdog.trace.flight` is the agent's rolling on-disk recorder.
"""

from watchdog.trace.codec import decode_tick, decode_tick_activity, decode_tick_signals, encode_tick
from watchdog.trace.io import (
    READ_VERSIONS,
    TRACE_FORMAT,
    TRACE_VERSION,
    Trace,
    TraceError,
    TraceHeader,
    TraceRecord,
    TraceWriter,
    policy_json,
    read_trace,
    schema,
)
from watchdog.trace.recorder import TraceRecorder

__all__ = [
    "READ_VERSIONS",
    "TRACE_FORMAT",
    "TRACE_VERSION",
    "Trace",
    "TraceError",
    "TraceHeader",
    "TraceRecord",
    "TraceRecorder",
    "TraceWriter",
    "decode_tick",
    "decode_tick_signals",
    "decode_tick_activity",
    "encode_tick",
    "policy_json",
    "read_trace",
    "schema",
]

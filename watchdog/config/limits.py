"""How large a settings or policy file, and each list and map a user fills in it, may be.

Parsing is pure Python (PyYAML, then pydantic) and detection walks some of these maps every tick, so an unbounded
file is unbounded start time, memory and per-tick work for an agent that runs in a DaemonSet under a small memory
limit. Every limit below is far beyond what a real cluster writes by hand or by template, and each keeps parse
time, memory and the per-tick walk small. A file
or a field over its limit is refused with the file or field path and the limit (watchdog.config.loading), at start
and by ``gpu-watchdog check-config``; on reload the last good policy stays.
"""

from __future__ import annotations

MIB = 1024 * 1024

MAX_FILE_BYTES = 1 * MIB
"""Largest settings or policy file read. It is checked before parsing (at most this + 1 bytes are read). Both files
are usually mounted from a ConfigMap, whose data cannot exceed 1 MiB anyway
(kubernetes.io/docs/concepts/configuration/configmap/)."""

MAX_TENANTS = 10_000
"""Entries of ``detection.quota.tenants``. Quota detection checks every configured tenant each tick."""

MAX_SIGNAL_OVERRIDES = 1_000
"""Entries of ``detection.victim_signal_overrides``: each is one PromQL query sent every ``signals.refresh_seconds``
by every agent."""

MAX_PROFILES = 256
"""Entries of a tenant's ``instances`` map: there are a few dozen MIG profiles across all GPU models."""

MAX_NAMESPACES = 1_000
"""Entries of ``action.protected_namespaces`` and ``detection.unauthorized.exempt_namespaces``; each pod is checked
against them."""

MAX_SELECTOR_LABELS = 64
"""Pairs of ``detection.unauthorized.exempt_labels`` (a matchLabels selector)."""

MAX_PATTERNS = 256
"""Entries of a list of fnmatch patterns (``exempt_commands``, ``exempt_cgroups``, ``attribution.resources``);
every process or device is matched against each one."""

MAX_PATTERN_CHARACTERS = 4096
"""Length of one pattern: a cgroup path is a file path, and Linux limits a path to 4096 bytes (PATH_MAX,
linux/limits.h)."""

MAX_XIDS = 1_024
"""Entries of each Xid list of ``detection.xid``: NVIDIA's Xid catalog documents a few hundred."""

MAX_QUERY_CHARACTERS = 4096
"""Length of one victim-signal PromQL query: a hand-written expression is far shorter."""

MAX_PROFILE_CHARACTERS = 63
"""Length of a MIG profile name such as ``1g.10gb+me`` (NVML's names are under 20 characters)."""

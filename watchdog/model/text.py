"""One rule for text the agent repeats from outside: it is cut to a bounded length before it is logged or served.

Configuration is validated when it is loaded (watchdog.config), but a message built from it, or an error text that
quotes it, still travels into log lines, Kubernetes Events, the audit log and ``/api/v1/decisions``. Each of those
repeats it many times (every read, every decision kept), so an overlong value would be multiplied into every one of
them. ``bounded`` is the one place that decides how much of such text is shown; the cut is marked with "…" so a
reader knows there was more.
"""

from __future__ import annotations

MAX_SHOWN_CHARACTERS = 512
"""Longest text from configuration (or built around it) that a log line or an API answer carries: room for a
reason that names a 253-character ConfigMap and its 63-character namespace, far below anything that hurts."""

ELLIPSIS = "…"


def bounded(text: str, limit: int = MAX_SHOWN_CHARACTERS) -> str:
    """``text`` when it has at most ``limit`` characters, else its start and "…", ``limit`` characters in all."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1 character, got {limit}")
    if len(text) <= limit:
        return text
    return text[: limit - len(ELLIPSIS)] + ELLIPSIS

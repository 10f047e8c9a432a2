"""`gpu-watchdog controller`: a leader-elected Deployment that turns Alertmanager alerts into safe evictions.

The webhook parsing (webhook.py) and pod choice (selection.py) are pure; app.py is the HTTP server; ledger.py
records handled firings where every replica sees them; service.py wires the Kubernetes client, Lease, kill switch,
evictor and /metrics. Imported lazily so `webhook` stays usable alone.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Controller", "run_controller"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from watchdog.controller import service

        return getattr(service, name)
    raise AttributeError(name)

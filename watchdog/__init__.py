"""gpu-watchdog: keeps tenants on a shared GPU pool from hurting each other.

The import name is ``watchdog``; it must not share an environment with the unrelated filesystem-events
library of the same name (install gpu-watchdog in its own virtual environment, as ``make`` does).
"""

__version__ = "0.1.0"

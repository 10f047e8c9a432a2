"""The one bounded wait of the test suite, for state that a real server, a subprocess or a task reaches in its own
time (a Lease taken, a watch reconnected, a series scraped). Tests that control time use the test bed's SimClock
instead and never wait; this is for the rest.

The bound only keeps a broken build from hanging: nothing is asserted about how long the wait took.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Awaitable, Callable, Union

DEFAULT_TIMEOUT = 10.0  # seconds; a caller waiting on something slower (Prometheus scrapes, Lease expiry) says so


async def poll(
    check: Callable[[], Any | Awaitable[Any]],
    *,
    what: Union[str, Callable[[], str]],
    timeout: float = DEFAULT_TIMEOUT,
    every: float = 0.01,
) -> Any:
    """Call ``check`` (plain or ``async``) every ``every`` seconds until it returns something truthy, and return that.

    Raises AssertionError naming ``what`` (or what the callable ``what`` says then: state worth showing) when
    ``timeout`` seconds pass first; ``check`` is always asked at least once, and once more at the deadline, so a slow
    loop turn never fails a condition that holds.
    """
    if timeout <= 0 or every <= 0:
        raise ValueError(f"poll: timeout and every must be > 0, got timeout={timeout}, every={every}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        expired = loop.time() >= deadline
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if expired:
            raise AssertionError(f"timed out waiting for {what() if callable(what) else what} ({timeout:g} s)")
        await asyncio.sleep(min(every, max(deadline - loop.time(), 0.0)))

"""The demo's live screen: the terminal table redrawn once a second beside the running agent.

The runner in ``watchdog.testbed`` only runs the world and the agent; what a person watches is the demo's
concern, so the screen lives here and is handed to the runner.
"""

from __future__ import annotations

import asyncio
from typing import IO, Any, Awaitable, Callable

from watchdog.demo.table import render_table


def live_table(out: IO[str]) -> Callable[[Any, str], Awaitable[None]]:
    """A screen for ``run_simulated``: redraws ``agent.cycle.snapshot`` (ANSI home + clear) once a second, under
    the banner (demo.tour: where the agent serves and the commands to try), so the commands stay in view."""

    async def redraw(agent: Any, banner: str = "") -> None:
        while True:
            text = render_table(agent.cycle.snapshot)
            out.write("\x1b[H\x1b[2J" + banner + "\n" + text + "\n")
            out.flush()
            await asyncio.sleep(1.0)

    return redraw

"""A stand-in for an agent's what-if API: the contract the controller's fan-out codes against, without a replay.

`gpu-watchdog whatif` is tested and benchmarked against hundreds of nodes; real agents replaying real recorders
cost seconds each and say nothing about the fan-out itself. This server answers as an agent does (docs/api.md,
"What-if"): a POST with the right bearer token starts a job (202 with its id and href), GETs report ``running``
for ``running_polls`` answers and then the final state with ``result``; a wrong token is 401, a ``refuse`` status
is answered to every POST as the agent words it; ``delay`` holds each POST, ``meter`` counts those in flight.
Nothing is replayed: ``result`` is handed in.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from aiohttp import web


class FakeWhatIfAgent:
    """``async with FakeWhatIfAgent(node="n1", token="t", result={…}) as agent: agent.port``."""

    def __init__(self, *, node: str, token: str, result: dict[str, Any] | None = None, state: str = "done",
                 running_polls: int = 0, refuse: int | None = None, delay: float = 0.0,
                 meter: dict[str, int] | None = None) -> None:
        self.node, self.token, self.result, self.state = node, token, result, state
        self.running_polls, self.refuse, self.delay = running_polls, refuse, delay
        self.meter = meter if meter is not None else {"now": 0, "most": 0}  # POSTs in flight; several agents' share one
        self.posts: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._polls: dict[str, int] = {}
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> int:
        app = web.Application()
        app.router.add_post("/api/v1/whatif", self._post)
        app.router.add_get("/api/v1/whatif/{id}", self._get)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeWhatIfAgent:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    async def _post(self, request: web.Request) -> web.Response:
        self.meter["now"] += 1
        self.meter["most"] = max(self.meter["most"], self.meter["now"])
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
        finally:
            self.meter["now"] -= 1
        if not self._authorized(request):
            return web.json_response({"error": "missing or invalid bearer token"}, status=401)
        self.posts.append(await request.json())
        if self.refuse == 409:
            return web.json_response({"error": "a what-if is already running (id 1)"}, status=409)
        if self.refuse == 503:
            return web.json_response({"error": "the flight recorder is off: set flight_recorder.enabled: true"},
                                     status=503)
        if self.refuse:
            return web.json_response({"error": "refused"}, status=self.refuse)
        job = f"w{next(self._ids)}"
        self._polls[job] = 0
        return web.json_response({"id": job, "state": "running", "href": f"/api/v1/whatif/{job}"}, status=202)

    async def _get(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": "missing or invalid bearer token"}, status=401)
        job = request.match_info["id"]
        if job not in self._polls:
            return web.json_response({"error": f"no what-if {job}"}, status=404)
        self._polls[job] += 1
        running = self._polls[job] <= self.running_polls
        state = "running" if running else self.state
        total = 100
        done = total * self._polls[job] // (self.running_polls + 1) if running else total
        return web.json_response({
            "id": job, "node": self.node, "state": state,
            "progress": {"ticks_done": done, "ticks_total": total, "fraction": done / total},
            "cpu_seconds": 0.0, "window": {}, "segments": 1,
            "result": self.result if state in ("done", "cancelled") else None,
            "error": {"no_data": "no flight-recorder ticks in the window", "failed": "boom"}.get(state),
        })

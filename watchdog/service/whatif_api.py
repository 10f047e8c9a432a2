"""The agent's what-if API: ``POST /api/v1/whatif`` starts a replay of this node's flight recorder under a posted
policy, ``GET /api/v1/whatif/<id>`` reads its progress and result (docs/api.md, docs/flight-recorder.md).

It listens on a port of its own (WhatIfSettings.port), never on the metrics port: /metrics serves Prometheus
from anywhere in the cluster, while this starts minutes of CPU work, so a NetworkPolicy must be able to admit only
the controller here. Every request needs the bearer token; a request that is refused (token, size, JSON, policy,
one already running, no recorder) starts nothing. A posted policy is validated exactly as a policy file is, and a
refusal names the field as the policy-file loader does.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from aiohttp import web

from watchdog.config import ConfigError, Policy, WhatIfSettings
from watchdog.config.loading import validate
from watchdog.publishing.bearer import TokenFile
from watchdog.publishing.listener import LimitedListener
from watchdog.service.whatif_jobs import Busy, WhatIfJobs

log = logging.getLogger(__name__)

PATH = "/api/v1/whatif"
_FIELDS = frozenset({"policy", "since", "until"})
RECORDER_OFF = ("the flight recorder is off on this node, and a what-if replays its segments: set "
                "flight_recorder.enabled: true in the agent's settings (the Helm chart sets it with the value "
                "whatif.enabled=true)")
NO_WORKER = "this agent process cannot run a what-if replay (no replay worker was given to it)"


def _error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


class BadRequest(ValueError):
    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.extra = extra


def parse_time(name: str, value: Any) -> float | None:
    """``since``/``until``: RFC 3339 with an offset, or unix seconds; None when absent."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an integer no float holds
            seconds = float("inf")
        if seconds != seconds or seconds in (float("inf"), float("-inf")):
            raise BadRequest(f"{name}: a finite number of unix seconds is required")
        return seconds
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.upper())  # RFC 3339 §5.6: "t" and "z" may be lower case
        except ValueError:
            raise BadRequest(f"{name}: not an RFC 3339 time or unix seconds: {value!r}") from None
        if parsed.tzinfo is None:
            raise BadRequest(f"{name}: an RFC 3339 time needs its offset (Z or ±hh:mm): {value!r}")
        return parsed.timestamp()
    raise BadRequest(f"{name}: RFC 3339 text or unix seconds is required")


def parse_body(raw: bytes) -> tuple[Policy, float | None, float | None]:
    """The posted policy (validated as a policy file) and window; BadRequest says what is wrong."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the decoder goes
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object with policy (and optionally since, until)")
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise BadRequest(f"unknown field(s): {', '.join(unknown)} (known: policy, since, until)")
    if "policy" not in body:
        raise BadRequest("policy: required (a policy document, as a policy file holds it)")
    document = body["policy"]
    if not isinstance(document, dict):
        problems = [("(document)", "a policy must be a mapping of sections")]
    else:
        try:
            policy = validate(Policy, document, source="policy")
            problems = []
        except ConfigError as exc:
            problems = exc.problems
    if problems:
        text = "; ".join(f"{field}: {reason}" for field, reason in problems)
        raise BadRequest(f"invalid policy: {text}",
                         problems=[{"field": field, "reason": reason} for field, reason in problems])
    since, until = parse_time("since", body.get("since")), parse_time("until", body.get("until"))
    if since is not None and until is not None and since > until:
        raise BadRequest(f"since ({since}) is after until ({until})")
    return policy, since, until


class WhatIfServer:
    """The what-if listener; started by the agent only when ``settings.token_file`` is set."""

    def __init__(self, settings: WhatIfSettings, *, jobs: WhatIfJobs) -> None:
        assert settings.token_file is not None
        self.settings = settings
        self.jobs = jobs
        self._tokens = TokenFile(settings.token_file, what="what-if")
        self._listener: LimitedListener | None = None

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=self.settings.max_body_bytes)
        app.router.add_post(PATH, self.post)
        app.router.add_get(PATH + "/{id}", self.get)
        return app

    async def start(self) -> int:
        listener = LimitedListener(self.make_app(), host=self.settings.listen, port=self.settings.port,
                                   idle_timeout=30.0, max_connections=8, probe_paths=frozenset())
        port = await listener.start()
        self._listener = listener
        log.info("what-if API listening on %s:%d", self.settings.listen, port)
        return port

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.stop()
        await self.jobs.close()

    def _refused(self, request: web.Request) -> web.Response | None:
        if self._tokens.accepts(request.headers.get("Authorization")):
            return None
        refused = _error(401, "missing or invalid bearer token (Authorization: Bearer <the token file's content>)")
        refused.headers["WWW-Authenticate"] = "Bearer"
        return refused

    async def post(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        limit = self.settings.max_body_bytes
        too_big = _error(413, f"the body is over the limit of {limit} bytes (whatif.max_body_bytes)")
        if request.content_length is not None and request.content_length > limit:
            return too_big
        try:  # the whole body, however it is sent (chunked too), bounded by the app's client_max_size
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return too_big
        if self.jobs.directory is None:
            return _error(503, RECORDER_OFF)
        if self.jobs.worker is None:
            return _error(503, NO_WORKER)
        try:
            policy, since, until = parse_body(raw)
        except BadRequest as exc:
            return _error(400, str(exc), **exc.extra)
        try:
            job = self.jobs.start(policy, since=since, until=until)
        except Busy as exc:
            return _error(409, f"a what-if is already running on this node: {exc.job.id}", id=exc.job.id,
                          href=f"{PATH}/{exc.job.id}")
        href = f"{PATH}/{job.id}"
        return web.json_response({"id": job.id, "state": job.state, "href": href}, status=202,
                                 headers={"Location": href})

    async def get(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        job = self.jobs.get(request.match_info["id"])
        if job is None:
            return _error(404, f"no what-if {request.match_info['id']!r} on this node (unknown, or its result "
                               f"expired {self.settings.result_ttl_seconds:g} s after it ended or after "
                               f"{self.settings.max_results} newer ones)")
        return web.json_response(job.document(node=self.jobs.node))

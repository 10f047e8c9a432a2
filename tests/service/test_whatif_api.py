"""The agent's what-if API over real HTTP: a production Agent on the simulated demo node, its flight recorder on,
the API on its own loopback port, and the replay in a real worker process."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.service.conftest import SCENARIOS, Driver
from tests.waiting import poll
from watchdog.cli import main
from watchdog.config import Policy, load_policy
from watchdog.config.loading import ConfigError
from watchdog.evaluation.whatif import run_whatif
from watchdog.kube.client import KubeApi
from watchdog.service.agent import Agent
from watchdog.testbed.world import SimulatedWorld

TOKEN = "s3cret-token"
POSTED = {"action": {"mode": "observe"}}
WAIT = 120.0  # bound on a worker process's start and replay on a loaded machine; nothing asserts how long it took


def gated_whatif(request, progress):
    """The real replay, repeated until the test drops a ``go`` file beside the recorder's directory: a worker that is
    busy for exactly as long as the test needs it running."""
    go = Path(request.directory).parent / "go"
    deadline = time.monotonic() + WAIT
    while True:
        outcome = run_whatif(request, progress)
        if go.exists() or time.monotonic() > deadline:
            return outcome


@pytest.fixture
async def node(tmp_path: Path):
    """``driver = await node(**whatif_settings)``: the demo agent with the recorder (unless ``recorder=False``)."""
    made: list[tuple[SimulatedWorld, Driver]] = []

    async def make(*, recorder: bool = True, worker=run_whatif, **whatif: Any) -> Driver:
        world = SimulatedWorld(SCENARIOS / "demo.yaml", workdir=tmp_path / f"world{len(made)}")
        await world.start()
        token = tmp_path / "token"
        token.write_text(TOKEN + "\n")
        flags = {"sampling": {"events": False},
                 "whatif": {"token_file": str(token), "listen": "127.0.0.1", "port": 0, **whatif}}
        if recorder:
            flags["flight_recorder"] = {"enabled": True, "directory": str(tmp_path / "flight")}
        kube = KubeApi.from_url(world.api.url)
        agent = Agent(world.settings(**flags), nvml=world.nvml, clock=world.clock, kube=kube, whatif_worker=worker)
        driver = Driver(world, agent, kube)
        made.append((world, driver))
        await driver.start()
        return driver

    yield make
    for world, driver in reversed(made):
        await driver.stop()
        await world.stop()


class Client:
    def __init__(self, driver: Driver, session: aiohttp.ClientSession, token: str | None = TOKEN) -> None:
        self.base = f"http://127.0.0.1:{driver.agent.whatif_port}/api/v1/whatif"
        self.session = session
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def post(self, body: Any, *, raw: bytes | None = None, token: str | None = TOKEN) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        data = raw if raw is not None else json.dumps(body).encode()
        async with self.session.post(self.base, data=data, headers=headers) as response:
            return response.status, await response.json()

    async def get(self, job_id: str, *, token: str | None = TOKEN) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.session.get(f"{self.base}/{job_id}", headers=headers) as response:
            return response.status, await response.json()

    async def finished(self, job_id: str) -> dict[str, Any]:
        async def ended():
            status, body = await self.get(job_id)
            return body if status == 200 and body["state"] != "running" else None

        return await poll(ended, what=f"what-if {job_id} to end", timeout=WAIT, every=0.05)


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as session:
        yield session


def nothing_started(driver: Driver) -> bool:
    return len(driver.agent.whatif.jobs) == 0


async def test_a_missing_or_wrong_token_is_401_and_starts_nothing(node, session) -> None:
    driver = await node()
    await driver.ticks(3)
    client = Client(driver, session)
    for token in (None, "wrong", TOKEN + "x"):
        status, body = await client.post({"policy": POSTED}, token=token)
        assert status == 401 and "bearer token" in body["error"]
        assert (await client.get("anything", token=token))[0] == 401
    assert nothing_started(driver)
    (Path(driver.agent.settings.whatif.token_file)).write_text("rotated-token\n")  # a rotated Secret
    assert (await client.get("anything", token=TOKEN))[0] == 401
    assert (await client.get("anything", token="rotated-token"))[0] == 404


async def test_malformed_json_unknown_fields_and_an_invalid_policy_are_400_and_start_nothing(node, session,
                                                                                             tmp_path) -> None:
    driver = await node()
    await driver.ticks(3)
    client = Client(driver, session)
    status, body = await client.post(None, raw=b'{"policy": ')
    assert status == 400 and "not valid JSON" in body["error"]
    status, body = await client.post({"policy": POSTED, "nodes": ["a"]})
    assert status == 400 and "unknown field(s): nodes" in body["error"]
    status, body = await client.post({"policy": POSTED, "since": "yesterday"})
    assert status == 400 and body["error"].startswith("since: ")
    bad = {"action": {"mode": "sometimes"}, "detection": {"interference": {"z_threshold": "high"}}}
    status, body = await client.post({"policy": bad})
    assert status == 400
    policy_file = tmp_path / "bad.yaml"
    policy_file.write_text(json.dumps(bad))
    with pytest.raises(ConfigError) as loaded:
        load_policy(policy_file)
    assert [(p["field"], p["reason"]) for p in body["problems"]] == loaded.value.problems  # as the loader says
    assert "action.mode: " in body["error"]
    assert nothing_started(driver)


async def test_a_body_over_the_limit_is_413(node, session) -> None:
    driver = await node(max_body_bytes=1024)
    client = Client(driver, session)
    status, body = await client.post({"policy": POSTED, "since": None, "until": None, "x": "y" * 2000})
    assert status == 413 and "whatif.max_body_bytes" in body["error"]
    assert nothing_started(driver)


async def test_without_the_flight_recorder_the_answer_is_503_saying_how_to_turn_it_on(node, session) -> None:
    driver = await node(recorder=False)
    status, body = await Client(driver, session).post({"policy": POSTED})
    assert status == 503
    assert "flight_recorder.enabled: true" in body["error"] and "whatif.enabled=true" in body["error"]
    assert nothing_started(driver)


async def test_a_full_run_gives_what_replay_compare_prints(node, session, tmp_path, capsys) -> None:
    driver = await node()
    await driver.ticks(40)
    client = Client(driver, session)
    requests_before = len(driver.world.api.requests)
    status, started = await client.post({"policy": POSTED})
    assert status == 202 and started["state"] == "running"
    assert started["href"] == f"/api/v1/whatif/{started['id']}"
    body = await client.finished(started["id"])
    assert body["state"] == "done" and body["error"] is None and body["node"] == driver.agent.node
    assert body["progress"] == {"ticks_done": 40, "ticks_total": 40, "fraction": 1.0}
    assert body["window"] == {"since": None, "until": None} and body["segments"] == 1
    assert body["cpu_seconds"] > 0
    # The replay is offline: the API server saw no request from it (the agent's own watch may reconnect).
    assert all("watch" in query for _, _, query in driver.world.api.requests[requests_before:])
    policy_file = tmp_path / "candidate.yaml"
    policy_file.write_text(json.dumps(POSTED))
    assert main(["replay", str(tmp_path / "flight"), "--compare", str(policy_file), "--report", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    printed["b"]["policy_source"] = "given"
    assert body["result"] == printed


async def test_a_second_request_while_one_runs_is_409_naming_it(node, session, tmp_path) -> None:
    driver = await node(worker=gated_whatif)
    await driver.ticks(5)
    client = Client(driver, session)
    status, first = await client.post({"policy": POSTED})
    assert status == 202
    status, body = await client.post({"policy": POSTED})
    assert status == 409 and body["id"] == first["id"] and first["id"] in body["error"]
    (tmp_path / "go").touch()
    assert (await client.finished(first["id"]))["state"] == "done"
    status, again = await client.post({"policy": POSTED})  # one at a time, not one ever
    assert status == 202 and again["id"] != first["id"]
    await client.finished(again["id"])


async def test_the_tick_loop_keeps_ticking_while_a_what_if_runs(node, session, tmp_path) -> None:
    driver = await node(worker=gated_whatif)
    await driver.ticks(20)
    client = Client(driver, session)
    status, started = await client.post({"policy": POSTED})
    assert status == 202
    before = driver.agent.tick
    for _ in range(30):  # every cycle completes while the worker replays, and the recorder keeps writing
        await driver.ticks(1)
        assert (await client.get(started["id"]))[1]["state"] == "running"
    assert driver.agent.tick == before + 30
    assert driver.agent.flight_recorder.ticks_written == 50
    (tmp_path / "go").touch()
    body = await client.finished(started["id"])
    assert body["state"] == "done" and 20 <= body["result"]["a"]["ticks"] <= 50


async def test_at_a_tiny_cpu_bound_the_job_is_cancelled_with_a_partial_result(node, session) -> None:
    driver = await node(max_cpu_seconds=0.001)
    await driver.ticks(30)
    client = Client(driver, session)
    status, started = await client.post({"policy": POSTED, "since": driver.world.clock() - 3600})
    assert status == 202
    body = await client.finished(started["id"])
    assert body["state"] == "cancelled" and "partial" in body["error"]
    a, b = body["result"]["a"], body["result"]["b"]
    assert a["ticks"] == b["ticks"] == body["progress"]["ticks_done"] == 1  # checked after every tick
    assert body["result"]["diff"] is not None


async def test_a_window_without_ticks_is_no_data(node, session) -> None:
    driver = await node()
    await driver.ticks(3)
    client = Client(driver, session)
    status, started = await client.post({"policy": POSTED, "since": "2099-01-01T00:00:00Z"})
    assert status == 202
    body = await client.finished(started["id"])
    assert body["state"] == "no_data" and body["result"] is None and "no tick" in body["error"]
    assert body["window"]["since"] == 4070908800.0


async def test_a_result_expires_after_its_ttl(node, session) -> None:
    driver = await node(result_ttl_seconds=60)
    await driver.ticks(3)
    client = Client(driver, session)
    status, started = await client.post({"policy": Policy().model_dump(mode="json")})
    assert status == 202
    await client.finished(started["id"])
    driver.world.clock.advance(59)
    assert (await client.get(started["id"]))[0] == 200
    driver.world.clock.advance(1)
    status, body = await client.get(started["id"])
    assert status == 404 and "expired" in body["error"]
    assert (await client.get("0123456789abcdef"))[0] == 404


async def test_a_chunked_body_is_read_whole_and_its_size_bounded(node, session) -> None:
    driver = await node(max_body_bytes=4096, worker=gated_whatif)
    await driver.ticks(3)
    client = Client(driver, session)

    async def chunks(body: bytes, *, pause: float = 0.2):
        """The body in two chunks, the second sent a while after the first (a slow or streaming client)."""
        yield body[: len(body) // 2]
        await asyncio.sleep(pause)
        yield body[len(body) // 2:]

    async def post_chunked(body: bytes) -> tuple[int, Any]:
        async with session.post(client.base, data=chunks(body), headers=client.headers) as response:
            return response.status, await response.json()

    too_big = json.dumps({"policy": POSTED, "x": "y" * 3000}).encode() * 2  # 6 KB, under the limit per chunk
    status, body = await post_chunked(too_big)
    assert status == 413 and "whatif.max_body_bytes" in body["error"]
    assert nothing_started(driver)
    status, body = await post_chunked(json.dumps({"policy": POSTED}).encode())
    assert status == 202, body
    (Path(driver.agent.settings.whatif.token_file).parent / "go").touch()
    await client.finished(body["id"])


async def test_a_time_out_of_range_is_400_naming_the_field(node, session) -> None:
    driver = await node()
    status, body = await Client(driver, session).post({"policy": POSTED, "since": 10**400})  # no float holds it
    assert status == 400 and body["error"].startswith("since: "), body
    assert nothing_started(driver)


async def test_a_job_whose_supervisor_is_cancelled_leaves_no_worker_process(node, session, tmp_path) -> None:
    driver = await node(worker=gated_whatif)
    await driver.ticks(5)
    client = Client(driver, session)
    status, started = await client.post({"policy": POSTED})
    assert status == 202
    job = driver.agent.whatif.jobs.get(started["id"])
    await poll(lambda: job.process.pid is not None and job.process.is_alive(), what="the worker to start",
               timeout=WAIT, every=0.05)
    try:
        job.task.cancel()  # the agent's loop going away under it, not WhatIfJobs.close
        with pytest.raises(asyncio.CancelledError):
            await job.task
        assert not job.process.is_alive() and job.process.exitcode is not None  # killed and reaped
        assert job.state == "failed"
    finally:
        (tmp_path / "go").touch()


async def test_only_the_newest_results_are_kept(node, session) -> None:
    driver = await node(max_results=2)
    await driver.ticks(3)
    client = Client(driver, session)
    ids = []
    for _ in range(4):  # each ends at once (no tick in its window): nothing but the bound drops them
        status, started = await client.post({"policy": POSTED, "since": "2099-01-01T00:00:00Z"})
        assert status == 202
        assert (await client.finished(started["id"]))["state"] == "no_data"
        ids.append(started["id"])
    assert len(driver.agent.whatif.jobs) == 2
    assert [(await client.get(job_id))[0] for job_id in ids] == [404, 404, 200, 200]


async def test_an_authorization_header_that_is_not_utf8_is_401(node) -> None:
    driver = await node()
    reader, writer = await asyncio.open_connection("127.0.0.1", driver.agent.whatif_port)
    writer.write(b"GET /api/v1/whatif/x HTTP/1.1\r\nHost: agent\r\nAuthorization: Bearer \xff\xfe\r\n"
                 b"Connection: close\r\n\r\n")
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    assert status_line.split()[1] == b"401", status_line


async def test_rfc3339_times_in_lower_case_and_with_offsets_are_read(node, session) -> None:
    driver = await node()
    await driver.ticks(3)
    client = Client(driver, session)
    # RFC 3339 §5.6: "T" and "Z" may be lower case; the offset is the time's own.
    status, started = await client.post({"policy": POSTED, "since": "2099-01-01t01:30:00+01:30",
                                         "until": "2099-01-02t00:00:00.5z"})
    assert status == 202, started
    body = await client.finished(started["id"])
    assert body["window"] == {"since": 4070908800.0, "until": 4070995200.5}


async def test_a_body_nested_past_the_decoder_s_depth_is_400(node, session) -> None:
    driver = await node()
    status, body = await Client(driver, session).post(None, raw=b'{"policy": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert status == 400 and "not valid JSON" in body["error"]
    assert nothing_started(driver)

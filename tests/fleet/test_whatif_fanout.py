"""`gpu-watchdog whatif` against stand-in agents (testbed/cluster/whatif_agent.py): what it asks, how it sums the
answers, and that every node that does not answer is listed with its reason."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path
from typing import AsyncIterator

import pytest

from tests.fleet.agents import TOKEN, add_agent_pod, result_pair
from watchdog.cli import main
from watchdog.config import ConfigError
from watchdog.evaluation.report_text import format_compare
from watchdog.fleet.whatif_command import moment, policy_body
from watchdog.testbed.cluster.whatif_agent import FakeWhatIfAgent
from watchdog.testbed.fleet import free_port

POLICY = "action:\n  mode: enforce\n  interference: {for_seconds: 10}\n"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "token").write_text(TOKEN + "\n")
    return {"policy": tmp_path / "policy.yaml", "token": tmp_path / "token", "kubeconfig": tmp_path / "kubeconfig"}


@contextlib.asynccontextmanager
async def agents(*specs: dict) -> AsyncIterator[list[FakeWhatIfAgent]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(FakeWhatIfAgent(**spec)) for spec in specs]


async def whatif(server, files, *extra: str) -> tuple[int, str, str]:
    """Run the command as a person would (in a thread: it runs its own event loop); exit code, stdout, stderr."""
    server.write_kubeconfig(files["kubeconfig"])
    argv = ["whatif", "--policy", str(files["policy"]), "--kubeconfig", str(files["kubeconfig"]),
            "--token-file", str(files["token"]), "--poll-seconds", "0.02", *extra]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = await asyncio.to_thread(main, argv)
    return code, out.getvalue(), err.getvalue()


async def test_every_node_answers_and_the_report_sums_them(server, files):
    async with agents({"node": "gpu-a", "token": TOKEN, "result": result_pair(shift=10), "running_polls": 2},
                      {"node": "gpu-b", "token": TOKEN, "result": result_pair(shift=0)}) as (a, b):
        add_agent_pod(server, node="gpu-a", port=a.port)
        add_agent_pod(server, node="gpu-b", port=b.port)
        code, out, _ = await whatif(server, files, "--output", "json", "--since", "6h")
    assert code == 0
    report = json.loads(out)
    assert [(n["node"], n["state"]) for n in report["nodes"]] == [("gpu-a", "done"), ("gpu-b", "done")]
    assert report["nodes"][0]["answer"]["result"]["diff"] == json.loads(json.dumps(result_pair(shift=10)["diff"]))
    assert report["totals"] == {
        "evictions": {"only_b": 2, "only_a": 0, "shifted": 0},
        "findings": {"only_b": 0, "only_a": 0, "shifted": 1},
    }
    assert report["failed"] == []
    assert report["most_affected"]["pods"][0] == {"pod": "batch/etl", "changes": 2, "evictions": 2}
    assert report["most_affected"]["tenants"][0]["namespace"] == "batch"
    # What was posted: the policy file's mapping, and the window as unix seconds.
    posted = a.posts[0]
    assert posted["policy"] == {"action": {"mode": "enforce", "interference": {"for_seconds": 10}}}
    assert isinstance(posted["since"], float) and "until" not in posted


async def test_nodes_that_cannot_answer_are_listed_with_their_reasons(server, files):
    async with agents({"node": "gpu-ok", "token": TOKEN, "result": result_pair()},
                      {"node": "gpu-token", "token": "another"},
                      {"node": "gpu-busy", "token": TOKEN, "refuse": 409},
                      {"node": "gpu-norec", "token": TOKEN, "refuse": 503},
                      {"node": "gpu-empty", "token": TOKEN, "state": "no_data"}) as fakes:
        for fake in fakes:
            add_agent_pod(server, node=fake.node, port=fake.port)
        add_agent_pod(server, node="gpu-down", port=free_port())  # listed; nothing listens
        add_agent_pod(server, node="gpu-pending", port=None, phase="Pending")
        code, out, _ = await whatif(server, files, "--output", "json")
    assert code == 1
    failed = {row["node"]: (row["state"], row["reason"]) for row in json.loads(out)["failed"]}
    assert set(failed) == {"gpu-token", "gpu-busy", "gpu-norec", "gpu-empty", "gpu-down", "gpu-pending"}
    assert failed["gpu-token"][0] == "refused" and "401" in failed["gpu-token"][1]
    assert failed["gpu-busy"][0] == "refused" and "already running" in failed["gpu-busy"][1]
    assert failed["gpu-norec"][0] == "refused" and "flight_recorder.enabled" in failed["gpu-norec"][1]
    assert failed["gpu-empty"] == ("no_data", "no flight-recorder ticks in the window")
    assert failed["gpu-down"][0] == "unreachable"
    assert failed["gpu-pending"][0] == "unlisted" and "Pending" in failed["gpu-pending"][1]


async def test_a_node_slower_than_the_timeout_is_listed_with_its_progress(server, files):
    async with agents({"node": "gpu-slow", "token": TOKEN, "running_polls": 10**6}) as (slow,):
        add_agent_pod(server, node="gpu-slow", port=slow.port)
        code, out, _ = await whatif(server, files, "--output", "json", "--timeout", "0.5")
    assert code == 1
    (row,) = json.loads(out)["failed"]
    assert row["state"] == "timeout" and "within 0.5 s" in row["reason"] and "% replayed" in row["reason"]


async def test_requests_in_flight_are_bounded_by_the_concurrency(server, files):
    meter = {"now": 0, "most": 0}
    specs = [{"node": f"gpu-{i}", "token": TOKEN, "result": result_pair(), "delay": 0.1, "meter": meter}
             for i in range(6)]
    async with agents(*specs) as fakes:
        for fake in fakes:
            add_agent_pod(server, node=fake.node, port=fake.port)
        code, out, _ = await whatif(server, files, "--output", "json", "--concurrency", "2")
    assert code == 0, json.loads(out)["failed"]
    assert meter["most"] == 2  # every POST is held a while: two at a time, never more
    assert all(len(fake.posts) == 1 for fake in fakes)


async def test_the_fan_out_only_reads_from_the_api_server(server, files):
    async with agents({"node": "gpu-a", "token": TOKEN, "result": result_pair()}) as (a,):
        add_agent_pod(server, node="gpu-a", port=a.port, labels={"pool": "h100"})
        add_agent_pod(server, node="gpu-b", port=free_port(), labels={"pool": "a100"})
        server.requests.clear()
        code, out, _ = await whatif(server, files, "--output", "json", "--selector", "pool=h100")
    assert code == 0
    assert [row["node"] for row in json.loads(out)["nodes"]] == ["gpu-a"]  # the selector picks nodes
    assert server.requests and {method for method, _, _ in server.requests} == {"GET"}


async def test_a_bad_policy_is_refused_before_anything_is_asked(server, files):
    files["policy"].write_text("action:\n  mode: sometimes\n")
    async with agents({"node": "gpu-a", "token": TOKEN, "result": result_pair()}) as (a,):
        add_agent_pod(server, node="gpu-a", port=a.port)
        server.requests.clear()
        code, out, err = await whatif(server, files)
    assert code == 2 and out == ""
    assert "action.mode" in err
    assert a.posts == [] and server.requests == []


async def test_the_text_report_has_totals_pods_tenants_failures_and_each_nodes_compare_table(server, files):
    pair = result_pair(shift=10)
    async with agents({"node": "gpu-a", "token": TOKEN, "result": pair}) as (a,):
        add_agent_pod(server, node="gpu-a", port=a.port)
        add_agent_pod(server, node="gpu-down", port=free_port())
        code, out, err = await whatif(server, files, "--output", "text")
    assert code == 1
    assert err == ""  # no progress line on a pipe
    head, _, node_section = out.partition("== node gpu-a (gpu-watchdog-gpu-a, done) ==\n")
    assert head.splitlines()[0] == (f"what-if: {files['policy']} (P) against the policy in force, on 2 nodes: "
                                    "1 with a result, 1 failed")
    for line in ("in total:", "per node (eviction decisions / finding episodes: only under P, only under current, "
                 "shifted):", "most affected pods:", "most affected tenants (namespaces):", "failed nodes: 1"):
        assert line in head.splitlines()
    assert any(line.split() == ["eviction", "decisions", "1", "0", "0"] for line in head.splitlines())
    assert any(line.split() == ["batch/etl", "1", "1"] for line in head.splitlines())
    assert any("gpu-down" in line and "unreachable" in line for line in head.splitlines())
    diff = json.loads(json.dumps(pair["diff"]))
    expected = format_compare(diff, name_a="the policy recorded in the trace", name_b=str(files["policy"]))
    assert node_section.rstrip("\n") == expected


def test_the_window_is_a_duration_back_from_now_or_a_time_as_given():
    assert moment("24h", now=100_000.0) == 100_000.0 - 86_400
    assert moment("90m", now=10_000.0) == 10_000.0 - 5_400
    assert moment("1767225600", now=0.0) == 1767225600.0
    assert moment("2026-12-01T00:00:00Z", now=0.0) == "2026-12-01T00:00:00Z"  # the agent parses RFC 3339
    assert moment(None, now=0.0) is None


def test_a_scenario_file_posts_its_policy_section_and_its_errors_name_the_field_in_the_file(tmp_path):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("node: n\ngpus: []\npods: []\npolicy:\n  action: {mode: enforce}\n")
    assert policy_body(str(scenario)) == {"action": {"mode": "enforce"}}
    scenario.write_text("node: n\ngpus: []\npods: []\npolicy:\n  action: {mode: loud}\n")
    with pytest.raises(ConfigError) as caught:
        policy_body(str(scenario))
    assert [field for field, _ in caught.value.problems] == ["policy.action.mode"]


@contextlib.asynccontextmanager
async def rogue_agent(*, post: dict, answers: list[dict]) -> AsyncIterator[dict]:
    """An agent that answers the POST with ``post`` and each GET with the next of ``answers`` (the last repeats; bytes
    are sent as they are); ``seen`` lists the Authorization header of every request it got."""
    from aiohttp import web

    seen: list[str | None] = []
    gets = iter(answers)

    async def on_post(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response(post, status=202)

    async def on_get(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        answer = next(gets, answers[-1])
        if isinstance(answer, bytes):  # as sent, whatever it is
            return web.Response(body=answer, content_type="application/json")
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post("/api/v1/whatif", on_post)
    app.router.add_get("/{tail:.*}", on_get)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield {"port": site._server.sockets[0].getsockname()[1], "seen": seen}  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_the_token_never_follows_an_href_to_another_host(server, files):
    done = {"id": "w1", "state": "done", "progress": {"fraction": 1.0}, "result": result_pair(), "error": None}
    async with rogue_agent(post={}, answers=[done]) as thief:
        # An href that, glued to the agent's address, would read as user info and another host: http://ip:port@host
        href = f"@localhost:{thief['port']}/api/v1/whatif/w1"
        async with rogue_agent(post={"id": "w1", "state": "running", "href": href}, answers=[done]) as agent:
            add_agent_pod(server, node="gpu-a", port=agent["port"])
            code, out, _ = await whatif(server, files, "--output", "json")
    assert thief["seen"] == []
    assert agent["seen"] == [f"Bearer {TOKEN}"] * 2
    assert code == 0, json.loads(out)["failed"]


@pytest.mark.parametrize("answer", [
    {"state": "done", "progress": "half", "result": result_pair()},
    {"state": "done", "progress": {"fraction": "most"}, "result": result_pair()},
    {"state": "done", "progress": {"fraction": 1.0}, "result": "garbage"},
    {"state": "done", "progress": {"fraction": 1.0}, "result": {"diff": {}}},
    {"state": "done", "progress": {"fraction": 1.0}, "result": None},
    {"state": ["done"], "progress": {"fraction": 1.0}},
    b"[" * 100_000 + b"]" * 100_000,  # deeper than the JSON decoder goes
    b"\xff{not json",
])
async def test_a_node_answering_200_with_the_wrong_schema_is_listed_as_failed(server, files, answer):
    post = {"id": "w1", "state": "running", "href": "/api/v1/whatif/w1"}
    async with rogue_agent(post=post, answers=[answer]) as bad, \
            agents({"node": "gpu-ok", "token": TOKEN, "result": result_pair()}) as (ok,):
        add_agent_pod(server, node="gpu-bad", port=bad["port"])
        add_agent_pod(server, node="gpu-ok", port=ok.port)
        for output in ("json", "text"):
            code, out, _ = await whatif(server, files, "--output", output)
            assert code == 1
            if output == "json":
                report = json.loads(out)
                (row,) = report["failed"]
                assert (row["node"], row["state"]) == ("gpu-bad", "failed")
                assert "does not match the what-if API" in row["reason"]
                assert [n["state"] for n in report["nodes"]] == ["failed", "done"]
            else:
                assert "== node gpu-ok" in out and "== node gpu-bad" not in out


async def test_an_answer_over_the_size_bound_fails_that_node_without_reading_it_all():
    from watchdog.fleet.whatif import FanOut, Target, ask_all

    post = {"id": "w1", "state": "running", "href": "/api/v1/whatif/w1"}
    huge = json.dumps({"state": "done", "progress": {"fraction": 1.0}, "result": result_pair(),
                       "padding": "x" * 200_000}).encode()
    async with rogue_agent(post=post, answers=[huge]) as agent:
        target = Target(node="gpu-a", pod="gpu-watchdog-gpu-a", url=f"http://127.0.0.1:{agent['port']}")
        (outcome,) = await ask_all([target], FanOut(body={"policy": {}}, token=TOKEN, max_answer_bytes=100_000))
    assert outcome.state == "failed" and "100000 bytes" in outcome.reason and outcome.result is None


def test_during_a_rollout_each_node_is_asked_once_through_its_live_pod():
    from watchdog.fleet.whatif import _one_pod_per_node

    def pod(name: str, node: str, *, phase: str = "Running", ip: str | None = "10.0.0.1", deleting: bool = False):
        meta = {"name": name, **({"deletionTimestamp": "2026-12-02T05:00:00Z"} if deleting else {})}
        return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase, "podIP": ip}}

    old, new = pod("agent-old", "n1", deleting=True), pod("agent-new", "n1")
    starting = pod("agent-starting", "n2", phase="Pending", ip=None)
    leaving = pod("agent-leaving", "n2", deleting=True)
    only_old = pod("agent-last", "n3", deleting=True)
    unscheduled = [pod("agent-a", "", phase="Pending", ip=None), pod("agent-b", "", phase="Pending", ip=None)]
    chosen = {p["metadata"]["name"] for p in _one_pod_per_node([old, new, starting, leaving, only_old, *unscheduled])}
    # n1: the live new pod; n2: the old one still serving beats one not yet started; n3: its only pod, whatever it is
    assert chosen == {"agent-new", "agent-leaving", "agent-last", "agent-a", "agent-b"}


async def test_a_node_cancelled_before_its_window_is_listed_as_cancelled_with_nothing_to_count(server, files):
    post = {"id": "w1", "state": "running", "href": "/api/v1/whatif/w1"}
    cancelled = {"id": "w1", "state": "cancelled", "progress": {"fraction": 0.2}, "result": None,
                 "error": "stopped at the CPU bound of 5 s before the window's first tick: nothing replayed"}
    async with rogue_agent(post=post, answers=[cancelled]) as early, \
            agents({"node": "gpu-ok", "token": TOKEN, "result": result_pair()}) as (ok,):
        add_agent_pod(server, node="gpu-early", port=early["port"])
        add_agent_pod(server, node="gpu-ok", port=ok.port)
        code, out, _ = await whatif(server, files, "--output", "json")
        assert code == 1
        report = json.loads(out)
        (row,) = report["failed"]
        assert (row["node"], row["state"]) == ("gpu-early", "cancelled") and "before the window" in row["reason"]
        code, text, _ = await whatif(server, files)
        assert code == 1 and "gpu-early" in text and "== node gpu-ok" in text

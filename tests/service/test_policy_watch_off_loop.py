"""The policy watcher parses a changed file off the event loop and applies it on the loop."""

from __future__ import annotations

import threading

import pytest

import watchdog.service.policy_watch as policy_watch
from watchdog.service.policy_watch import PolicyWatcher


class _Stop(Exception):
    """Ends the watcher's loop after its second poll."""


async def test_a_changed_policy_is_parsed_in_a_worker_thread_and_applied_on_the_loop(tmp_path, monkeypatch):
    policy = tmp_path / "policy.yaml"
    policy.write_text("action: {mode: observe}\n")
    loop_thread = threading.get_ident()
    loads, applied, results = [], [], []
    real_load = policy_watch.load_policy

    def load(path):
        loads.append(threading.get_ident())
        return real_load(path)

    def apply(new_policy):
        applied.append((threading.get_ident(), new_policy.action.mode))

    monkeypatch.setattr(policy_watch, "load_policy", load)
    polls = 0

    async def sleep(_seconds):
        nonlocal polls
        polls += 1
        if polls == 1:
            policy.write_text("action: {mode: enforce, priority_floor: 5}\n")  # another size: seen as changed
        elif polls > 2:
            raise _Stop

    watcher = PolicyWatcher(str(policy), apply=apply, on_result=results.append, sleep=sleep)
    with pytest.raises(_Stop):
        await watcher.run()
    assert len(loads) == 1 and loads[0] != loop_thread
    assert applied == [(loop_thread, "enforce")] and results == ["success"]


async def test_a_refused_reload_from_the_worker_thread_keeps_the_last_good_policy(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("action: {mode: observe}\n")
    applied, results = [], []
    watcher = PolicyWatcher(str(policy), apply=applied.append, on_result=results.append)
    policy.write_text("action:\n  mode: observe\n  mode: enforce\n")  # a duplicate key: refused, never "enforce"
    assert await watcher.poll() is False and applied == [] and results == ["failure"]
    assert await watcher.poll() is None

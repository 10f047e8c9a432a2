"""The shared bounded wait: it returns what the check found, takes plain and async checks, and fails by name."""

from __future__ import annotations

import pytest

from tests.waiting import poll


async def test_returns_the_first_truthy_answer_of_a_plain_check() -> None:
    answers = iter([None, [], ["ready"]])
    assert await poll(lambda: next(answers), what="the third answer") == ["ready"]


async def test_awaits_an_async_check() -> None:
    calls = []

    async def check() -> int:
        calls.append(1)
        return len(calls) if len(calls) == 2 else 0

    assert await poll(check, what="the second call") == 2


async def test_a_condition_never_reached_fails_naming_it() -> None:
    with pytest.raises(AssertionError, match="timed out waiting for the impossible"):
        await poll(lambda: False, what="the impossible", timeout=0.05)


async def test_a_callable_what_is_asked_at_the_deadline() -> None:
    seen = {"errors": 0}

    def check() -> bool:
        seen["errors"] += 1
        return False

    with pytest.raises(AssertionError, match=r"no value; errors \d+"):
        await poll(check, what=lambda: f"no value; errors {seen['errors']}", timeout=0.05)


async def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="timeout and every must be > 0"):
        await poll(lambda: True, what="x", timeout=0)

"""Fixtures every test directory shares: the fake Kubernetes API server and clients on it (tests/fake_api.py), and
the check that the session leaves no temporary directory of the project behind."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from tests.fake_api import api, fake_api, server  # noqa: F401  (fixtures)

LEFTOVER = "gpu-watchdog-*"
"""What every temporary directory the project creates is called (tempfile prefix ``gpu-watchdog-``)."""


@pytest.fixture(scope="session", autouse=True)
def temporary_directories_removed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fail the session when a ``gpu-watchdog-*`` temporary directory outlives it.

    The demo, `run --simulate` and `record` build their worlds in temporary directories that must go on a normal
    exit, Ctrl-C and SIGTERM alike. The session gets a temporary directory of its own under the system's (tempfile's
    default in this process, ``TMPDIR`` in every subprocess it starts), so the check sees only what this session
    made: the other sessions and demos of a shared machine create and remove their own meanwhile. Anything left in it
    fails the session, the project's own directories named first. pytest's ``tmp_path`` root is not under the system's
    temporary directory at all: ``--basetemp=.pytest-tmp`` (pyproject.toml), in the checkout and git-ignored, so the
    suite leaves nothing under /tmp."""
    tmp_path_factory.getbasetemp()
    session = Path(tempfile.mkdtemp(prefix="pytest-session-tmp-"))
    saved = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = str(session), str(session)
    try:
        yield
    finally:
        if saved[0] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[0]
        tempfile.tempdir = saved[1]
        left = sorted(path.name for path in session.iterdir())
        shutil.rmtree(session, ignore_errors=True)
    if left:
        named = [name for name in left if Path(name).match(LEFTOVER)]
        pytest.fail(f"temporary files left behind by the session: {', '.join(left)}"
                    + (f" (the project's own: {', '.join(named)})" if named else ""), pytrace=False)

"""Fixtures every test directory shares: the fake Kubernetes API server and clients on it (tests/fake_api.py)."""

from tests.fake_api import api, fake_api, server  # noqa: F401  (fixtures)

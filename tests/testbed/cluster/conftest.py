"""Fixtures for the fake API server tests: a fresh fake API server and a real kubernetes.aio client per test."""

from tests.fake_api import api, server  # noqa: F401  (fixtures)

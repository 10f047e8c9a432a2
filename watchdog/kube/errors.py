"""The agent's own Kubernetes error tree, so no caller outside watchdog.kube sees the client library's exceptions.

The generated client raises ``ApiException`` (with ``.status`` and a JSON ``.body``) for an HTTP error, and lets
aiohttp's ``ClientError`` / ``asyncio.TimeoutError`` through for transport failures. Callers care about a handful of
outcomes (unreachable, forbidden, not found, conflict, gone), so ``translate`` maps both families onto those,
keeping the HTTP status and the Status message for logs. Nothing here retries: retry policy belongs to the callers
(the pod watcher's backoff, the elector's retry period), each in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, Iterator

import aiohttp
from kubernetes.aio.client.exceptions import ApiException


class KubeError(Exception):
    """Any failure talking to the API server."""

    def __init__(self, message: str, *, status: int | None = None, body: dict[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.body = body or {}

    @property
    def message(self) -> str:
        return str(self)


class KubeConfigUnusable(KubeError):
    """The kubeconfig named cannot be used: no such file, unreadable, or not a kubeconfig."""


class KubeUnavailable(KubeError):
    """The API server could not be reached or did not answer in time (connection, timeout, 5xx)."""


class KubeForbidden(KubeError):
    """401/403: credentials or RBAC are missing."""


class KubeNotFound(KubeError):
    """404."""


class KubeConflict(KubeError):
    """409: the object changed since it was read (optimistic concurrency) or already exists."""


class KubeGone(KubeError):
    """410: a resourceVersion is too old to watch from; the caller must list again."""


class KubeRejected(KubeError):
    """Any other 4xx: the request itself was refused (bad selector, invalid object, 429)."""


def status_body(text: str | bytes | None) -> dict[str, Any]:
    """Parse a Status body; a proxy's HTML page or an empty body gives {}."""
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except (ValueError, TypeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def error_for_status(status: int, body: dict[str, Any], *, fallback: str = "") -> KubeError:
    message = body.get("message") or fallback or f"HTTP {status}"
    if status in (401, 403):
        cls: type[KubeError] = KubeForbidden
    elif status == 404:
        cls = KubeNotFound
    elif status == 409:
        cls = KubeConflict
    elif status == 410:
        cls = KubeGone
    elif status >= 500 or status == 0:
        cls = KubeUnavailable
    else:
        cls = KubeRejected
    return cls(f"{status}: {message}", status=status, body=body)


def translate(error: BaseException) -> KubeError:
    """Map a client-library or transport exception onto the tree (KubeErrors pass through)."""
    if isinstance(error, KubeError):
        return error
    if isinstance(error, ApiException):
        return error_for_status(error.status or 0, status_body(error.body), fallback=str(error.reason or ""))
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        return KubeUnavailable("timed out waiting for the API server")
    if isinstance(error, (aiohttp.ClientError, OSError)):
        return KubeUnavailable(f"cannot reach the API server: {type(error).__name__}: {error}")
    raise TypeError(f"not a Kubernetes client error: {error!r}") from error


@contextlib.contextmanager
def kube_errors() -> Iterator[None]:
    """``with kube_errors(): await api.core.read_…`` — re-raises client errors as KubeError."""
    try:
        yield
    except (ApiException, aiohttp.ClientError, asyncio.TimeoutError, TimeoutError, OSError) as error:
        raise translate(error) from error

"""A bearer token read from a mounted file, for the endpoints that act on request: the controller's webhook and
the agent's what-if API.

A Kubernetes Secret mounted as a volume is updated in place when it is rotated, so the file is re-read whenever it
changes (inode, mtime or size), never cached for the process's life. A missing or empty file refuses every request:
a what-if or an eviction never runs unauthenticated because a mount went missing.
"""

from __future__ import annotations

import hmac
import logging
import os

log = logging.getLogger(__name__)


class TokenFile:
    """The bearer token, re-read whenever the file changes (a rotated Secret updates the mounted file)."""

    def __init__(self, path: str, *, what: str = "webhook") -> None:
        self._path = path
        self._what = what
        self._stamp: tuple[int, int, int] | None = None
        self._token: bytes | None = None

    def current(self) -> bytes | None:
        """The token now in force; None (every request refused) when the file is missing or empty."""
        try:
            stat = os.stat(self._path)
            stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            if stamp != self._stamp:
                with open(self._path, "rb") as handle:
                    self._token = handle.read().strip() or None
                self._stamp = stamp
        except OSError as exc:
            log.warning("%s token file %s unreadable: %s", self._what, self._path, exc)
            self._stamp, self._token = None, None
        return self._token

    def accepts(self, header: str | None) -> bool:
        token = self.current()
        if token is None or not header or not header.startswith("Bearer "):
            return False
        # Constant-time comparison: the token must not leak through response timing. aiohttp decodes header bytes
        # that are not UTF-8 with surrogateescape; encoding them back gives the bytes sent (a mismatch, not a 500).
        return hmac.compare_digest(header[len("Bearer "):].strip().encode("utf-8", "surrogateescape"), token)

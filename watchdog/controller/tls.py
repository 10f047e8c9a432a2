"""The webhook's TLS server context, following its certificate files as they are renewed.

cert-manager renews a Certificate by rewriting its Secret (keys tls.crt, tls.key, ca.crt; cert-manager docs,
"Certificate resources"), and the kubelet swaps a mounted Secret's files atomically through a symlink, so both
files change together and the pod is not restarted. A context loaded once at start would serve the old certificate
until it expires. So every TLS handshake first compares the files' identity (inode, mtime, size); when they changed,
a fresh context is loaded and the handshake is moved onto it from the ClientHello callback (``sni_callback`` sets
``SSLObject.context``, the standard way to pick a certificate per connection; OpenSSL calls it with or without SNI).
A pair that does not load (a half-written file, a key that does not match) is logged, and the last good one is
served until the files change again.
"""

from __future__ import annotations

import logging
import os
import ssl

log = logging.getLogger(__name__)

Stamp = tuple[tuple[int, int, int], tuple[int, int, int]]


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A TLS server context with this certificate chain and key; TLS 1.2 at least."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


class ReloadingServerContext:
    """``context`` is what the server listens with; each handshake is served by the newest pair that loaded."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        """Raises OSError or ssl.SSLError when the pair cannot be loaded now: a controller must not start without."""
        self._cert_file, self._key_file = cert_file, key_file
        self._stamp = self._read_stamp()
        self.context = server_context(cert_file, key_file)
        self.context.sni_callback = self._on_client_hello
        self._current = self.context
        self.reloads = 0
        self.failures = 0

    def _read_stamp(self) -> Stamp:
        cert, key = os.stat(self._cert_file), os.stat(self._key_file)
        return ((cert.st_ino, cert.st_mtime_ns, cert.st_size), (key.st_ino, key.st_mtime_ns, key.st_size))

    def current(self) -> ssl.SSLContext:
        """The context for the next handshake: reloaded first when the files changed."""
        try:
            stamp = self._read_stamp()
        except OSError as exc:
            if self._stamp is not None:
                log.warning("TLS certificate files unreadable, serving the last good pair: %s", exc)
            self._stamp = None
            return self._current
        if stamp != self._stamp:
            self._stamp = stamp  # tried once per change, not once per handshake
            try:
                self._current = server_context(self._cert_file, self._key_file)
                self.reloads += 1
                log.info("TLS certificate reloaded from %s", self._cert_file)
            except (OSError, ssl.SSLError) as exc:
                self.failures += 1
                log.error("TLS certificate %s does not load, serving the last good pair: %s", self._cert_file, exc)
        return self._current

    def _on_client_hello(self, connection: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        try:
            context = self.current()
            if context is not connection.context:
                connection.context = context
        except Exception:  # noqa: BLE001 - a failure here would fail the handshake; serve the listening pair
            log.exception("choosing the TLS certificate failed")

"""Settings and policy with their secrets taken out, for a support bundle a user attaches to a public bug report.

A bug report needs the effective settings (what the agent actually ran with: defaults, file, environment, flags),
but a settings file may carry a credential inline (``kube.token``) or in a URL (``https://user:pass@prometheus``).
Two rules, so that a field added later is caught even if nobody remembers this module:

- an explicit list of the fields known to be secret (``SECRET_VALUES``) or to name a file whose *contents* are
  secret (``SECRET_FILES``), checked against the settings model by a test;
- a pattern on every field name and mapping key (token, password, secret, credential, api key, private key,
  auth): a matching value is replaced, unless the field names a file or directory (``…_file``, ``…_path``,
  ``…_dir``): a path tells a reader where the secret lives and is kept.

A file named by the settings is never opened here. Credentials in URLs (user info, and query parameters whose name
matches the pattern) are replaced in every string value, whatever its field.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "<redacted>"

SECRET_VALUES = frozenset({"kube.token"})
"""Fields whose value is itself a secret: replaced."""

SECRET_FILES = frozenset({
    "mqtt.password_file", "mqtt.key_file", "controller.token_file", "controller.tls_key_file", "whatif.token_file",
})
"""Fields naming a file whose contents are secret (a mounted Secret): the path is kept, the file never read."""

NOT_SECRET = frozenset({
    "mqtt.ca_file", "mqtt.cert_file", "mqtt.tls", "mqtt.tls_check_hostname", "controller.tls_cert_file",
    "policy.action.kill_switch.key", "action.kill_switch.key",
    "action.vms.passthrough", "policy.action.vms.passthrough",  # what to do with a passthrough VM (report | evict)
})
"""Fields whose names look secret-ish but are not (public certificates, a ConfigMap key's name, switches)."""

_SECRET_NAME = re.compile(
    r"(^|_)(token|password|passwd|passphrase|secret|credential|api_?key|private_?key|auth|authorization|bearer)s?"
    r"(_|$)", re.IGNORECASE)
_PATH_NAME = re.compile(r"_(file|path|dir|directory)$", re.IGNORECASE)
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


def secret_name(name: str) -> bool:
    """True for a field name or mapping key that says its value is a secret (not a path to one)."""
    return bool(_SECRET_NAME.search(name)) and not _PATH_NAME.search(name)


def redact_url(text: str) -> str:
    """``text`` with a URL's password (user info) and secret-named query parameters replaced."""
    if not _URL.match(text):
        return text
    try:
        parts = urlsplit(text)
        password = parts.password
    except ValueError:  # not a URL after all (an unclosed IPv6 bracket, a port out of range)
        return text
    netloc = parts.netloc
    if password is not None:
        netloc = f"{parts.username or ''}:{REDACTED}@{netloc.rpartition('@')[2]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(secret_name(key) for key, _ in pairs):
            query = urlencode([(key, REDACTED if secret_name(key) else value) for key, value in pairs], safe="<>")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact(data: Any, *, prefix: str = "") -> tuple[Any, list[str]]:
    """A copy of plain JSON-like ``data`` with secrets replaced, and the dotted paths replaced. Everything under a
    secret-named mapping key (``credentials: {user: …, pass: …}``) counts as secret."""
    replaced: list[str] = []
    return _walk(data, prefix, replaced, inherited=False), replaced


def _walk(value: Any, path: str, replaced: list[str], *, inherited: bool) -> Any:
    name = path.rsplit(".", 1)[-1]
    secret = path not in NOT_SECRET and (inherited or path in SECRET_VALUES or secret_name(name))
    if isinstance(value, dict):
        return {key: _walk(item, f"{path}.{key}" if path else str(key), replaced, inherited=secret)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk(item, f"{path}[{index}]", replaced, inherited=secret) for index, item in enumerate(value)]
    if secret and value not in (None, ""):
        replaced.append(path)
        return REDACTED
    if isinstance(value, str):
        cleaned = redact_url(value)
        if cleaned != value:
            replaced.append(path)
        return cleaned
    return value

"""The support bundle's redaction: every settings field that looks like a secret is classified, and what the
bundle writes of the settings never carries a secret's value, only the paths of files holding one."""

from __future__ import annotations

import json
import re
import typing

from pydantic import BaseModel

from watchdog.answers.bundle_sources import effective_policy, effective_settings
from watchdog.answers.redact import NOT_SECRET, REDACTED, SECRET_FILES, SECRET_VALUES, redact, redact_url, secret_name
from watchdog.config import Policy, Settings

LOOKS_SECRET = re.compile(r"token|pass|secret|key|cred|auth|cert|tls|bearer", re.IGNORECASE)


def leaf_fields(model: type[BaseModel], prefix: str = "") -> typing.Iterator[str]:
    """Dotted paths of every field that holds no settings model of its own (a model inside a list, a dict or an
    optional is walked too)."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        nested = [kind for kind in _kinds(field.annotation) if isinstance(kind, type) and issubclass(kind, BaseModel)]
        if nested:
            for kind in nested:
                yield from leaf_fields(kind, f"{path}.")
        else:
            yield path


def _kinds(annotation: typing.Any) -> typing.Iterator[typing.Any]:
    yield annotation
    for argument in typing.get_args(annotation):
        yield from _kinds(argument)


def test_every_field_that_looks_secret_is_classified():
    settings_fields = set(leaf_fields(Settings))
    policy_fields = set(leaf_fields(Policy))
    suspicious = {path for path in settings_fields | policy_fields if LOOKS_SECRET.search(path.rsplit(".", 1)[-1])}
    classified = SECRET_VALUES | SECRET_FILES | NOT_SECRET
    assert suspicious <= classified, f"classify in watchdog/answers/redact.py: {sorted(suspicious - classified)}"
    assert classified <= settings_fields | policy_fields, "a classified field no longer exists"
    assert not any(secret_name(path.rsplit(".", 1)[-1]) for path in NOT_SECRET)  # the pattern never overrules it


def test_secret_values_are_replaced_and_secret_files_keep_their_path():
    settings = Settings.model_validate({
        "kube": {"access": "url", "url": "https://admin:hunter2@api.example:6443", "token": "s3cr3t-token"},
        "mqtt": {"username": "agent", "password_file": "/run/secrets/mqtt/password", "tls": True,
                 "cert_file": "/etc/mqtt/tls.crt", "key_file": "/etc/mqtt/tls.key"},
        "controller": {"token_file": "/run/secrets/webhook/token"},
        "signals": {"prometheus_url": "http://prom:9090/?access_token=abc123&timeout=5"},
    })
    written = effective_settings(settings)
    text = json.dumps(written)
    assert not {"s3cr3t-token", "hunter2", "abc123"} & set(re.findall(r"[\w-]+", text))
    data = written["settings"]
    assert data["kube"]["token"] == REDACTED
    assert data["kube"]["url"] == f"https://admin:{REDACTED}@api.example:6443"
    assert data["signals"]["prometheus_url"] == f"http://prom:9090/?access_token={REDACTED}&timeout=5"
    assert data["mqtt"]["password_file"] == "/run/secrets/mqtt/password"
    assert data["mqtt"]["key_file"] == "/etc/mqtt/tls.key" and data["mqtt"]["username"] == "agent"
    assert data["controller"]["token_file"] == "/run/secrets/webhook/token"
    assert set(written["redacted"]) == {"kube.token", "kube.url", "signals.prometheus_url"}
    assert set(written["secretFiles"]) == SECRET_FILES


def test_the_pattern_catches_fields_nobody_listed_and_spares_lookalikes():
    data, replaced = redact({"webhook": {"api_key": "k", "auth": {"user": "u", "pass": "p"}, "tokens": ["a", "b"],
                                         "token_file": "/run/t", "unauthorized": {"enabled": True}},
                             "kill_switch": {"key": "paused"}})
    assert data == {"webhook": {"api_key": REDACTED, "auth": {"user": REDACTED, "pass": REDACTED},
                                "tokens": [REDACTED, REDACTED], "token_file": "/run/t",
                                "unauthorized": {"enabled": True}},
                    "kill_switch": {"key": "paused"}}
    assert replaced == ["webhook.api_key", "webhook.auth.user", "webhook.auth.pass", "webhook.tokens[0]",
                        "webhook.tokens[1]"]


def test_urls_without_credentials_are_left_alone():
    for text in ("http://prom:9090", "https://host/path?query=up", "/var/lib/x", "http://[::1", "not a url"):
        assert redact_url(text) == text


def test_the_policy_is_written_as_the_agent_resolves_it():
    settings = Settings.model_validate({"namespace": "watchers", "mode_override": "observe"})
    written = effective_policy(settings)
    assert written["source"] == "settings (inline policy)"
    assert written["policy"]["action"]["mode"] == "observe"
    assert "watchers" in json.dumps(written["policy"]["action"])  # its own namespace, always protected

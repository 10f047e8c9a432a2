"""Settings of the optional MQTT event stream (findings, actions, Xids and the agent's status).

The stream is off by default: the Prometheus endpoint is the agent's primary output, MQTT is for consumers that
want pushed events (a fleet dashboard, a ticketing bridge) without scraping every node.
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from watchdog.config._base import Section

# MQTT 3.1.1 §4.7.1: '+' and '#' are wildcards and may not appear in a topic name we publish to; §4.7.3: a topic
# name must not contain U+0000.
_FORBIDDEN_IN_TOPIC = ("+", "#", "\x00")


class MqttSettings(Section):
    enabled: bool = Field(False, description="Publish findings, actions, Xids and status to an MQTT broker.")
    host: str = Field("localhost", min_length=1, description="Broker host name or address.")
    port: int = Field(1883, ge=1, le=65535, description="Broker TCP port (1883 is MQTT without TLS, 8883 with).")
    topic_prefix: str = Field(
        "gpu-watchdog", min_length=1, description="First topic level(s); topics are <prefix>/<node>/<event>."
    )
    username: str | None = Field(None, description="User name sent in CONNECT; None connects anonymously.")
    password_file: str | None = Field(
        None, description="File holding the password (a mounted Secret); read at every connect, so rotation works."
    )
    tls: bool = Field(False, description="Connect over TLS (port 8883 by IANA's registry); the broker is verified.")
    ca_file: str | None = Field(
        None, description="PEM CA bundle the broker's certificate must chain to; None uses the system trust store."
    )
    cert_file: str | None = Field(None, description="PEM client certificate, for a broker that requires one (mTLS).")
    key_file: str | None = Field(None, description="PEM private key of cert_file.")
    tls_check_hostname: bool = Field(
        True, description="Require the broker's certificate to name `host`; off only to reach it by another address."
    )
    client_id: str = Field("", description="MQTT client identifier; empty means 'gpu-watchdog-<node>'.")
    qos: int = Field(1, ge=0, le=1, description="QoS of every event: 1 = at least once (duplicates possible), 0 = at most once.")
    keepalive_seconds: int = Field(
        30, ge=5, le=65535, description="MQTT keepalive; the broker sends the 'offline' will after 1.5x this of silence."
    )
    timeout_seconds: float = Field(10.0, gt=0, description="Longest wait for CONNACK or a PUBACK before reconnecting.")
    queue_size: int = Field(
        1000, ge=1, description="Events kept while the broker is away; beyond it the oldest are dropped and counted."
    )
    reconnect_initial_seconds: float = Field(1.0, gt=0, description="Wait before the first reconnect attempt.")
    reconnect_max_seconds: float = Field(60.0, gt=0, description="Cap of the exponentially growing reconnect wait.")
    reconnect_jitter: float = Field(
        0.2, ge=0, le=1, description="Share of each wait drawn at random, so a fleet does not reconnect in step."
    )

    @field_validator("topic_prefix")
    @classmethod
    def _prefix_is_a_topic_name(cls, value: str) -> str:
        if any(char in value for char in _FORBIDDEN_IN_TOPIC):
            raise ValueError("must not contain the MQTT wildcards '+' or '#' (or NUL)")
        if value.startswith("/") or value.endswith("/") or "//" in value:
            raise ValueError("must not start or end with '/' nor contain an empty level")
        return value

    @model_validator(mode="after")
    def _tls_files_need_tls(self) -> "MqttSettings":
        if not self.tls and (self.ca_file or self.cert_file or self.key_file):
            raise ValueError("ca_file, cert_file and key_file need tls: true")
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("cert_file and key_file go together")
        return self

    @model_validator(mode="after")
    def _backoff_is_ordered(self) -> "MqttSettings":
        if self.reconnect_max_seconds < self.reconnect_initial_seconds:
            raise ValueError("reconnect_max_seconds must be at least reconnect_initial_seconds")
        return self

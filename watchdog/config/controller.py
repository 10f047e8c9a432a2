"""Settings of `gpu-watchdog controller`: the cluster-wide, Alertmanager-driven evictor.

The controller is a Deployment with several replicas; one holds a coordination.k8s.io Lease and acts, the others
answer 503 so Alertmanager retries against whichever replica leads. Its limits are cluster-wide, unlike the agent's
per-node token bucket.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from watchdog.config._base import Section
from watchdog.config.names import LabelKeyOrEmpty, NamespaceName, ObjectName

ONE_MIB = 1024 * 1024


class ControllerSettings(Section):
    """How the controller listens, authenticates, elects a leader and paces itself."""

    listen_host: str = Field("0.0.0.0", description="Address the webhook server binds.")
    listen_port: int = Field(9443, ge=0, le=65535, description="Port of the webhook server; 0 picks a free one.")
    token_file: str = Field(
        "/var/run/secrets/gpu-watchdog/webhook-token",
        min_length=1,
        description="File holding the bearer token Alertmanager sends; re-read when it changes.",
    )
    lease_namespace: NamespaceName = Field(
        "gpu-watchdog-controller",
        description="The controller's own namespace (always protected): its leader Lease and handled-firings record.",
    )
    lease_name: ObjectName = Field("gpu-watchdog-controller", description="Name of the leader Lease.")
    identity: str | None = Field(None, description="This replica's holder identity; None means the hostname.")
    lease_duration_seconds: float = Field(15.0, gt=0, description="How long a Lease stays valid without renewal.")
    renew_deadline_seconds: float = Field(10.0, gt=0, description="The leader gives up if it cannot renew in this.")
    retry_period_seconds: float = Field(2.0, gt=0, description="How often candidates try to acquire or renew.")
    cluster_evictions_per_minute: float = Field(
        1.0, gt=0, description="Cluster-wide token bucket refill rate of eviction attempts per minute."
    )
    cluster_eviction_burst: int = Field(1, ge=1, description="Cluster-wide token bucket capacity.")
    max_body_bytes: int = Field(ONE_MIB, gt=0, description="Larger webhook bodies are refused with 413.")
    max_alerts_per_request: int = Field(
        50,
        ge=1,
        description="New eviction alerts acted on per webhook request; the rest are answered as skipped (a later "
        "delivery of the group brings them again), so one large group cannot hold the controller.",
    )
    tls_cert_file: str = Field(
        "/etc/gpu-watchdog/tls/tls.crt",
        min_length=1,
        description="PEM certificate (chain) the webhook serves, e.g. a cert-manager Secret's tls.crt; re-read when "
        "it changes.",
    )
    tls_key_file: str = Field(
        "/etc/gpu-watchdog/tls/tls.key", min_length=1, description="PEM private key of tls_cert_file (tls.key)."
    )
    plain_http: bool = Field(
        False, description="Serve plain HTTP instead of HTTPS: only behind something that encrypts for us (a mesh)."
    )
    idle_timeout_seconds: float = Field(
        30.0,
        gt=0,
        description="A connection idle this long (before its first request, between requests, or while a TLS "
        "handshake or a request body trickles in) is closed.",
    )
    max_connections: int = Field(
        64, ge=1, description="Concurrent connections served; when full, idle ones make room and one client holds at "
        "most half; probes get 4 slots beyond it (docs/metrics.md, \"Connections and probes\")."
    )
    dedupe_entries: int = Field(10_000, gt=0, description="How many (fingerprint, startsAt) keys are remembered.")
    handled_configmap: ObjectName = Field(
        "gpu-watchdog-controller-handled",
        description="ConfigMap (in lease_namespace) recording handled firings, so a new leader never repeats one.",
    )
    handled_entries: int = Field(
        500, ge=1, le=5000, description="How many handled firings the ConfigMap keeps (it is limited to 1 MiB)."
    )

    isolation_audit_minutes: float = Field(
        15.0, ge=0, description="The leader runs the tenant isolation audit this often (gpu-watchdog audit); 0: never."
    )
    isolation_namespace_selector: str = Field(
        "", description="Label selector picking the tenants' namespaces for the audit; empty: all but kube-*."
    )
    isolation_prometheus_url: str = Field(
        "", description="Prometheus scraping the agents, for the audit to name who shares each GPU; empty: per node."
    )
    isolation_tenant_label: LabelKeyOrEmpty = Field(
        "", description="Namespace label naming the tenant in the audit; empty: one tenant per namespace."
    )

    @model_validator(mode="after")
    def _lease_timings_ordered(self) -> "ControllerSettings":
        # client-go's NewLeaderElector refuses the same:
        # LeaseDuration > RenewDeadline > JitterFactor (1.2) × RetryPeriod.
        if not self.lease_duration_seconds > self.renew_deadline_seconds > 1.2 * self.retry_period_seconds:
            raise ValueError("need lease_duration_seconds > renew_deadline_seconds > 1.2 × retry_period_seconds")
        return self

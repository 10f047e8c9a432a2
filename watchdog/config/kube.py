"""How the agent reaches the Kubernetes API."""

from typing import Literal

from pydantic import Field

from watchdog.config._base import Section


class KubeSettings(Section):
    access: Literal["in-cluster", "kubeconfig", "url", "none"] = Field(
        "in-cluster", description="How to reach the API server; 'none' runs without pod metadata or actions."
    )
    url: str | None = Field(None, description="API server URL when access is 'url' (tests, the demo's fake server).")
    kubeconfig: str | None = Field(None, description="Path of a kubeconfig when access is 'kubeconfig'.")
    context: str | None = Field(None, description="Context of that kubeconfig (default: its current-context).")
    request_timeout_seconds: float = Field(10.0, gt=0, description="Timeout of one API request.")
    token: str | None = Field(None, description="Bearer token when access is 'url' (the fake server may require one).")
    watch_timeout_seconds: int = Field(
        290, gt=0, description="timeoutSeconds of one pod watch request; the watch then resumes from its last version."
    )
    watch_idle_seconds: float = Field(
        150.0, gt=0, description="A pod watch silent this long (no event, no bookmark) is taken as stalled and resumed."
    )
    watch_backoff_max_seconds: float = Field(30.0, gt=0, description="Longest wait between failed pod list/watch tries.")

"""Kubernetes object names as the API server validates them, so an alert label that can never name a pod is refused
up front (400: Alertmanager does not retry it) instead of failing at the API server as a retryable 503.

A namespace name is a DNS-1123 label and a pod name a DNS-1123 subdomain (k8s.io/apimachinery
pkg/api/validation: ValidateNamespaceName = NameIsDNSLabel; k8s.io/kubernetes pkg/apis/core/validation:
ValidatePodName = NameIsDNSSubdomain; the formats are in k8s.io/apimachinery pkg/util/validation/validation.go).
Both also keep a label out of the URL path the controller builds (no "/", "..", "?" can pass).
PURE: no I/O, no asyncio.
"""

from __future__ import annotations

import re

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(_LABEL)
_DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")


def namespace_problem(name: str) -> str | None:
    """Why ``name`` cannot be a namespace name (a DNS-1123 label); None when it can."""
    if len(name) > DNS1123_LABEL_MAX:
        return f"must be no more than {DNS1123_LABEL_MAX} characters"
    if not _DNS1123_LABEL.fullmatch(name):
        return "must be a DNS-1123 label: lower-case letters, digits and '-', starting and ending alphanumeric"
    return None


def pod_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a pod name (a DNS-1123 subdomain); None when it can."""
    if len(name) > DNS1123_SUBDOMAIN_MAX:
        return f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
    if not _DNS1123_SUBDOMAIN.fullmatch(name):
        return ("must be a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', each dot-separated part "
                "starting and ending alphanumeric")
    return None

"""Kubernetes name syntax for every object name, label and key that the settings and the policy hold.

These strings end up in API paths (``/api/v1/namespaces/{namespace}/configmaps/{name}``), label selectors, log
lines and answers of the agent's API. A value the API server could never hold — ``../../pods/x?watch=1`` as a
ConfigMap name, ``Not A Namespace`` as a namespace, ten megabytes of anything — cannot name a real object: it can
only be a mistake or an attack, so it is refused where it is read, with the field and the rule it breaks.

The rules are Kubernetes' own (kubernetes.io/docs/concepts/overview/working-with-objects/names/ "Object Names and
IDs"; kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set for label keys
and values, which annotation keys share; kubernetes.io/docs/concepts/configuration/configmap/ for ConfigMap data
keys), as the API server's validation (k8s.io/apimachinery pkg/util/validation) applies them:

- a namespace is an RFC 1123 DNS label: at most 63 characters, lowercase alphanumerics and '-', starting and ending
  with an alphanumeric;
- a ConfigMap, Lease, Node or other object name is an RFC 1123 DNS subdomain: at most 253 characters, DNS labels
  joined by '.';
- a label key is an optional DNS-subdomain prefix and '/' and a name of at most 63 characters (alphanumerics,
  '-', '_', '.', starting and ending with an alphanumeric); a label value is such a name, or empty;
- a ConfigMap data key is at most 253 characters of alphanumerics, '-', '_' and '.'.
"""

from __future__ import annotations

import re
from typing import Annotated, Callable

from pydantic import AfterValidator

from watchdog.model.text import bounded

DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
LABEL_NAME_MAX = 63

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")

_QUOTED = 64  # how much of a refused value its error message quotes


def _refuse(value: str, rule: str) -> ValueError:
    return ValueError(f"{bounded(repr(value), _QUOTED)} is not {rule}")


def _match(value: str, *, pattern: re.Pattern[str], limit: int, rule: str) -> str:
    if len(value) > limit:  # checked first: an overlong value is refused by its length, never quoted in full
        raise ValueError(f"{len(value)} characters, more than the {limit} of {rule}")
    if not pattern.fullmatch(value):
        raise _refuse(value, rule)
    return value


NAMESPACE_RULE = "a namespace name (an RFC 1123 DNS label: lowercase letters, digits and '-', starting and ending " \
                 "with a letter or digit, at most 63 characters)"
OBJECT_NAME_RULE = "an object name (an RFC 1123 DNS subdomain: lowercase letters, digits, '-' and '.', starting and " \
                   "ending with a letter or digit, at most 253 characters)"
LABEL_KEY_RULE = "a label or annotation key ([prefix/]name: the prefix a DNS subdomain, the name at most 63 " \
                 "letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
LABEL_VALUE_RULE = "a label value (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter " \
                   "or digit)"
CONFIGMAP_KEY_RULE = "a ConfigMap key (letters, digits, '-', '_' and '.', at most 253 characters, not '.' or '..')"


def namespace_name(value: str) -> str:
    return _match(value, pattern=_DNS_LABEL, limit=DNS_LABEL_MAX, rule=NAMESPACE_RULE)


def object_name(value: str) -> str:
    return _match(value, pattern=_DNS_SUBDOMAIN, limit=DNS_SUBDOMAIN_MAX, rule=OBJECT_NAME_RULE)


def label_key(value: str) -> str:
    if len(value) > DNS_SUBDOMAIN_MAX + 1 + LABEL_NAME_MAX:
        raise ValueError(f"{len(value)} characters, more than any {LABEL_KEY_RULE} can have")
    prefix, slash, name = value.rpartition("/")
    prefix_ok = not slash or (len(prefix) <= DNS_SUBDOMAIN_MAX and _DNS_SUBDOMAIN.fullmatch(prefix) is not None)
    if not prefix_ok or len(name) > LABEL_NAME_MAX or not _LABEL_NAME.fullmatch(name):
        raise _refuse(value, LABEL_KEY_RULE)
    return value


def label_value(value: str) -> str:
    """A non-empty label value: the policy names tenants by it, and no tenant is called ""."""
    return _match(value, pattern=_LABEL_NAME, limit=LABEL_NAME_MAX, rule=LABEL_VALUE_RULE)


def configmap_key(value: str) -> str:
    _match(value, pattern=_CONFIGMAP_KEY, limit=DNS_SUBDOMAIN_MAX, rule=CONFIGMAP_KEY_RULE)
    if value in (".", "..") or value.startswith(".."):
        raise _refuse(value, CONFIGMAP_KEY_RULE)
    return value


def _or_empty(check: Callable[[str], str]) -> Callable[[str], str]:
    return lambda value: value if value == "" else check(value)


NamespaceName = Annotated[str, AfterValidator(namespace_name)]
ObjectName = Annotated[str, AfterValidator(object_name)]
LabelKey = Annotated[str, AfterValidator(label_key)]
LabelValue = Annotated[str, AfterValidator(label_value)]
ConfigMapKey = Annotated[str, AfterValidator(configmap_key)]
# Settings where "" keeps its documented meaning (off, or "find it at run time").
ObjectNameOrEmpty = Annotated[str, AfterValidator(_or_empty(object_name))]
LabelKeyOrEmpty = Annotated[str, AfterValidator(_or_empty(label_key))]
LabelValueOrEmpty = Annotated[str, AfterValidator(_or_empty(label_value))]  # a selector may match an empty value

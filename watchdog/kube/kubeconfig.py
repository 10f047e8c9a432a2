"""Which credentials a command run by a person uses: one rule for `explain`, `audit` and `controller`.

kubectl looks for its kubeconfig in a fixed order — the ``--kubeconfig`` flag, then the ``KUBECONFIG`` variable, then
``~/.kube/config`` — and a pod without any of them uses its service account (Kubernetes docs, "Organizing Cluster
Access Using kubeconfig Files"). Every command that talks to a cluster from a terminal follows that order here, so
a shell that works for kubectl works for each of them alike. Unlike kubectl, the files of a ``KUBECONFIG`` list are
not merged: the first one that exists is used.

The agent is the exception: it runs as a DaemonSet and follows its settings' ``kube.access`` alone.
"""

from __future__ import annotations

import os
from typing import Mapping

from watchdog.config.kube import KubeSettings
from watchdog.kube.client import KubeApi


def kubeconfig_path(flag: str | None = None, *, environ: Mapping[str, str] | None = None,
                    home: str | None = None) -> str | None:
    """The kubeconfig to load, or None for the pod's service account.

    A path the person named (the flag, or the first entry of ``KUBECONFIG`` when none of its entries exists) is
    returned even when missing, so that loading it says "no such file" rather than quietly going elsewhere; the
    default ``~/.kube/config`` is used only when it exists."""
    if flag:
        return flag
    environ = os.environ if environ is None else environ
    listed = [entry for entry in environ.get("KUBECONFIG", "").split(os.pathsep) if entry]
    if listed:
        return next((entry for entry in listed if os.path.exists(entry)), listed[0])
    default = os.path.join(home if home is not None else os.path.expanduser("~"), ".kube", "config")
    return default if os.path.exists(default) else None


async def connect(flag: str | None = None, *, context: str | None = None, timeout: float = 10.0) -> KubeApi:
    """The client of `explain` and `audit`: the kubeconfig kubectl would use, else in-cluster."""
    path = kubeconfig_path(flag)
    if path:
        return await KubeApi.from_kubeconfig(path, context=context, timeout=timeout)
    return KubeApi.in_cluster(timeout=timeout)


def command_line_access(settings: KubeSettings, *, kubeconfig: str | None = None, context: str | None = None,
                        environ: Mapping[str, str] | None = None, home: str | None = None) -> KubeSettings:
    """The controller's settings with the same rule applied: ``--kubeconfig`` wins over the settings file; with no
    ``kube.access`` written in the settings, a kubeconfig kubectl would use replaces the in-cluster default (a
    controller started from a laptop, or a test, reaches the cluster ``kubectl`` reaches). A ``kube.access`` the
    settings name is kept as it is."""
    path = kubeconfig
    if not path and "access" not in settings.model_fields_set:
        path = kubeconfig_path(None, environ=environ, home=home)
    update: dict[str, str] = {"access": "kubeconfig", "kubeconfig": path} if path else {}
    if context:
        update["context"] = context
    return settings.model_copy(update=update) if update else settings

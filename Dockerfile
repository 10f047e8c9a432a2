# Two images from one build, one per identity:
#   docker build --target agent -t ghcr.io/gpu-watchdog/gpu-watchdog:0.1.0 .  (the DaemonSet; the default target)
#   docker build --target controller -t ghcr.io/gpu-watchdog/gpu-watchdog-controller:0.1.0 .  (the Deployment)
# The project lives in its own virtual environment (/opt/gpu-watchdog), the only place its `watchdog` import package
# is installed (it shares that name with an unrelated library).
# libnvidia-ml comes from the host through the NVIDIA container runtime (NVIDIA_DRIVER_CAPABILITIES=utility).
#
# Base images are pinned to an exact release tag (Python 3.12.11 on Debian 12 "bookworm"), never a moving tag such
# as `3.12-slim`; a new patch release is a reviewed change of these three lines. They are not pinned by digest: no
# container registry can be reached where this file was written, so no digest could be resolved or checked. Resolve
# it where you build (`docker buildx imagetools inspect python:3.12.11-slim-bookworm`) and append `@sha256:<digest>`
# to the three FROM lines.
FROM python:3.12.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY watchdog ./watchdog
COPY scenarios ./scenarios
RUN python -m venv /opt/gpu-watchdog && /opt/gpu-watchdog/bin/pip install --no-cache-dir .

# The controller talks to the API server and serves a webhook: nothing on the node, so it runs as nobody
# (numeric, so the kubelet can check runAsNonRoot without reading /etc/passwd) under Pod Security "restricted".
FROM python:3.12.11-slim-bookworm AS controller
COPY --from=build /opt/gpu-watchdog /opt/gpu-watchdog
# `kubectl exec deploy/gpu-watchdog-controller -- gpu-watchdog whatif …` finds the command by name.
ENV PATH=/opt/gpu-watchdog/bin:$PATH
USER 65534:65534
ENTRYPOINT ["/opt/gpu-watchdog/bin/gpu-watchdog"]
CMD ["controller"]

# The node agent runs as uid 0 with every capability dropped (deploy/daemonset.yaml): it connects to the kubelet's
# pod-resources socket (/var/lib/kubelet/pod-resources/kubelet.sock, owned by root, writable by its owner only)
# and opens the NVIDIA device nodes; it also reads /proc/<pid>/cgroup of other containers' processes through the
# host's /proc. uid 0 is the owner those checks ask for; no capability is needed on top. The DaemonSet keeps the
# root filesystem read-only.
FROM python:3.12.11-slim-bookworm AS agent
COPY --from=build /opt/gpu-watchdog /opt/gpu-watchdog
# hadolint ignore=DL3002
USER 0:0
ENTRYPOINT ["/opt/gpu-watchdog/bin/gpu-watchdog"]
CMD ["run"]

# The node agent / controller image. The project lives in its own virtual environment (/opt/gpu-watchdog), the only
# place its `watchdog` import package is installed (it shares that name with an unrelated library).
# libnvidia-ml comes from the host through the NVIDIA container runtime (NVIDIA_DRIVER_CAPABILITIES=utility).
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY watchdog ./watchdog
COPY scenarios ./scenarios
RUN python -m venv /opt/gpu-watchdog && /opt/gpu-watchdog/bin/pip install --no-cache-dir .

FROM python:3.12-slim
COPY --from=build /opt/gpu-watchdog /opt/gpu-watchdog
# Runs as root: the kubelet's pod-resources socket is root-only. The DaemonSet keeps the root filesystem read-only.
ENTRYPOINT ["/opt/gpu-watchdog/bin/gpu-watchdog"]
CMD ["run"]

#!/usr/bin/env bash
# Stages, in .whl/ (git-ignored), the wheels gpu-watchdog needs on the device machine beyond what its image has.
# The device image (Python 3.12, PyTorch) already holds numpy, aiohttp, grpcio, protobuf, prometheus-client,
# pyyaml, nvidia-ml-py, attrs and requests; it cannot reach a package index, so the rest travel as wheels.
# Run here, where pip reaches PyPI:  bash tools/gpu-wheels.sh   (then tools/gpu-check.sh runs there).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
rm -rf .whl && mkdir -p .whl
platforms=()
for n in 2_39 2_35 2_34 2_31 2_28 2_27 2_24 2_17; do platforms+=(--platform "manylinux_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# The versions this project's tests run with; one version of each, as the device's --no-deps install needs.
wheels=(
  "pydantic==2.14.4" "pydantic-core==2.50.5" "annotated-types==0.8.0" "typing-inspection==0.4.5" "kubernetes==37.0.2" "durationpy==0.11" "aiohttp-retry==2.9.1" "websocket-client==1.9.2" "requests-oauthlib==2.0.0" "oauthlib==4.0.1" "aiomqtt==2.5.1" "paho-mqtt==2.2.0" "jsonschema==4.26.0" "jsonschema-specifications==2025.9.1" "referencing==0.37.0" "rpds-py==2026.9.1" "typing-extensions==4.16.0"
)
for spec in "${wheels[@]}"; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl "$spec"
done
du -sh .whl

"""The README's install section is what a user types: its helm commands, replayed in order with Helm's own --set
parser, render objects that validate; its image names and version are the chart's."""

from __future__ import annotations

import re
import shlex

import helm_python
import yaml

from tests.deploy.chart_helpers import CHART, ROOT, objects, one, validate
from watchdog import __version__

README = (ROOT / "README.md").read_text()


def install_section() -> str:
    return re.search(r"^## Install on a cluster\n(.*?)^## ", README, re.S | re.M).group(1)


def shell_lines() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", install_section(), re.S)
    return [line for block in blocks for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def variables() -> dict[str, str]:
    found = {}
    for line in shell_lines():
        match = re.match(r"^([A-Z]+)=(\S+)", line)
        if match:
            found[match[1]] = match[2]
    return found


def merged(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def test_each_helm_command_renders_valid_objects_in_the_order_given():
    values: dict = {}
    commands = 0
    for line in shell_lines():
        words = shlex.split(line)
        if words[:2] not in (["helm", "install"], ["helm", "upgrade"]):
            continue
        commands += 1
        assert words[2:4] == ["gpu-watchdog", "deploy/helm/gpu-watchdog"]
        if words[1] == "install" or "--reuse-values" not in words:
            values = {}
        for flag, expression in zip(words, words[1:]):
            if flag == "--set":
                for name, value in variables().items():
                    expression = expression.replace(f"${name}", value)
                values = merged(values, helm_python.parse_set_string(expression))
        docs = objects(values)
        for doc in docs:
            validate(doc)
    assert commands >= 3
    # After the last command: enforcing, monitored, with dashboards, in the registry the README pushed to.
    daemonset = one(docs, "DaemonSet")
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"{variables()['REGISTRY']}/gpu-watchdog:{__version__}")
    policy = yaml.safe_load(one(docs, "ConfigMap", "gpu-watchdog-policy", "gpu-watchdog")["data"]["policy.yaml"])
    assert policy["action"]["mode"] == "enforce"
    assert {doc["kind"] for doc in docs} >= {"PodMonitor", "ServiceMonitor", "PrometheusRule", "Secret"}


def test_the_images_built_are_the_images_the_chart_names():
    assert variables()["VERSION"] == __version__ == yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    built = {words[words.index("--target") + 1]: words[words.index("-t") + 1]
             for words in map(shlex.split, shell_lines()) if words[:2] == ["docker", "build"]}
    assert built == {"agent": "$REGISTRY/gpu-watchdog:$VERSION",
                     "controller": "$REGISTRY/gpu-watchdog-controller:$VERSION"}
    stages = re.findall(r"^FROM \S+ AS (\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert {"agent", "controller"} <= set(stages)

"""The Makefile's entry points: `make test` installs Debian packages that are really missing, `make demo PORT=`, the
venv's layers (the demo installs the runtime only, the tests add their extras) and `make template`.

Runs the real `make` with fake `dpkg-query`/`apt-get`/`sudo` first on PATH, or with `-n`, so nothing is installed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def fake(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def test_a_removed_but_not_purged_package_is_reinstalled(tmp_path):
    calls = tmp_path / "apt-calls"
    # dpkg-query -W -f='${db:Status-Status}' PKG: prometheus was `apt-get remove`d (config files remain).
    fake(tmp_path, "dpkg-query", 'for last; do :; done\n'
         '[ "$last" = prometheus ] && printf config-files || printf installed\n')
    fake(tmp_path, "dpkg", 'exit 0\n')  # `dpkg -s` says yes to a removed package: the old check's mistake
    fake(tmp_path, "apt-get", f'echo "$@" >> {calls}\n')
    fake(tmp_path, "sudo", 'exec "$@"\n')
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = subprocess.run(["make", "-s", "-C", str(REPO), "debs"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "installing Debian packages: prometheus" in done.stdout
    installs = [line for line in calls.read_text().splitlines() if " install " in f" {line} "]
    assert len(installs) == 1 and installs[0].split()[-1] == "prometheus"


def test_make_demo_takes_a_port(tmp_path):
    done = subprocess.run(["make", "-n", "-C", str(REPO), "demo", "PORT=9500", "DEMO_ARGS=--speed 5"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "gpu-watchdog demo --port 9500 --speed 5" in done.stdout


def planned(tmp_path: Path, target: str, *extra: str) -> list[str]:
    """The commands `make TARGET` would run against a venv at tmp_path/venv (`make -n`: nothing is run)."""
    done = subprocess.run(["make", "-n", "-C", str(REPO), target, f"VENV={tmp_path / 'venv'}", *extra],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if "pip install" in line]


def test_the_demo_installs_the_runtime_only_and_the_tests_add_their_extras(tmp_path):
    # From nothing: the demo's venv holds the project and its runtime dependencies, never the test extras.
    assert [line.split()[-1] for line in planned(tmp_path, "demo")[1:]] == ["."]
    assert [line.split()[-1] for line in planned(tmp_path, "test")[1:]] == [".", "'.[test]'"]
    # After `make demo`, `make test` adds the extras and nothing else; after `make test`, `make demo` installs nothing.
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / ".installed").touch()
    assert [line.split()[-1] for line in planned(tmp_path, "test")] == ["'.[test]'"]
    (tmp_path / "venv" / ".installed-test").touch()
    assert planned(tmp_path, "demo") == [] and planned(tmp_path, "test") == []
    # A changed pyproject.toml reinstalls both layers.
    os.utime(tmp_path / "venv" / ".installed", (0, 0))
    assert [line.split()[-1] for line in planned(tmp_path, "test")[1:]] == [".", "'.[test]'"]


def test_make_template_renders_with_the_users_values(tmp_path):
    done = subprocess.run(["make", "-n", "-C", str(REPO), "template", f"VENV={tmp_path / 'venv'}",
                           "VALUES=a.yaml,b.yaml", "SET=mode=enforce", "OUT=rendered"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "pip install --quiet -e '.[chart]'" in done.stdout and "'.[test]'" not in done.stdout
    assert ("tools/render_manifests.py --template --values a.yaml,b.yaml --set mode=enforce --out rendered"
            in " ".join(done.stdout.replace("\\\n", " ").split()))

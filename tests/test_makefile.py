"""The Makefile's two entry points: `make test` installs Debian packages that are really missing, `make demo PORT=`.

Runs the real `make` with fake `dpkg-query`/`apt-get`/`sudo` first on PATH, so nothing is installed.
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

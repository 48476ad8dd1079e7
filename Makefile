# Two commands on a fresh machine with Python 3.11+ and make:
#   make run    start the service on the embedded PostgreSQL (http://127.0.0.1:37777)
#   make test   install everything, lint, type-check, check migrations, run the tests

SHELL := /bin/bash
UV := $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)
PYTEST_ARGS ?=
# Test workers for `make pytest`, each with its own PostgreSQL (tests/conftest.py). Half the
# serial run is waiting (timeouts, subprocesses, the database): see docs/benchmarks.md.
# `uv run pytest tests/x.py` stays serial; PYTEST_WORKERS=0 runs the whole suite serially.
PYTEST_WORKERS ?= 2
# loadgroup: tests spread one by one, but those marked xdist_group (module-scoped `agmem serve`
# fixtures) run on one worker, which starts their server once.
PYTEST_DIST ?= loadgroup

.PHONY: install run test lint typecheck migrations-check pytest bench format clean

.tools/bin/uv:
	python3 -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv

# --compile-bytecode: where PYTHONDONTWRITEBYTECODE is set (many container images), Python would
# otherwise compile every module from source in each process: ~5 s of CPU for the test run's own
# imports and ~3 s for each `agmem` process the tests start. Once per new venv (~13 s), then free.
# The project itself is an editable install, which that leaves out: app/ compiled here saves each
# `agmem` process ~0.05 s (a command) to ~0.2 s (serve's 144 modules) of CPU, ~230 processes a
# test run. compileall skips what is current; Python recompiles in memory whatever changed since.
install: $(UV)
	$(UV) sync --frozen --compile-bytecode
	$(UV) run --frozen python -m compileall -q app bench tests

run: install
	$(UV) run agmem serve

test: install lint typecheck migrations-check pytest

lint: install
	$(UV) run ruff check .
	$(UV) run ruff format --check .

typecheck: install
	$(UV) run mypy --strict app

migrations-check: install
	$(UV) run python -m tests.migrations_check

pytest: install
	$(UV) run pytest -n $(PYTEST_WORKERS) --dist $(PYTEST_DIST) $(PYTEST_ARGS)

bench: install
	$(UV) run python -m bench.all

format: install
	$(UV) run ruff check --fix .
	$(UV) run ruff format .

clean:
	rm -rf .venv .tools .pytest_cache .mypy_cache .ruff_cache

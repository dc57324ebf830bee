# Two commands on a fresh machine: `make demo` (convert a bundled real trace) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The venv is installed again when what it installs changes (pyproject.toml less pytest's, ruff's
# and mypy's settings, and this file's pip lines), not when a test marker or a lint rule does.
DEPS := $(shell { awk '/^\[/ { tool = ($$0 ~ /^\[+tool\.(pytest|ruff|mypy)/) } !tool' pyproject.toml; \
	grep 'pip install' Makefile; } | cksum | cut -d' ' -f1)
STAMP := $(VENV)/.installed-$(DEPS)
DEVSTAMP := $(VENV)/.installed-dev-$(DEPS)
# make test: the tests but the slow ones, each sweep over real files on one file of each format
# (tests/conftest.py); make check runs all of them, as CI does.
FAST := not slow and not corpus and not browser and not spark and not sweep

.PHONY: demo test test-all check lint typecheck bench clean install dev fixtures

$(STAMP):
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	rm -f $(VENV)/.installed*
	touch $@

$(DEVSTAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[dev,dask,spark]'
	$(BIN)/pip install -q torch==2.13.0 || echo "torch not installed: torch tests will be skipped"
	touch $@

install: $(STAMP)
dev: $(DEVSTAMP)

demo: $(STAMP)
	$(BIN)/traceconv ingest fixtures/pytorch/h200/train_buggy.pt.trace.json.gz -o build/demo/train_buggy.parquet
	$(BIN)/traceconv summary build/demo/train_buggy.parquet

test: $(DEVSTAMP)
	@echo 'make test: the fast suite, pytest -m "$(FAST)":'
	@echo '  each sweep over the real files on one trace and one export. Left to make check (CI):'
	@echo '  slow (large and hostile inputs, Dask clusters of their own), corpus (../shared/corpus beyond'
	@echo '  fixtures/), browser (headless Chromium), spark (a Spark session), sweep (the other files);'
	@echo '  the property tests that convert a trace per example take 10 examples, not 30.'
	$(BIN)/pytest -q -n 2 -m "$(FAST)" --hypothesis-profile=fast

test-all: $(DEVSTAMP)
	$(BIN)/pytest -q -n 2

lint: $(DEVSTAMP)
	$(BIN)/ruff check traceconv tests bench
	$(BIN)/ruff format --check traceconv tests bench

typecheck: $(DEVSTAMP)
	$(BIN)/mypy traceconv

check: lint typecheck test-all

fixtures:
	$(PY) tests/tools/sync_fixtures.py

bench: $(DEVSTAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf build $(VENV) .pytest_cache .mypy_cache

# Two commands on a fresh machine: `make demo` (convert a bundled real trace) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev

.PHONY: demo test check lint typecheck bench clean install dev fixtures

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
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
	$(BIN)/pytest -q -n 2

lint: $(DEVSTAMP)
	$(BIN)/ruff check traceconv tests bench
	$(BIN)/ruff format --check traceconv tests bench

typecheck: $(DEVSTAMP)
	$(BIN)/mypy traceconv

check: lint typecheck test

fixtures:
	$(PY) tests/tools/sync_fixtures.py

bench: $(DEVSTAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf build $(VENV) .pytest_cache .mypy_cache

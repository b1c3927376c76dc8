# One entry point for a fresh machine: `make test` and `make demo` build the virtual environment on demand.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: test lint typecheck unit docs demo bench sandbox clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,docs]'
	touch $(STAMP)

## test: ruff, mypy --strict, the docs build (warnings as errors) and the whole pytest suite.
test: lint typecheck docs unit

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

unit: $(STAMP)
	$(BIN)/pytest

## demo: run a command in the demo workspace's deployment on the embedded sandbox cluster.
demo: $(STAMP)
	$(BIN)/python -m kuber_exec_cli demo

## bench: throughput, memory and latency, side by side, printed as a table.
bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

sandbox: $(STAMP)
	$(BIN)/kuber-exec sandbox

clean:
	rm -rf $(VENV) build dist src/*.egg-info .mypy_cache .pytest_cache .ruff_cache

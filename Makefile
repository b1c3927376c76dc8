# One entry point for a fresh machine: `make test` and `make demo` build the virtual environment on demand.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

WEB := src/kuber_exec_web
# The docs' diagrams: Graphviz compiled to WebAssembly, from the npm registry (docs/hooks/diagrams.py).
DIAGRAMS := docs/hooks

.PHONY: test lint typecheck unit docs demo bench bench-compare bench-browser drop-soak sandbox web test-browser wheel-venv clean

# The venv with every extra the tests use; from the npm registry, pinned by the lockfiles and never
# copied into the repository: xterm.js for the browser terminal, and the diagrams' Graphviz (so the
# docs build needs no system package).
$(STAMP): pyproject.toml $(WEB)/package-lock.json $(DIAGRAMS)/package-lock.json
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,docs]'
	cd $(WEB) && npm ci --no-audit --no-fund --loglevel=error
	cd $(DIAGRAMS) && npm ci --no-audit --no-fund --loglevel=error
	touch $(STAMP)

## test: ruff, mypy --strict, the docs build (warnings as errors) and the whole pytest suite.
test: lint typecheck docs unit

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples docs/hooks build_backend
	$(BIN)/ruff format --check src tests benchmarks examples docs/hooks build_backend

typecheck: $(STAMP)
	$(BIN)/mypy

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

unit: $(STAMP)
	$(BIN)/pytest

## demo: run a command in the demo workspace's deployment on the embedded sandbox cluster.
demo: $(STAMP)
	$(BIN)/python -m kuber_exec_cli demo

## bench: throughput, CPU, memory and latency on the benchmark server (benchmarks/fast_server.py),
## side by side, and end to end on the sandbox, printed as a table and written to
## benchmarks/results/latest.json (the docs' charts); then the target cache's memory and 1,000
## sessions, 10,000 concurrent sessions per runtime (benchmarks/load.py) and the time to leave a
## blocked session. The real cluster's own table: make realcluster-bench (with the cluster up).
bench: $(STAMP)
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/cache.py --no-latency
	$(BIN)/python benchmarks/load.py
	$(BIN)/python benchmarks/leave.py

## bench-compare: the working tree against REF (make bench-compare REF=main), interleaved in one
## run on the benchmark server: new/old ratios of throughput, CPU per byte, peak RSS and latency.
## ARGS=--instructions adds callgrind's instruction counts per message (repeatable on a busy box).
bench-compare: $(STAMP)
	@test -n "$(REF)" || { echo "usage: make bench-compare REF=<git ref> [ARGS=--instructions]" >&2; exit 2; }
	$(BIN)/python benchmarks/compare.py "$(REF)" $(ARGS)

sandbox: $(STAMP)
	$(BIN)/kuber-exec sandbox

## web: the browser terminal on the demo sandbox (loopback; prints a one-time token URL).
web: $(STAMP)
	$(BIN)/kuber-exec web --sandbox

## test-browser: the real-browser tests (headless Chromium), in a loopback-only network namespace.
## The wheel venv is made (or reused) first: there is no network inside the namespace.
test-browser: $(STAMP) wheel-venv
	sh tests/run_browser_tier.sh

## bench-browser: the browser terminal's keystroke-to-screen time against a plain input box's, in
## one headless Chromium run inside a loopback-only network namespace (needs root); writes
## benchmarks/results/browser.json. ARGS=--against=/path/to/another/tree measures both.
bench-browser: $(STAMP)
	unshare --net sh -c 'ip link set lo up && exec nice $(BIN)/python benchmarks/browser_keystroke.py "$$@"' sh $(ARGS)

## drop-soak: the shared terminal's drop test at the issue's scale (100 tries of seq, top and idle,
## 30 s drops, 30 pages at a time in one headless Chromium, on the uvicorn and the hypercorn-on-trio
## server), in a loopback-only network namespace (needs root); writes benchmarks/results/drop_soak.json.
## ARGS=--tries=5 --drop-seconds=5 for a quick one.
drop-soak: $(STAMP)
	unshare --net sh -c 'ip link set lo up && exec $(BIN)/python benchmarks/drop_soak.py "$$@"' sh $(ARGS)

## wheel-venv: this tree's wheel in a fresh venv (build/wheel-venv), remade only when it changed.
wheel-venv: $(STAMP)
	$(BIN)/python scripts/wheel_venv.py build/wheel-venv

# The real-cluster tier: realcluster, realcluster-down, realcluster-test (needs root).
include mk/realcluster.mk

clean:
	rm -rf $(VENV) build dist src/*.egg-info .mypy_cache .pytest_cache .ruff_cache

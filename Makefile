# The whole setup on a fresh Debian machine is `make demo` (the real thing) and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test lint typecheck check bench clean

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/slurm-sidecars demo --tour

# The suite mostly waits on Slurm (scheduling passes, client retries, restarts): pytest-xdist runs it
# in TEST_WORKERS processes, each with its own clusters; worksteal evens out the slow tests at the end.
# 8 on 2 cores, measured: the whole run needs about 3 min of CPU but 20 min of test time.
# TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 8

test: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal

lint: setup
	$(VENV)/bin/ruff check sidecars tests bench scripts
	$(VENV)/bin/ruff format --check sidecars tests bench scripts

typecheck: setup
	$(VENV)/bin/mypy

check: lint typecheck test

bench: setup
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# The whole setup on a fresh Debian machine is `make demo` (the real thing) and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test lint typecheck check bench clean

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/slurm-sidecars demo --tour

test: setup
	$(PY) -m pytest

lint: setup
	$(VENV)/bin/ruff check sidecars tests bench scripts
	$(VENV)/bin/ruff format --check sidecars tests bench scripts
	$(VENV)/bin/lint-imports --no-cache

typecheck: setup
	$(VENV)/bin/mypy

check: lint typecheck test

bench: setup
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache

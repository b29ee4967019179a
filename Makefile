# The whole setup on a fresh Debian machine is `make demo` (the real thing) and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test test-fast test-containers soak lint typecheck check bench clean images compose-tour kube-play

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/slurm-sidecars demo --tour

# The suite mostly waits on Slurm (scheduling passes, client retries, restarts): pytest-xdist runs it
# in TEST_WORKERS processes, each with its own clusters; worksteal evens out the slow tests at the end.
# 8 on 2 cores, measured: 12 min 11 s of wall time at 1,573 tests (load 3-5; 10 workers measured no
# faster) and 765 s of CPU (user+sys of every process it starts), which is what bounds it. At 1,468
# tests beside other runs (load 12-20): 20 min 45 s and 749 s of CPU, from 24 min 34 s and 911 s
# at load 17-20 before the cuts in CONTRIBUTING.md's "The suite".
# TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 8
# Python's bytecode cache, kept outside the tree and written even where PYTHONDONTWRITEBYTECODE is set
# (it is on the machines this was measured on): a run starts hundreds of Python processes (the
# workers, the daemons under test, our CLI), and each would otherwise compile every module it
# imports. Measured: a worker's collection 6.5 -> 2.3 s of CPU, a CLI-heavy sample of tests 16% less
PYCACHE := $(HOME)/.cache/slurm-sidecars/pycache

test: setup
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(PYCACHE) \
		$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not containers"

# for developers, not what CI runs: every test that needs no Slurm, and on one release (FAST_RELEASE)
# a few files that cover each daemon's path through real Slurm (config-sync's apply and rollback, the
# worker's drain, the control plane's drains and cordons, the Slurm client), each of their tests on
# that release (--every-release: not only those tests/releases.py gives it). `make test` before a push.
FAST_RELEASE ?= slurm26
FAST_SLURM_FILES := test_apply or test_rollback or test_reads_end_together or test_drain or test_drains or test_cordon_sync or test_client_real
test-fast: setup
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(PYCACHE) \
		$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not containers" --every-release \
		-k "(not slurm22 and not slurm24 and not slurm26) or ($(FAST_RELEASE) and ($(FAST_SLURM_FILES)))"

# the container stage (marker `containers`): builds the images with podman, runs the compose tour and
# `podman kube play` of manifests/base. Apart from `make test`: its three long tests (about 7 min with
# the images cached) would otherwise be the tail of every run; .ci/run runs both. One process: each
# test's guard checks that no container, pod or volume of ours is left, which a second test running
# beside it would trip.
test-containers: setup
	$(PY) -m pytest -n 0 -m containers

# the soak: the suite SOAK_RUNS times (3) in a row, each beside a CPU hog (stress-ng --cpu 2), each
# failure printed with its test id and a tally at the end (scripts/soak.sh; SOAK_ARGS go to pytest)
SOAK_RUNS ?= 3
SOAK_ARGS ?=
soak: setup
	SOAK_RUNS=$(SOAK_RUNS) TEST_WORKERS=$(TEST_WORKERS) bash scripts/soak.sh $(SOAK_ARGS)

lint: setup
	$(VENV)/bin/ruff check sidecars tests bench scripts
	$(VENV)/bin/ruff format --check sidecars tests bench scripts
	$(VENV)/bin/lint-imports --no-cache

typecheck: setup
	$(VENV)/bin/mypy

check: lint typecheck test test-containers

# the images, built here with podman on a Debian sid base made with debootstrap (cached)
images:
	@bash scripts/images.sh

# the demo's tour through the compose stack's real containers; removes everything it made
compose-tour: setup images
	$(PY) scripts/compose_tour.py

# manifests/base's pods run by `podman kube play`, probes, security contexts and preStop checked
kube-play: setup images
	$(PY) scripts/kube_play.py

bench: setup
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache

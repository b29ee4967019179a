#!/usr/bin/env bash
# Whole setup on a fresh Debian/Ubuntu machine, as root (or with sudo): the Debian packages the real
# local Slurm needs, and a virtualenv with this project in it. Safe to run again: it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium: the web page's tests drive Debian's headless Chromium over the DevTools Protocol
# mariadb-server, slurmdbd: the accounting shape (a database of its own per cluster, slurmdbd on it)
PKGS=(slurmctld slurmd slurm-client munge mariadb-server slurmdbd debootstrap util-linux iproute2 procps chromium)
source scripts/apt-missing.sh
apt_missing setup "${PKGS[@]}"

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing the project and its dev tools into .venv"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e '.[dev]'
  touch "$stamp"
fi

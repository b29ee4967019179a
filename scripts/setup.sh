#!/usr/bin/env bash
# Whole setup on a fresh Debian/Ubuntu machine, as root (or with sudo): the Debian packages the real
# local Slurm needs, and a virtualenv with this project in it. Safe to run again: it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium: the web page's tests drive Debian's headless Chromium over the DevTools Protocol
PKGS=(slurmctld slurmd slurm-client munge debootstrap util-linux iproute2 procps chromium)
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  # policy-rc.d may be absent on a fresh machine: keep the packages from starting system daemons
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

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

#!/bin/sh
# Installs slurm-sidecars into /opt/slurm-sidecars/venv: a virtualenv of the image's own python3
# (>= 3.11), with the wheel built from the source tree given as $1 and every dependency at the
# exact version images/constraints.txt pins. Run by both Dockerfiles' final stage, on whatever base
# BASE_IMAGE chose: a base without a suitable python3 gets its distribution's (apt-get or dnf).
#
# Why the base's python3 and not an interpreter of our own: its packages come from the same
# registry as Slurm's (nothing is fetched from anywhere but the distribution and PyPI), it gets
# the distribution's security updates with the base, and it adds ~30 MB where a standalone CPython
# adds ~100 MB.
set -eu
src=$1
constraints=$2
prefix=/opt/slurm-sidecars

has_python() {
  python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}
if ! has_python; then
  if command -v apt-get >/dev/null; then
    apt-get update
    apt-get install -y --no-install-recommends python3 python3-venv
    rm -rf /var/lib/apt/lists/*
  elif command -v dnf >/dev/null; then
    dnf install -y python3.12
    dnf clean all
    ln -sf python3.12 /usr/bin/python3
  fi
  has_python || { echo "install-sidecars: no python3 >= 3.11 with venv in this base" >&2; exit 1; }
fi

# a CA bundle mounted for the build (scripts/images.sh: a TLS-inspecting proxy) is trusted by pip
[ -f /run/build-ca/ca-certificates.crt ] && export PIP_CERT=/run/build-ca/ca-certificates.crt

# pip builds the wheel in the source tree: build from a writable copy of exactly what it needs
mkdir -p /tmp/sidecars-src
cp -r "$src/pyproject.toml" "$src/README.md" "$src/sidecars" /tmp/sidecars-src/
python3 -m venv "$prefix/venv"
PIP_CONSTRAINT=$constraints "$prefix/venv/bin/pip" install --disable-pip-version-check \
  --constraint "$constraints" /tmp/sidecars-src
# pip itself is not needed at run time
"$prefix/venv/bin/pip" uninstall --disable-pip-version-check -y -q pip
rm -rf /tmp/sidecars-src
find "$prefix/venv" -name '__pycache__' -path '*/pip/*' -prune -exec rm -rf {} +
mkdir -p "$prefix/bin"
ln -sf "$prefix/venv/bin/slurm-sidecars" "$prefix/bin/slurm-sidecars"
# the console command runs on this base (imports every role's package)
"$prefix/bin/slurm-sidecars" --help >/dev/null

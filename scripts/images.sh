#!/usr/bin/env bash
# `make images`: the slurmctld and slurmd images, built here with podman on a Debian base made here.
#
# No container registry is reachable from this machine, so the base is a `debootstrap` tree of
# Debian sid imported with `podman import` (kept in podman's store; rebuilt only when missing).
# Sid because it carries Slurm 26.05, the release Slinky's chart defaults to. The Dockerfiles take
# that base as DEBIAN_IMAGE (Docker elsewhere pulls debian:sid-slim instead) and BASE_IMAGE still
# selects a Slinky image in place of the Debian stage.
#
#   IMAGE_TAG=0.1.0 (default)   IMAGE_PREFIX=slurm-sidecars (default)
#   EXTRA_BUILD_ARGS="..."      passed on to `podman build` (the tests use it)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/containers-setup.sh

SUITE=sid
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE=localhost/slurm-sidecars/debian:${SUITE}
TAG=${IMAGE_TAG:-0.1.0}
PREFIX=${IMAGE_PREFIX:-slurm-sidecars}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/slurm-sidecars
mkdir -p "$CACHE"

# ------------------------------------------------------------------------------------------ base
make_base() {
  local root
  root=$(mktemp -d /var/tmp/slurm-sidecars-base.XXXXXX)
  trap 'rm -rf "$root"' RETURN
  echo "images: debootstrap $SUITE (minbase) for the base image $BASE ..."
  debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR" >"$CACHE/debootstrap-$SUITE.log" 2>&1 || {
    tail -20 "$CACHE/debootstrap-$SUITE.log" >&2
    return 1
  }
  # the mirror's sid Release file can be past its Valid-Until date: apt would refuse every update
  echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99no-valid-until"
  # what the official slim images drop: no docs, man pages or package caches in layers
  cat >"$root/etc/dpkg/dpkg.cfg.d/01-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  echo 'APT::Install-Recommends "false"; APT::Install-Suggests "false";' >"$root/etc/apt/apt.conf.d/01-slim"
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
  tar -C "$root" -c . | podman import -q --change 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
  echo "images: imported $BASE"
}
# a half-made lock dir from an interrupted run is taken over after its owner is gone
exec 9>"$CACHE/base-image.lock"
flock 9
podman image exists "$BASE" || make_base
flock -u 9

# ---------------------------------------------------------------------------------------- images
# podman 4.3's buildah does not resolve a stage named through an ARG in FROM (`FROM ${BASE_IMAGE}`
# with BASE_IMAGE=<role>-debian): build that stage as an image of its own first, then hand it to
# the final stage as BASE_IMAGE, exactly as a Slinky image would be.
# The machine's egress proxy re-signs TLS with its own CA: pip in the build trusts the host's CA
# bundle, mounted for the build only (install-sidecars.sh looks for it; nothing stays in a layer).
CA_BUNDLE=${BUILD_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
CA_MOUNT=()
[ -f "$CA_BUNDLE" ] && CA_MOUNT=(-v "$CA_BUNDLE:/run/build-ca/ca-certificates.crt:ro")
# what the sidecars' layer is made from; a change to any of it rebuilds that layer
SOURCE_SHA=$( (git ls-files -s pyproject.toml README.md sidecars images 2>/dev/null ||
  find pyproject.toml README.md sidecars images -type f -exec sha256sum {} +) | sha256sum | cut -c1-16)
# uncommitted changes count too
SOURCE_SHA=$( (echo "$SOURCE_SHA"; git diff HEAD -- pyproject.toml README.md sidecars images 2>/dev/null) |
  sha256sum | cut -c1-16)
podman_build() { # log, then podman build's arguments
  local log=$1
  shift
  # shellcheck disable=SC2086  # EXTRA_BUILD_ARGS is a list of words
  podman build --runtime runc --build-arg "DEBIAN_IMAGE=$BASE" --build-arg "SOURCE_SHA=$SOURCE_SHA" "${CA_MOUNT[@]}" ${EXTRA_BUILD_ARGS:-} \
    "$@" . >>"$log" 2>&1 || {
    tail -40 "$log" >&2
    echo "images: podman build $* failed (whole log: $log)" >&2
    return 1
  }
}
build() { # role
  local role=$1 started log
  started=$(date +%s)
  log="$CACHE/build-$role.log"
  : >"$log"
  echo "images: building $PREFIX/$role:$TAG ..."
  local old
  old=$(podman image inspect --format '{{.Id}}' "$PREFIX/$role:$TAG" "localhost/$PREFIX/$role-debian:$TAG" 2>/dev/null || true)
  podman_build "$log" -f "images/$role.Dockerfile" --target "$role-debian" -t "localhost/$PREFIX/$role-debian:$TAG"
  podman_build "$log" -f "images/$role.Dockerfile" --build-arg "BASE_IMAGE=localhost/$PREFIX/$role-debian:$TAG" \
    -t "$PREFIX/$role:$TAG"
  # the images a rebuild replaced, now untagged (one still in use stays)
  for id in $old; do
    podman image inspect --format '{{len .RepoTags}}' "$id" 2>/dev/null | grep -qx 0 &&
      podman rmi "$id" >/dev/null 2>&1 || true
  done
  echo "images: built $PREFIX/$role:$TAG in $(($(date +%s) - started))s"
}
for role in ${IMAGE_ROLES:-slurmctld slurmd}; do
  build "$role"
done
for role in ${IMAGE_ROLES:-slurmctld slurmd}; do
  podman image inspect --format "{{.Size}}" "$PREFIX/$role:$TAG" |
    awk -v n="$PREFIX/$role:$TAG" '{ printf "images: %-32s %6.1f MB\n", n, $1 / 1e6 }'
done

#!/usr/bin/env bash
# What building and running the images needs on this machine, as root: podman with runc, buildah,
# podman-compose, the CNI dnsname plugin (containers find each other by service name), catatonit
# (the pause process of the pods `podman kube play` makes), and
# /etc/containers/containers.conf with the two settings the machine needs. Safe to run again.
set -euo pipefail

PKGS=(podman buildah runc podman-compose golang-github-containernetworking-plugin-dnsname catatonit debootstrap)
source "$(dirname "$0")/apt-missing.sh"
apt_missing containers-setup "${PKGS[@]}"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

# The machine withholds CAP_SYS_RESOURCE, so a container may not raise its open-file limit
# (default_ulimits), and crun refuses its hybrid cgroups (runtime = "runc"; every podman command,
# podman-compose's and kube play's included, then uses runc). Each key is added only when absent.
CONF=/etc/containers/containers.conf
$SUDO mkdir -p /etc/containers
$SUDO touch "$CONF"
add_key() { # section key line
  local section=$1 key=$2 line=$3
  grep -Eq "^[[:space:]]*${key}[[:space:]]*=" "$CONF" && return 0
  if grep -q "^\[${section}\]" "$CONF"; then
    $SUDO sed -i "/^\[${section}\]/a ${line}" "$CONF"
  else
    printf '\n[%s]\n%s\n' "$section" "$line" | $SUDO tee -a "$CONF" >/dev/null
  fi
  echo "containers-setup: $CONF: [$section] $line"
}
add_key containers default_ulimits 'default_ulimits = []'
add_key engine runtime 'runtime = "runc"'

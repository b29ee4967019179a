#!/usr/bin/env bash
# What building and running the images needs on this machine, as root: podman with runc, buildah,
# podman-compose, the CNI dnsname plugin (containers find each other by service name), catatonit
# (the pause process of the pods `podman kube play` makes), and
# /etc/containers/containers.conf with the two settings the machine needs. Safe to run again.
set -euo pipefail

PKGS=(podman buildah runc podman-compose golang-github-containernetworking-plugin-dnsname catatonit debootstrap)
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "containers-setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get -o DPkg::Lock::Timeout=900 update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
fi

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

# Sourced by setup.sh and containers-setup.sh: `apt_missing WHO PACKAGE...` installs, as root (or
# with sudo), those of the Debian packages that are not installed yet, and nothing when all are.
# Another apt (a helper's, unattended-upgrades) may hold the lock: wait for it rather than fail.
apt_missing() {
  local who=$1 sudo="" p
  shift
  [ "$(id -u)" = 0 ] || sudo=sudo
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "$who: installing Debian packages: ${missing[*]}"
  $sudo apt-get -o DPkg::Lock::Timeout=900 update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=900 install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
}

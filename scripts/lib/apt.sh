# shellcheck shell=bash
# Debian packages the scripts need, installed only when missing.

# apt_install_missing LOG_PREFIX PACKAGE...: apt-get installs those of the
# PACKAGEs dpkg does not have installed; nothing when all are there.
apt_install_missing() {
  local prefix="$1" pkg
  shift
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  echo "$prefix: apt-get install ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

#!/usr/bin/env bash
# Installs Debian packages whose command is missing, so the tests that need
# them run instead of skipping. Arguments are COMMAND=PACKAGE[,PACKAGE...]
# pairs: the packages are installed when COMMAND is not on the PATH. Needs
# root or sudo when something is missing; does nothing (and asks no mirror)
# when every command is there.
#
#   ensure-debian-packages.sh chromium=chromium,chromium-driver bwrap=bubblewrap
set -euo pipefail
missing=()
for pair in "$@"; do
  cmd=${pair%%=*}
  if ! command -v "$cmd" >/dev/null 2>&1; then
    IFS=, read -r -a pkgs <<<"${pair#*=}"
    missing+=("${pkgs[@]}")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "missing ${missing[*]} and this user can't install them (no root, no sudo)" >&2
  exit 1
fi
echo "installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for pair in "$@"; do
  command -v "${pair%%=*}" >/dev/null
done

#!/usr/bin/env bash
# Installs Debian packages whose command is missing, so the tests that need
# them run instead of skipping. Arguments are COMMAND=PACKAGE[,PACKAGE...]
# pairs: the packages are installed when COMMAND is not on the PATH. A
# COMMAND of the form py:MODULE is present when python3 can import MODULE
# (python3-venv is the package that brings `ensurepip`, which `python3 -m
# venv` needs). Needs root or sudo when something is missing; does nothing
# (and asks no mirror) when everything is there.
#
#   ensure-debian-packages.sh chromium=chromium,chromium-driver bwrap=bubblewrap py:ensurepip=python3-venv
set -euo pipefail
present() {
  case $1 in
    py:*) python3 -c "import ${1#py:}" >/dev/null 2>&1 ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}
missing=()
for pair in "$@"; do
  cmd=${pair%%=*}
  if ! present "$cmd"; then
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
  present "${pair%%=*}" || { echo "${pair%%=*} is still missing after installing ${pair#*=}" >&2; exit 1; }
done

#!/usr/bin/env bash
# Installs Debian's bubblewrap when it is missing: dshd's sandbox policies
# (workspace-write, read-only, network off) run commands under bwrap. Needs
# root or sudo.
set -euo pipefail
if command -v bwrap >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "bubblewrap is missing and this user can't install it (no root, no sudo)" >&2
  exit 1
fi
echo "installing bubblewrap" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null
command -v bwrap >/dev/null

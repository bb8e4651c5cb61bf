#!/usr/bin/env bash
# Installs Debian's Chromium and ChromeDriver when they are missing, so the
# browser test runs instead of skipping. Needs root or sudo.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "chromium is missing and this user can't install it (no root, no sudo)" >&2
  exit 1
fi
echo "installing chromium and chromium-driver" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
command -v chromium >/dev/null

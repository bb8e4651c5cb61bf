#!/usr/bin/env bash
# Installs the browser test's npm devDependencies (axe-core) from
# tests/package-lock.json. Quick when they are already installed: npm ci runs
# only when node_modules is missing or older than the lock file.
set -euo pipefail
cd "$(dirname "$0")/../tests"
if ! command -v npm >/dev/null 2>&1; then
  echo "npm is missing: install Node.js 20 with npm" >&2
  exit 1
fi
stamp=node_modules/.package-lock.json
if [ -f "$stamp" ] && [ "$stamp" -nt package-lock.json ]; then
  exit 0
fi
echo "installing the browser test's npm dependencies" >&2
npm ci --no-audit --no-fund --ignore-scripts

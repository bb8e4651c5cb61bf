#!/usr/bin/env bash
# Installs the tests' npm devDependencies from their lock files: axe-core
# for the browser test (tests/) and the MCP client for the MCP test
# (tests/mcp/). Quick when they are already installed: npm ci runs only
# where node_modules is missing or older than the lock file.
set -euo pipefail
cd "$(dirname "$0")/../tests"
if ! command -v npm >/dev/null 2>&1; then
  echo "npm is missing: install Node.js 20 with npm" >&2
  exit 1
fi
for dir in . mcp; do
  stamp=$dir/node_modules/.package-lock.json
  if [ -f "$stamp" ] && [ "$stamp" -nt "$dir/package-lock.json" ]; then
    continue
  fi
  echo "installing the npm dependencies of tests/$dir" >&2
  (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts)
done

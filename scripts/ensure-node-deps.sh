#!/usr/bin/env bash
# Installs the pinned npm packages of each directory given (exactly its
# package-lock.json, with `npm ci`) unless they were installed since the lock
# file last changed. Install scripts are not run: none of these packages
# needs one.
set -euo pipefail
command -v npm >/dev/null 2>&1 || { echo "npm is missing: install Node.js 20 or later with npm" >&2; exit 1; }
for dir in "$@"; do
  stamp="$dir/node_modules/.package-lock.json"
  if [ -f "$stamp" ] && [ "$stamp" -nt "$dir/package-lock.json" ]; then
    continue
  fi
  echo "installing npm packages in $dir" >&2
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
done

#!/usr/bin/env bash
# Installs the pinned npm packages of each directory given (exactly its
# package-lock.json, with `npm ci`) unless they were installed since the lock
# file last changed. The directories install at once (npm's cache is safe to
# share; the time goes on fetching and unpacking, not on the CPU). Install
# scripts are not run: none of these packages needs one.
set -euo pipefail
command -v npm >/dev/null 2>&1 || { echo "npm is missing: install Node.js 20 or later with npm" >&2; exit 1; }
pids=() dirs=()
for dir in "$@"; do
  stamp="$dir/node_modules/.package-lock.json"
  if [ -f "$stamp" ] && [ "$stamp" -nt "$dir/package-lock.json" ]; then
    continue
  fi
  echo "installing npm packages in $dir" >&2
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) &
  pids+=("$!") dirs+=("$dir")
done
failed=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "npm ci failed in ${dirs[$i]}" >&2
    failed=1
  fi
done
exit "$failed"

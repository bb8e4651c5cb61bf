#!/usr/bin/env bash
# Refreshes the terminal emulator the diagnostics UI serves: installs the npm
# packages pinned in web/vendor/package-lock.json (npm ci, through
# ensure-node-deps.sh) and copies the files the UI loads into
# web/vendor/xterm, byte for byte. Commit the result.
#
# With --check it copies nothing and fails, naming the file, when a committed
# copy differs from the pinned package (make test runs it).
#
# To move to another version: change web/vendor/package.json, run
# `npm install --package-lock-only --ignore-scripts` in web/vendor, then this.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
vendor=$root/web/vendor
bash "$root/scripts/ensure-node-deps.sh" "$vendor"
check=false
[ "${1:-}" = "--check" ] && check=true
out=$vendor/xterm
mkdir -p "$out"
status=0
# package file -> name under web/vendor/xterm
while read -r src dst; do
  from=$vendor/node_modules/$src
  [ -f "$from" ] || { echo "vendor-xterm: $src is missing from the installed package" >&2; exit 1; }
  if $check; then
    if ! cmp -s "$from" "$out/$dst"; then
      echo "vendor-xterm: web/vendor/xterm/$dst differs from $src of the pinned package: run scripts/vendor-xterm.sh and commit" >&2
      status=1
    fi
  else
    cp "$from" "$out/$dst"
  fi
done <<'LIST'
@xterm/xterm/lib/xterm.mjs xterm.mjs
@xterm/xterm/css/xterm.css xterm.css
@xterm/xterm/LICENSE LICENSE
@xterm/addon-fit/lib/addon-fit.mjs addon-fit.mjs
@xterm/addon-fit/LICENSE LICENSE.addon-fit
LIST
exit $status

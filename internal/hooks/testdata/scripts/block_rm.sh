#!/usr/bin/env bash
# A Claude Code style PreToolUse validator: it reads the hook payload on
# stdin and blocks recursive forced deletes by exiting 2 with the reason on
# stderr. Pure bash and grep, so it needs no jq.
set -euo pipefail
input=$(cat)
if printf '%s' "$input" | grep -Eq '"command":"[^"]*rm[[:space:]]+-rf'; then
  echo "Blocked: rm -rf is not allowed by policy" >&2
  exit 2
fi
exit 0

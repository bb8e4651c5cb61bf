#!/usr/bin/env bash
# A Claude Code style PreToolUse validator: blocks recursive forced removal.
input=$(cat)
command=$(printf '%s' "$input" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tool_input"]["command"])')
if printf '%s' "$command" | grep -Eq 'rm[[:space:]]+-[a-zA-Z]*r[a-zA-Z]*f|rm[[:space:]]+-[a-zA-Z]*f[a-zA-Z]*r'; then
  echo "recursive forced removal is not allowed: $command" >&2
  exit 2
fi
exit 0

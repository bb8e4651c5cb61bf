#!/usr/bin/env bash
# A SessionStart hook that offers the model context, as Claude Code and Codex
# SessionStart hooks do: hookSpecificOutput.additionalContext on stdout.
set -euo pipefail
input=$(cat)
source=$(printf '%s' "$input" | sed -n 's/.*"source":"\([a-z]*\)".*/\1/p')
printf '{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":"Session %s: this repository deploys with make release."}}\n' "$source"

#!/usr/bin/env bash
# A Codex PreToolUse hook for apply_patch: the patch is tool_input.command;
# refuse any patch that touches vendor/, with Codex's JSON deny.
patch=$(jq -r '.tool_input.command')
if printf '%s\n' "$patch" | grep -Eq '^\*\*\* (Add File|Update File|Delete File|Move to): vendor/'; then
  jq -n '{hookSpecificOutput: {hookEventName: "PreToolUse", permissionDecision: "deny",
    permissionDecisionReason: "vendor/ is generated: change its source instead"}}'
fi
exit 0

#!/usr/bin/env python3
"""A PreToolUse hook in Python: parses the payload from stdin and answers
with a JSON permission decision on stdout."""
import json
import sys

payload = json.load(sys.stdin)
command = payload.get("tool_input", {}).get("command", "")
if "curl" in command:
    decision, reason = "deny", "network access denied for %s in %s (%s)" % (
        payload["session_id"], payload["cwd"], payload["hook_event_name"])
else:
    decision, reason = "allow", "ok"
json.dump({"hookSpecificOutput": {"hookEventName": payload["hook_event_name"],
                                  "permissionDecision": decision,
                                  "permissionDecisionReason": reason}}, sys.stdout)

#!/usr/bin/env python3
"""A hook that behaves like the hookify plugin for Claude Code.

It reads the hook input on stdin, loads rules from .claude/hookify.*.local.md
in the working directory (front matter: name, enabled, event, pattern,
action; the body is the message) and answers on stdout exactly as hookify's
rule engine does, always exiting 0:

  - a matching "block" rule on PreToolUse/PostToolUse:
      {"hookSpecificOutput": {"hookEventName": ..., "permissionDecision": "deny"},
       "systemMessage": "**[name]**\\nmessage"}
    (no permissionDecisionReason: the message is only in systemMessage);
  - a matching "warn" rule: {"systemMessage": "**[name]**\\nmessage"};
  - nothing matching: {}.
"""
import glob
import json
import os
import re
import sys


def load_rules():
    rules = []
    for path in sorted(glob.glob(os.path.join(".claude", "hookify.*.local.md"))):
        with open(path) as f:
            text = f.read()
        m = re.match(r"^---\n(.*?)\n---\n?(.*)$", text, re.S)
        if not m:
            continue
        front = {}
        for line in m.group(1).splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                front[k.strip()] = v.strip().strip('"')
        if front.get("enabled", "true") != "true":
            continue
        rules.append({"name": front.get("name", path), "event": front.get("event", "all"),
                      "pattern": front.get("pattern", ""), "action": front.get("action", "warn"),
                      "message": m.group(2).strip()})
    return rules


def main():
    try:
        data = json.load(sys.stdin)
    except Exception as e:  # hookify never blocks on its own errors
        print(json.dumps({"systemMessage": "Hookify error: %s" % e}))
        return 0
    event = data.get("hook_event_name", "")
    command = (data.get("tool_input") or {}).get("command", "")
    blocking, warning = [], []
    for rule in load_rules():
        if rule["event"] not in ("all", "bash"):
            continue
        if rule["pattern"] and re.search(rule["pattern"], command):
            (blocking if rule["action"] == "block" else warning).append(rule)
    if blocking:
        message = "\n\n".join("**[%s]**\n%s" % (r["name"], r["message"]) for r in blocking)
        if event in ("PreToolUse", "PostToolUse"):
            out = {"hookSpecificOutput": {"hookEventName": event, "permissionDecision": "deny"},
                   "systemMessage": message}
        else:
            out = {"systemMessage": message}
    elif warning:
        out = {"systemMessage": "\n\n".join("**[%s]**\n%s" % (r["name"], r["message"]) for r in warning)}
    else:
        out = {}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

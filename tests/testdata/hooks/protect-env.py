#!/usr/bin/env python3
"""A Claude Code PreToolUse guard as published (matcher "Edit|Write"):
no edits of .env files; exit 2 blocks, stderr is the reason."""
import json
import os
import sys

data = json.load(sys.stdin)
path = data.get("tool_input", {}).get("file_path", "")
if os.path.basename(path).startswith(".env"):
    print(f"{path} holds secrets: edit it by hand, not with a tool", file=sys.stderr)
    sys.exit(2)
sys.exit(0)

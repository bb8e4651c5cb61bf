#!/usr/bin/env python3
"""Records the payload and the DSH_* environment a hook received, one JSON line per call."""
import json, os, sys

payload = sys.stdin.read()
with open(os.environ["HOOK_LOG"], "a") as f:
    f.write(json.dumps({
        "raw": payload,
        "cwd": os.getcwd(),
        "managed": sorted(k for k in os.environ if k.startswith("DSH_")),
        "project_dir": os.environ.get("CLAUDE_PROJECT_DIR"),
    }) + "\n")

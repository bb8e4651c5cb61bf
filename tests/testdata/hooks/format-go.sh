#!/usr/bin/env bash
# A Claude Code PostToolUse formatter as its docs publish them (matcher
# "Edit|Write"): format the Go file the tool just wrote.
file_path=$(jq -r '.tool_input.file_path')
if echo "$file_path" | grep -q '\.go$'; then
  gofmt -w "$file_path"
fi

#!/usr/bin/env bash
# Checks that the Python client installs as its README says, `pip install
# ./clients/python`, with no package index at all (--no-index): into a fresh
# virtual environment, then imports it from outside the source tree. The
# source tree is left as it was (no build/ or *.egg-info).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/clients/python"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
before=$(cd "$src" && find . -path ./dshd/__pycache__ -prune -o -print | sort)
python3 -m venv "$tmp/venv"
PIP_CONFIG_FILE=/dev/null "$tmp/venv/bin/pip" install --quiet --no-index --no-cache-dir \
  --disable-pip-version-check "$src"
cd "$tmp"
"$tmp/venv/bin/python" - "$tmp/venv" <<'PY'
import sys
import dshd
from dshd import Client, Problem, StaticContributor, ToolCallEvent

venv = sys.argv[1]
assert dshd.__file__.startswith(venv + "/"), f"dshd imported from {dshd.__file__}, not from the venv"
c = Client("http://127.0.0.1:1", "token")
assert issubclass(Problem, Exception) and StaticContributor and ToolCallEvent and c.token == "token"
print("pip install ./clients/python: installed and imported from", dshd.__file__)
PY
after=$(cd "$src" && find . -path ./dshd/__pycache__ -prune -o -print | sort)
if [ "$before" != "$after" ]; then
  echo "pip install left files in clients/python:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  exit 1
fi

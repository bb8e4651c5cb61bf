#!/usr/bin/env bash
# Checks examples/systemd as docs/operations.md installs it, without systemd
# running (a container is fine):
# - dshd builds with the documented `go build -o dshd ./cmd/dshd`;
# - `systemd-analyze verify` has nothing to say of the unit (a warning, such
#   as an unknown key or a bad value, fails the check), verified as a copy
#   whose ExecStart is that built binary, since verify wants it to exist;
# - systemd-sysusers accepts the user's file (a dry run: nothing is written),
#   and it makes the user the unit runs as.
set -euo pipefail
cd "$(dirname "$0")/.."
unit=examples/systemd/dshd.service
users=examples/systemd/dshd.sysusers.conf
for cmd in systemd-analyze systemd-sysusers; do
  command -v "$cmd" >/dev/null || { echo "$cmd is missing: make deps installs Debian's systemd" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/dshd" ./cmd/dshd
"$tmp/dshd" --version | grep -q '^dshd ' || { echo "the built binary does not call itself dshd" >&2; exit 1; }

exec_line=$(grep '^ExecStart=' "$unit")
case $exec_line in
  ExecStart=/usr/local/bin/dshd\ *) ;;
  *) echo "$unit: ExecStart is not /usr/local/bin/dshd, where docs/operations.md installs it: $exec_line" >&2; exit 1 ;;
esac
sed "s|^ExecStart=/usr/local/bin/dshd |ExecStart=$tmp/dshd |" "$unit" >"$tmp/dshd.service"
if ! out=$(systemd-analyze verify "$tmp/dshd.service" 2>&1) || [ -n "$out" ]; then
  echo "systemd-analyze verify $unit:" >&2
  echo "$out" | sed "s|$tmp/dshd.service|$unit|" >&2
  exit 1
fi
grep -qx 'Delegate=yes' "$unit" || { echo "$unit: no Delegate=yes, so dshd cannot make a cgroup per job" >&2; exit 1; }

user=$(sed -n 's/^User=//p' "$unit")
if ! out=$(systemd-sysusers --dry-run "$PWD/$users" 2>&1); then
  echo "systemd-sysusers $users:" >&2
  echo "$out" >&2
  exit 1
fi
if ! getent passwd "$user" >/dev/null && ! grep -q "^Creating user '$user' " <<<"$out"; then
  echo "$users does not make the user $user the unit runs as:" >&2
  echo "$out" >&2
  exit 1
fi

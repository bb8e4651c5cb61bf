package tests

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSandboxSyscallFilter: through POST /exec, a command under
// workspace-write with the network off cannot create namespaces (the
// seccomp filter denies unshare with EPERM) under either mechanism, while
// the same command unrestricted can; ordinary work (git, python3, strace
// of its own child) still runs; /healthz names the filter.
func TestSandboxSyscallFilter(t *testing.T) {
	t.Parallel()
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) {
			s := startSandboxServer(t, mech)
			var h struct {
				Details struct {
					Sandbox struct {
						Seccomp string `json:"seccomp"`
					} `json:"sandbox"`
				} `json:"details"`
			}
			if st := s.DoJSON(t, "GET", "/healthz", nil, &h); st != 200 || !strings.Contains(h.Details.Sandbox.Seccomp, "calls denied") {
				t.Errorf("GET /healthz = %d, sandbox.seccomp %q; want the filter named", st, h.Details.Sandbox.Seccomp)
			}
			ws := t.TempDir()
			probe := `unshare -U true; echo "userns=$?"; unshare -n true; echo "netns=$?"`
			confined := s.execSandboxed(t, map[string]any{"cwd": ws, "command": probe,
				"sandbox": map[string]string{"policy": "workspace-write", "network": "off"}})
			for _, want := range []string{"userns=1", "netns=1"} {
				if !strings.Contains(confined.Stdout.Text, want) {
					t.Errorf("confined: stdout %q, want %s", confined.Stdout.Text, want)
				}
			}
			if !strings.Contains(confined.Stderr.Text, "Operation not permitted") {
				t.Errorf("confined: stderr %q, want EPERM's message", confined.Stderr.Text)
			}
			base := s.execSandboxed(t, map[string]any{"cwd": ws, "command": probe,
				"sandbox": map[string]string{"policy": "unrestricted", "network": "on"}})
			if !strings.Contains(base.Stdout.Text, "userns=0") || !strings.Contains(base.Stdout.Text, "netns=0") {
				t.Errorf("unrestricted baseline: stdout %q stderr %q, want both namespaces created", base.Stdout.Text, base.Stderr.Text)
			}

			work := `set -e; git init -q r; cd r; git -c user.name=t -c user.email=t@t commit -q --allow-empty -m x; git log --oneline | wc -l`
			if _, err := exec.LookPath("python3"); err == nil {
				work += `; python3 -c 'import subprocess; print("py", subprocess.run(["true"]).returncode)'`
			}
			if _, err := exec.LookPath("strace"); err == nil {
				work += `; strace -f -o /dev/null true && echo traced`
			}
			j := s.execSandboxed(t, map[string]any{"cwd": ws, "command": work,
				"sandbox": map[string]string{"policy": "workspace-write", "network": "off"}})
			if j.ExitCode == nil || *j.ExitCode != 0 || !strings.HasPrefix(j.Stdout.Text, "1\n") {
				t.Errorf("ordinary work under the filter: exit %v, stdout %q, stderr %q", j.ExitCode, j.Stdout.Text, j.Stderr.Text)
			}
		})
	}
}

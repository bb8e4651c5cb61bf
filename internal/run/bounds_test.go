package run

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/limits"
	"github.com/dshd/dshd/internal/sandbox"
)

// TestAgentSandboxBounds: a child agent, and an execution of an agent, may
// only tighten the agent's sandbox policy, on each axis; what they leave out
// they inherit. The end-to-end TestSandboxLineage covers the same through
// HTTP; this one fails fast, in the package that holds the rule.
func TestAgentSandboxBounds(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	ww := sandbox.Policy{FS: sandbox.WorkspaceWrite, Network: sandbox.NetworkOff}
	root, err := w.svc.CreateAgent(ctx, t.TempDir(), agents.Bounds{Sandbox: ww})
	if err != nil {
		t.Fatal(err)
	}
	if root.Sandbox != ww {
		t.Fatalf("root sandbox = %v, want %v", root.Sandbox, ww)
	}
	ro, err := w.svc.SpawnAgent(ctx, root.ID, agents.Bounds{Sandbox: sandbox.Policy{FS: sandbox.ReadOnly}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := (sandbox.Policy{FS: sandbox.ReadOnly, Network: sandbox.NetworkOff}); ro.Sandbox != want {
		t.Errorf("tighter child = %v, want %v (network inherited)", ro.Sandbox, want)
	}
	same, err := w.svc.ForkAgent(ctx, root.ID, nil, agents.Bounds{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if same.Sandbox != ww {
		t.Errorf("fork asking for nothing = %v, want the parent's %v", same.Sandbox, ww)
	}
	for name, try := range map[string]func() error{
		"spawn unrestricted": func() error {
			_, err := w.svc.SpawnAgent(ctx, root.ID, agents.Bounds{Sandbox: sandbox.Policy{FS: sandbox.Unrestricted}}, "")
			return err
		},
		"fork with the network on": func() error {
			_, err := w.svc.ForkAgent(ctx, root.ID, nil, agents.Bounds{Sandbox: sandbox.Policy{Network: sandbox.NetworkOn}}, "")
			return err
		},
		"spawn workspace-write under read-only": func() error {
			_, err := w.svc.SpawnAgent(ctx, ro.ID, agents.Bounds{Sandbox: sandbox.Policy{FS: sandbox.WorkspaceWrite}}, "")
			return err
		},
		"exec with the network on": func() error {
			_, err := w.svc.Exec(ctx, ExecRequest{Command: "true", AgentID: root.ID, Sandbox: sandbox.Policy{Network: sandbox.NetworkOn}})
			return err
		},
		"exec unrestricted as the read-only child": func() error {
			_, err := w.svc.Exec(ctx, ExecRequest{Command: "true", AgentID: ro.ID, Sandbox: sandbox.Policy{FS: sandbox.Unrestricted, Network: sandbox.NetworkOff}})
			return err
		},
	} {
		if err := try(); !errors.Is(err, sandbox.ErrLooser) {
			t.Errorf("%s: err = %v, want sandbox.ErrLooser", name, err)
		}
	}
}

// TestExecValidatesSandboxAndLimits: a request's sandbox policy and limits
// are validated once, by start, before anything is claimed: invalid ones
// are refused with sandbox.ErrInvalid or limits.ErrInvalid, with an agent
// and without, and no job is recorded, no command runs. The executor's
// Reserve takes them as valid (see exec.Spec), so this is the one check.
func TestExecValidatesSandboxAndLimits(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	root, err := w.svc.CreateAgent(ctx, t.TempDir(), agents.Bounds{Sandbox: sandbox.Policy{FS: sandbox.WorkspaceWrite, Network: sandbox.NetworkOff}})
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	allow := sandbox.HostsOf([]string{"web.test"})
	for _, tc := range []struct {
		name    string
		sandbox sandbox.Policy
		limits  limits.Limits
		want    error
	}{
		{"unknown file policy", sandbox.Policy{FS: "bogus"}, limits.Limits{}, sandbox.ErrInvalid},
		{"unknown network", sandbox.Policy{Network: "bogus"}, limits.Limits{}, sandbox.ErrInvalid},
		{"allow with network off", sandbox.Policy{Network: sandbox.NetworkOff, Allow: allow}, limits.Limits{}, sandbox.ErrInvalid},
		{"allow alone, where the enclosing network is not an allowlist", sandbox.Policy{Allow: allow}, limits.Limits{}, sandbox.ErrInvalid},
		{"negative pids", sandbox.Policy{}, limits.Limits{Pids: -1}, limits.ErrInvalid},
		{"negative memory", sandbox.Policy{}, limits.Limits{MemoryBytes: -1}, limits.ErrInvalid},
		{"cpu not a number", sandbox.Policy{}, limits.Limits{CPU: math.NaN()}, limits.ErrInvalid},
	} {
		for _, agentID := range []string{"", root.ID} {
			_, err := w.svc.Exec(ctx, ExecRequest{Command: "touch " + marker, AgentID: agentID, Sandbox: tc.sandbox, Limits: tc.limits})
			if !errors.Is(err, tc.want) {
				t.Errorf("%s (agent %q): err = %v, want %v", tc.name, agentID, err, tc.want)
			}
		}
	}
	if jobs := w.jobs.Jobs("", ""); len(jobs) != 0 {
		t.Errorf("refused requests left %d jobs: %+v", len(jobs), jobs)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused request ran its command: stat %s = %v", marker, err)
	}
}

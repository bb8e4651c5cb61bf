package run

import (
	"context"
	"errors"
	"testing"

	"github.com/dshd/dshd/internal/agents"
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

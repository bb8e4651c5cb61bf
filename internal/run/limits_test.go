package run

import (
	"context"
	"errors"
	"testing"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/limits"
)

// TestAgentLimits: a root agent's limits are its request completed by the
// server's, children inherit them and may only tighten, and every job the
// agent's calls start (harness /exec and model tool calls) runs under them.
func TestAgentLimits(t *testing.T) {
	server := limits.Limits{Pids: 512}
	w := newWorldWith(t, func(o *exec.Options) { o.Limits = server })
	w.svc = New(Options{Env: w.env, Jobs: w.jobs, Agents: w.agents, Hooks: w.hooks, Home: w.home, Limits: server})
	ctx := context.Background()

	root, err := w.svc.CreateAgent(ctx, t.TempDir(), agents.Bounds{Limits: limits.Limits{Pids: 64, MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (limits.Limits{Pids: 64, MemoryBytes: 256 << 20}); root.Limits != want {
		t.Errorf("root limits = %v, want %v", root.Limits, want)
	}
	plain, err := w.svc.CreateAgent(ctx, t.TempDir(), agents.Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Limits != server {
		t.Errorf("an agent asking for nothing has %v, want the server's %v", plain.Limits, server)
	}
	// A root agent is bounded by the harness alone: it may go past the
	// server's default (only children and executions of an agent tighten).
	if a, err := w.svc.CreateAgent(ctx, t.TempDir(), agents.Bounds{Limits: limits.Limits{Pids: 4096}}); err != nil || a.Limits.Pids != 4096 {
		t.Errorf("root agent with pids 4096 = %v, %v", a.Limits, err)
	}
	if _, err := w.svc.CreateAgent(ctx, t.TempDir(), agents.Bounds{Limits: limits.Limits{Pids: -1}}); !errors.Is(err, limits.ErrInvalid) {
		t.Errorf("negative pids: err = %v, want limits.ErrInvalid", err)
	}

	child, err := w.svc.SpawnAgent(ctx, root.ID, agents.Bounds{Limits: limits.Limits{Pids: 16, CPU: 0.5}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := (limits.Limits{Pids: 16, MemoryBytes: 256 << 20, CPU: 0.5}); child.Limits != want {
		t.Errorf("spawned child limits = %v, want %v", child.Limits, want)
	}
	fork, err := w.svc.ForkAgent(ctx, child.ID, nil, agents.Bounds{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if fork.Limits != child.Limits {
		t.Errorf("fork limits = %v, want the parent's %v", fork.Limits, child.Limits)
	}
	for name, try := range map[string]func() error{
		"spawn with more pids": func() error {
			_, err := w.svc.SpawnAgent(ctx, child.ID, agents.Bounds{Limits: limits.Limits{Pids: 17}}, "")
			return err
		},
		"fork with more memory": func() error {
			_, err := w.svc.ForkAgent(ctx, root.ID, nil, agents.Bounds{Limits: limits.Limits{MemoryBytes: 512 << 20}}, "")
			return err
		},
		"fork with more cpu": func() error {
			_, err := w.svc.ForkAgent(ctx, child.ID, nil, agents.Bounds{Limits: limits.Limits{CPU: 1}}, "")
			return err
		},
		"exec with more pids": func() error {
			_, err := w.svc.Exec(ctx, ExecRequest{Command: "true", AgentID: child.ID, Limits: limits.Limits{Pids: 32}})
			return err
		},
	} {
		if err := try(); !errors.Is(err, limits.ErrLooser) {
			t.Errorf("%s: err = %v, want limits.ErrLooser", name, err)
		}
	}

	// Harness execution: tighter than the agent is fine, the rest inherited.
	job, err := w.svc.Exec(ctx, ExecRequest{Command: "true", AgentID: child.ID, Limits: limits.Limits{Pids: 8}})
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := job.Wait(ctx)
	if want := (limits.Limits{Pids: 8, MemoryBytes: 256 << 20, CPU: 0.5}); snap.Limits != want {
		t.Errorf("exec job limits = %v, want %v", snap.Limits, want)
	}
	if snap.Enforcement.Pids == "" || snap.Enforcement.MemoryBytes == "" || snap.Enforcement.CPU == "" {
		t.Errorf("exec job enforcement = %+v, want one for each limit set", snap.Enforcement)
	}

	// Model tool call: the agent's limits, which the model cannot change.
	res := w.call(t, fork.ID, "bash", map[string]any{"command": "true", "limits": map[string]any{"pids": 100000}})
	j, err := w.jobs.Job(res.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if got := j.Snapshot().Limits; got != fork.Limits {
		t.Errorf("tool call job limits = %v, want the agent's %v", got, fork.Limits)
	}

	// Without an agent, a request's limits replace the server's.
	job, err = w.svc.Exec(ctx, ExecRequest{Command: "true", Limits: limits.Limits{Pids: 2048}})
	if err != nil {
		t.Fatal(err)
	}
	if snap, _ := job.Wait(ctx); snap.Limits != (limits.Limits{Pids: 2048}) {
		t.Errorf("agentless exec limits = %v, want pids 2048", snap.Limits)
	}
}

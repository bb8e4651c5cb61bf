package run

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/tools"
)

// recordingJobs is the real executor, with every Spec the pipeline reserves
// kept for the test to read.
type recordingJobs struct {
	jobRunner
	mu    sync.Mutex
	specs []exec.Spec
}

func (r *recordingJobs) Reserve(ctx context.Context, s exec.Spec) (*exec.Reservation, error) {
	r.mu.Lock()
	r.specs = append(r.specs, s)
	r.mu.Unlock()
	return r.jobRunner.Reserve(ctx, s)
}

// last returns the Spec of the latest reservation.
func (r *recordingJobs) last(tb testing.TB) exec.Spec {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.specs) == 0 {
		tb.Fatal("nothing was reserved")
	}
	return r.specs[len(r.specs)-1]
}

// writableRoots are the roots a job of s is given, as the executor makes
// them: Spec.WritableRoots, and the cwd when CwdIsRoot. The sandbox adds the
// operator's configured roots to these, and nothing else.
func writableRoots(s exec.Spec) []string {
	roots := slices.Clone(s.WritableRoots)
	if s.CwdIsRoot {
		roots = append(roots, s.Cwd)
	}
	return roots
}

// TestBashWorkdirNeverARoot: the roots the bash tool hands the executor
// are the agent's cwd and nothing else, whatever workdir the model names
// (below the cwd, beside it, absolute, a terminal, in the background): a
// model's workdir is where its command starts, inside what the harness made
// writable, never a root of its own. The baseline is the harness: its cwd
// does become a root, so the check below can see one.
func TestBashWorkdirNeverARoot(t *testing.T) {
	w := newWorld(t)
	rec := &recordingJobs{jobRunner: w.jobs}
	w.svc = New(Options{Env: w.env, Jobs: rec, Agents: w.agents, Hooks: w.hooks, Home: w.home})
	a := w.agent(t)
	if err := os.Mkdir(filepath.Join(a.Cwd, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	// other, named from the agent's cwd: the agent's cwd and other are both
	// the test's temporary directories, siblings.
	besideCwd, err := filepath.Rel(a.Cwd, other)
	if err != nil || filepath.Join(a.Cwd, besideCwd) != other {
		t.Fatalf("%s from %s: %q, %v", other, a.Cwd, besideCwd, err)
	}

	// Baseline: the harness's cwd is its own choice of a root.
	j, err := w.svc.Exec(context.Background(), ExecRequest{Command: "true", AgentID: a.ID, Cwd: other})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := writableRoots(rec.last(t)); !slices.Contains(got, other) {
		t.Fatalf("baseline: a harness exec in %s has roots %q, want them to hold its cwd", other, got)
	}

	for _, c := range []struct {
		name string
		args map[string]any
	}{
		{"no workdir", map[string]any{}},
		{"below the cwd", map[string]any{"workdir": "sub"}},
		{"absolute, outside", map[string]any{"workdir": other}},
		{"relative, outside", map[string]any{"workdir": besideCwd}},
		{"tty", map[string]any{"workdir": other, "tty": true, "yield_time_ms": 60000}},
		{"background", map[string]any{"workdir": other, "run_in_background": true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := map[string]any{"command": "true"}
			for k, v := range c.args {
				args[k] = v
			}
			if res := w.call(t, a.ID, tools.ToolBash, args); res.IsError {
				t.Fatalf("call: %s", res.Text)
			}
			s := rec.last(t)
			if got, want := writableRoots(s), []string{a.Cwd}; !slices.Equal(got, want) {
				t.Errorf("bash %s (cwd %s): roots %q, want only the agent's cwd %q", c.name, s.Cwd, got, want)
			}
		})
	}
}

package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/apitest"
	"github.com/dshd/dshd/internal/cluster/natstest"
	"github.com/dshd/dshd/internal/testenv"
)

type wsAgent struct {
	ID        string `json:"id"`
	Workspace struct {
		Mode     string `json:"mode"`
		Path     string `json:"path"`
		ParentID string `json:"parentId"`
		Dropped  bool   `json:"dropped"`
	} `json:"workspace"`
}

type wsChange struct {
	Path        string `json:"path"`
	Kind        string `json:"kind"`
	Type        string `json:"type"`
	Size        int64  `json:"size"`
	Diff        string `json:"diff"`
	DiffOmitted string `json:"diffOmitted"`
}

type wsProblem struct {
	Status int      `json:"status"`
	Code   string   `json:"code"`
	Detail string   `json:"detail"`
	Reason string   `json:"reason"`
	Paths  []string `json:"paths"`
}

// gitRepo makes a git repository with a committed file, an untracked file
// and ignored files (a .env and a build cache), as a harness's workspace.
func gitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Need(t, "git: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "repo")
	files := map[string]string{
		"f.txt":            "base\n",
		"README.md":        "# project\n",
		".gitignore":       ".env\nbuild/\n",
		".env":             "API_URL=http://localhost\n",
		"build/cache.bin":  "\x00\x01cache",
		"untracked.txt":    "not committed\n",
		"src/main.go":      "package main\n",
		"src/lib/util.txt": "util\n",
	}
	for rel, body := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q"}, {"add", "f.txt", "README.md", ".gitignore", "src"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "base"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	return dir
}

// needSnapshots skips (fails in CI) where the server says snapshot
// workspaces do not work.
func needSnapshots(t *testing.T, s *testServer) {
	t.Helper()
	var h struct {
		Details struct {
			Workspaces *struct {
				Snapshot bool   `json:"snapshot"`
				Reason   string `json:"reason"`
			} `json:"workspaces"`
		} `json:"details"`
	}
	if st := s.DoJSON(t, "GET", "/healthz", nil, &h); st != 200 || h.Details.Workspaces == nil {
		t.Fatalf("healthz = %d, workspaces %v", st, h.Details.Workspaces)
	}
	if !h.Details.Workspaces.Snapshot {
		testenv.Need(t, "snapshot workspaces: %s", h.Details.Workspaces.Reason)
	}
}

// run runs command as agent through /exec and returns its stdout, failing
// unless it exits 0.
func (s *testServer) run(t *testing.T, agent, command string) string {
	t.Helper()
	var j job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": command, "agentId": agent}, &j); st != 200 {
		t.Fatalf("exec %q as %s = %d", command, agent, st)
	}
	if j.ExitCode == nil || *j.ExitCode != 0 {
		t.Fatalf("exec %q as %s: exit %v: %s%s", command, agent, j.ExitCode, j.Stdout.Text, j.Stderr.Text)
	}
	return j.Stdout.Text
}

func (s *testServer) newAgent(t *testing.T, path string, body map[string]any) wsAgent {
	t.Helper()
	var a wsAgent
	if st := s.DoJSON(t, "POST", path, body, &a); st != 201 {
		t.Fatalf("POST %s %v = %d", path, body, st)
	}
	return a
}

func (s *testServer) changes(t *testing.T, agent string, diff bool) []wsChange {
	t.Helper()
	var out struct {
		AgentID string     `json:"agentId"`
		Changes []wsChange `json:"changes"`
	}
	path := "/agents/" + agent + "/workspace/changes"
	if diff {
		path += "?diff=true"
	}
	if st := s.DoJSON(t, "GET", path, nil, &out); st != 200 {
		t.Fatalf("GET %s = %d", path, st)
	}
	return out.Changes
}

func changeList(cs []wsChange) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Kind+" "+c.Path)
	}
	return out
}

// TestWorkspaceSnapshotForks: a parent and two snapshot children of a git
// repository (with untracked and ignored files) change the same file each
// their own way and add files; each sees only its own; changes lists them;
// across a restart, one child's changes apply to the parent and the
// other's are refused for the conflict, changing nothing.
func TestWorkspaceSnapshotForks(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "overlayfs mounts and mount namespaces need CAP_SYS_ADMIN")
	repo := gitRepo(t)
	home := filepath.Join(t.TempDir(), "home")
	s := startServer(t, withHome(home))
	needSnapshots(t, s)

	p := s.newAgent(t, "/agents", map[string]any{"cwd": repo})
	if p.Workspace.Mode != "shared" {
		t.Errorf("a root agent's workspace mode = %q", p.Workspace.Mode)
	}
	// The parent's own change before the forks: both children see it.
	s.run(t, p.ID, "echo parent > f.txt")
	c1 := s.newAgent(t, "/agents/"+p.ID+"/fork", map[string]any{"workspace": "snapshot"})
	c2 := s.newAgent(t, "/agents/"+p.ID+"/spawn", map[string]any{"workspace": "snapshot"})
	if c1.Workspace.Mode != "snapshot" || c1.Workspace.Path != repo || c1.Workspace.ParentID != p.ID {
		t.Errorf("fork's workspace = %+v", c1.Workspace)
	}
	var got wsAgent
	if s.DoJSON(t, "GET", "/agents/"+p.ID, nil, &got); got.Workspace.Mode != "snapshot" {
		t.Errorf("the parent did not move onto a layer: %+v", got.Workspace)
	}

	// Each child starts from the parent's view, everything in it.
	if out := s.run(t, c1.ID, "cat f.txt .env untracked.txt; wc -c < build/cache.bin; git status --porcelain"); out != "parent\nAPI_URL=http://localhost\nnot committed\n7\n M f.txt\n?? untracked.txt\n" {
		t.Errorf("the fork's view at the fork:\n%s", out)
	}
	// Each changes f.txt its own way and adds a file: by /exec, a model's
	// bash call and a background job.
	s.run(t, c1.ID, "echo one > f.txt && echo c1 > c1.txt && mkdir -p notes && echo n > notes/c1.md && rm src/lib/util.txt")
	if r := s.callTool(t, c2.ID, "bash", map[string]any{"command": "echo two > f.txt && echo c2 > c2.txt"}); r.IsError {
		t.Fatalf("c2's bash call: %s", r.Text)
	}
	var bg job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "echo p > p.txt", "agentId": p.ID, "background": true}, &bg); st != 202 {
		t.Fatalf("background exec = %d", st)
	}
	if j := s.waitJob(t, bg.ID); j.ExitCode == nil || *j.ExitCode != 0 {
		t.Fatalf("background job: %+v", j)
	}
	view := "cat f.txt; ls c1.txt c2.txt p.txt notes src/lib 2>/dev/null; true"
	for _, c := range []struct{ agent, want string }{
		{p.ID, "parent\np.txt\n\nsrc/lib:\nutil.txt\n"},
		{c1.ID, "one\nc1.txt\n\nnotes:\nc1.md\n\nsrc/lib:\n"},
		{c2.ID, "two\nc2.txt\n\nsrc/lib:\nutil.txt\n"},
	} {
		if out := s.run(t, c.agent, view); out != c.want {
			t.Errorf("view of %s:\n%q\nwant\n%q", c.agent, out, c.want)
		}
	}
	// The base directory itself is the frozen lowest layer: as the
	// parent left it at the first snapshot fork.
	if b, _ := os.ReadFile(filepath.Join(repo, "f.txt")); string(b) != "parent\n" {
		t.Errorf("the base directory changed: f.txt = %q", b)
	}
	for _, f := range []string{"c1.txt", "c2.txt", "p.txt"} {
		if _, err := os.Stat(filepath.Join(repo, f)); err == nil {
			t.Errorf("%s reached the base directory", f)
		}
	}

	want := []string{"added c1.txt", "modified f.txt", "added notes", "added notes/c1.md", "deleted src/lib/util.txt"}
	cs := s.changes(t, c1.ID, true)
	if got := changeList(cs); !slices.Equal(got, want) {
		t.Errorf("c1's changes = %q, want %q", got, want)
	}
	for _, c := range cs {
		if c.Path == "f.txt" && (c.Size != 4 || c.Diff != "--- a/f.txt\n+++ b/f.txt\n@@ -1,1 +1,1 @@\n-parent\n+one\n") {
			t.Errorf("f.txt change: %+v", c)
		}
	}

	// Restart between the forks and the applies: nothing is lost.
	s.stop(t)
	s = startServer(t, withHome(home))
	if out := s.run(t, c1.ID, "cat f.txt c1.txt"); out != "one\nc1\n" {
		t.Errorf("c1's view after a restart: %q", out)
	}
	if got := changeList(s.changes(t, c1.ID, false)); !slices.Equal(got, want) {
		t.Errorf("c1's changes after a restart = %q", got)
	}

	var applied struct {
		ParentID string     `json:"parentId"`
		Target   string     `json:"target"`
		Changes  []wsChange `json:"changes"`
	}
	if st := s.DoJSON(t, "POST", "/agents/"+c1.ID+"/workspace/apply", map[string]any{}, &applied); st != 200 || applied.ParentID != p.ID || applied.Target != repo || len(applied.Changes) != len(want) {
		t.Fatalf("apply c1 = %d %+v", st, applied)
	}
	parentView := "cat f.txt c1.txt p.txt notes/c1.md; ls c2.txt src/lib/util.txt 2>&1 | sed 's/.*cannot access/gone/'; git status --porcelain"
	after := "one\nc1\np\nn\ngone 'c2.txt': No such file or directory\ngone 'src/lib/util.txt': No such file or directory\n M f.txt\n D src/lib/util.txt\n?? c1.txt\n?? notes/\n?? p.txt\n?? untracked.txt\n"
	if out := s.run(t, p.ID, parentView); out != after {
		t.Errorf("parent after applying c1:\n%s\nwant\n%s", out, after)
	}

	var pr wsProblem
	if st := s.DoJSON(t, "POST", "/agents/"+c2.ID+"/workspace/apply", nil, &pr); st != 409 || pr.Code != "workspace_conflict" || !slices.Equal(pr.Paths, []string{"f.txt"}) {
		t.Errorf("apply c2 = %d %+v, want 409 workspace_conflict on f.txt", st, pr)
	}
	if out := s.run(t, p.ID, parentView); out != after {
		t.Errorf("a refused apply changed the parent:\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(repo, "f.txt")); string(b) != "parent\n" {
		t.Errorf("the base directory changed: f.txt = %q", b)
	}

	// Drop c2: its commands are refused from then on, never run shared.
	if st := s.DoJSON(t, "DELETE", "/agents/"+c2.ID+"/workspace", nil, nil); st != 204 {
		t.Errorf("drop c2 = %d", st)
	}
	var j job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "echo x > dropped.txt", "agentId": c2.ID}, &pr); st != 409 || pr.Code != "workspace_dropped" {
		t.Errorf("exec after a drop = %d %+v (%+v)", st, pr, j)
	}
	if _, err := os.Stat(filepath.Join(repo, "dropped.txt")); err == nil {
		t.Error("a dropped workspace's command ran in the base directory")
	}
}

// TestWorkspaceSnapshotRules: a snapshot fork of an agent running a job is
// refused (its layer would be frozen under the job), bad requests change
// nothing, a shared agent has no changes, and a snapshot child under
// workspace-write writes its own view only, its .git read-only.
func TestWorkspaceSnapshotRules(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "overlayfs mounts and mount namespaces need CAP_SYS_ADMIN")
	repo := gitRepo(t)
	home := filepath.Join(t.TempDir(), "home")
	hookLog := filepath.Join(t.TempDir(), "hook.log")
	// A hook reads the agent's f.txt after each bash call: in its view.
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "claude-code.json"), map[string]any{"hooks": map[string]any{
		"PostToolUse": []any{map[string]any{"matcher": "Bash", "hooks": []any{map[string]any{"type": "command", "command": "cat f.txt >> " + hookLog}}}},
	}})
	s := startServer(t, withHome(home))
	needSnapshots(t, s)
	p := s.newAgent(t, "/agents", map[string]any{"cwd": repo})

	var bg job
	if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "sleep 30", "agentId": p.ID, "background": true, "timeoutMs": 30000}, &bg); st != 202 {
		t.Fatalf("background exec = %d", st)
	}
	var pr wsProblem
	if st := s.DoJSON(t, "POST", "/agents/"+p.ID+"/fork", map[string]any{"workspace": "snapshot"}, &pr); st != 409 || pr.Code != "workspace_busy" {
		t.Errorf("fork of a busy agent = %d %+v", st, pr)
	}
	var list []wsAgent
	if s.DoJSON(t, "GET", "/agents", nil, &list); len(list) != 1 {
		t.Errorf("a refused fork made an agent: %d agents", len(list))
	}
	if st := s.DoJSON(t, "DELETE", "/jobs/"+bg.ID, nil, nil); st != 200 && st != 202 {
		t.Fatalf("cancel = %d", st)
	}
	s.waitJob(t, bg.ID)

	if st := s.DoJSON(t, "POST", "/agents/"+p.ID+"/fork", map[string]any{"workspace": "copy"}, &pr); st != 400 {
		t.Errorf("an unknown mode = %d %+v", st, pr)
	}
	if st := s.DoJSON(t, "GET", "/agents/"+p.ID+"/workspace/changes", nil, &pr); st != 404 || pr.Code != "workspace_not_found" {
		t.Errorf("changes of a shared agent = %d %+v", st, pr)
	}

	c := s.newAgent(t, "/agents/"+p.ID+"/spawn", map[string]any{"workspace": "snapshot", "sandbox": map[string]any{"policy": "workspace-write"}})
	if out := s.run(t, c.ID, "echo sandboxed > f.txt; cat f.txt; if echo x >> .git/config 2>/dev/null; then echo git-writable; fi"); out != "sandboxed\n" {
		t.Errorf("a confined snapshot child: %q", out)
	}
	if out := s.run(t, p.ID, "cat f.txt"); out != "base\n" {
		t.Errorf("the parent saw the child's write: %q", out)
	}
	if r := s.callTool(t, c.ID, "bash", map[string]any{"command": "echo hooked > f.txt"}); r.IsError {
		t.Fatalf("bash call: %s", r.Text)
	}
	if b, _ := os.ReadFile(hookLog); string(b) != "hooked\n" {
		t.Errorf("the child's PostToolUse hook read f.txt = %q, want its view's", b)
	}
	// A shared fork of a snapshot agent shares its view, not the base.
	sh := s.newAgent(t, "/agents/"+c.ID+"/fork", map[string]any{})
	if sh.Workspace.Mode != "shared" || sh.Workspace.ParentID != c.ID {
		t.Errorf("shared fork of a snapshot agent: %+v", sh.Workspace)
	}
	if out := s.run(t, sh.ID, "cat f.txt"); out != "hooked\n" {
		t.Errorf("a shared fork of a snapshot agent sees %q, not its parent's view", out)
	}
	for _, body := range []map[string]any{{"directory": "relative/dir"}, {"directory": filepath.Join(repo, "missing")}} {
		if st := s.DoJSON(t, "POST", "/agents/"+c.ID+"/workspace/apply", body, &pr); st != 422 || pr.Code != "invalid_workspace" {
			t.Errorf("apply to %v = %d %+v", body, st, pr)
		}
	}
	if st := s.DoJSON(t, "POST", "/agents/"+c.ID+"/workspace/apply", map[string]any{"directory": repo}, &pr); st != 409 || pr.Code != "workspace_busy" {
		t.Errorf("apply onto the tree's base = %d %+v", st, pr)
	}
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "f.txt"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st := s.DoJSON(t, "POST", "/agents/"+c.ID+"/workspace/apply", map[string]any{"directory": out}, nil); st != 200 {
		t.Errorf("apply to a directory = %d", st)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "f.txt")); !strings.HasPrefix(string(b), "hooked") {
		t.Errorf("applied to a directory: %q", b)
	}
}

// TestWorkspaceSnapshotClusterRefused: cluster mode refuses snapshot forks
// with a clear code and reason, makes no agent, and says so in /healthz;
// shared forks work as before.
func TestWorkspaceSnapshotClusterRefused(t *testing.T) {
	t.Parallel()
	clusterSlot(t)
	nc := natstest.Start(t, 3)
	s := startServer(t, withConfig("cluster:\n  replicaId: ws-0\n  urls: ["+strings.Join(nc.URLs, ", ")+"]\n"))
	var h struct {
		Details struct {
			Workspaces struct {
				Snapshot bool   `json:"snapshot"`
				Reason   string `json:"reason"`
			} `json:"workspaces"`
		} `json:"details"`
	}
	if st := s.DoJSON(t, "GET", "/healthz", nil, &h); st != 200 || h.Details.Workspaces.Snapshot || !strings.HasPrefix(h.Details.Workspaces.Reason, "cluster mode") {
		t.Errorf("healthz = %d %+v", st, h.Details.Workspaces)
	}
	p := s.newAgent(t, "/agents", map[string]any{"cwd": t.TempDir()})
	var pr wsProblem
	if st := s.DoJSON(t, "POST", "/agents/"+p.ID+"/spawn", map[string]any{"workspace": "snapshot"}, &pr); st != 422 || pr.Code != "workspace_snapshot_unavailable" || !strings.HasPrefix(pr.Reason, "cluster mode") {
		t.Errorf("snapshot spawn in cluster mode = %d %+v", st, pr)
	}
	var list []wsAgent
	if s.DoJSON(t, "GET", "/agents", nil, &list); len(list) != 1 {
		t.Errorf("a refused spawn made an agent: %d agents", len(list))
	}
	if c := s.newAgent(t, "/agents/"+p.ID+"/fork", map[string]any{"workspace": "shared"}); c.Workspace.Mode != "shared" {
		t.Errorf("shared fork in cluster mode: %+v", c.Workspace)
	}
}

// TestWorkspaceApplyRightAfterJob: a harness runs a child's last command
// and applies its changes at once. The job has ended (its answer is in),
// so the apply is not refused as busy. (Under bubblewrap the job's count of
// remaining processes is 1 until the next poll, some 200 ms later.)
func TestWorkspaceApplyRightAfterJob(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "overlayfs mounts and mount namespaces need CAP_SYS_ADMIN")
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) {
			testenv.SkipMechanism(t, mech)
			s := startServer(t, withConfig("sandbox:\n  mechanism: "+mech+"\n"))
			needSandbox(t, s)
			needSnapshots(t, s)
			p := s.newAgent(t, "/agents", map[string]any{"cwd": t.TempDir()})
			for i := range 5 {
				c := s.newAgent(t, "/agents/"+p.ID+"/fork", map[string]any{"workspace": "snapshot", "sandbox": map[string]any{"policy": "workspace-write", "network": "off"}})
				s.run(t, c.ID, fmt.Sprintf("echo %d > f.txt", i))
				var pr wsProblem
				if st := s.DoJSON(t, "POST", "/agents/"+c.ID+"/workspace/apply", map[string]any{}, &pr); st != 200 {
					t.Errorf("apply right after the child's job ended = %d %s %s", st, pr.Code, pr.Detail)
				}
			}
			if out := s.run(t, p.ID, "cat f.txt"); out != "4\n" {
				t.Errorf("the parent's f.txt = %q", out)
			}
		})
	}
}

// TestWorkspaceApplyGroupLeftover: with jobs contained by process group, a
// parent's command leaves a process in a session of its own (setsid -f)
// that waits for an apply's staging and swaps a directory the child wrote
// into for a link outside. Group containment does not count a process that
// left its job's group (docs/containment.md), so the apply is not refused
// up front as under cgroup containment: it either wins the race (200) or
// meets the swap in its commit and rolls back (409 workspace_busy).
// Whatever it answered, nothing lands outside, and the parent's view is
// left untouched or fully applied, with no staging in it and no journal
// under the home, also after a restart.
func TestWorkspaceApplyGroupLeftover(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "overlayfs mounts and mount namespaces need CAP_SYS_ADMIN")
	base := t.TempDir()
	ws, outside, home := filepath.Join(base, "ws"), filepath.Join(base, "outside"), filepath.Join(base, "home")
	for _, d := range []string{filepath.Join(ws, "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	config := withConfig("jobs:\n  graceMs: 200\n  containment: group\n")
	s := startServer(t, withHome(home), config)
	needSnapshots(t, s)
	mark := randomMark(t)
	t.Cleanup(func() { killPIDs(survivorsNow(mark)) })
	p := s.newAgent(t, "/agents", map[string]any{"cwd": ws})
	c := s.newAgent(t, "/agents/"+p.ID+"/fork", map[string]any{"workspace": "snapshot"})
	s.run(t, c.ID, "echo a > a.txt && echo new > sub/new.txt && echo z > z.txt")
	// It spins (no sleep) for the few moments until the apply: it swaps
	// while the staged files are synced, before any is moved.
	swap := "until compgen -G \".dshd-apply-*\" >/dev/null; do :; done; mv sub sub.orig && ln -s " + outside + " sub; sleep 300"
	s.run(t, p.ID, fmt.Sprintf("setsid -f env %s='%s;' bash -c '%s' </dev/null >/dev/null 2>&1", markEnv, mark, swap))
	for deadline := time.Now().Add(15 * time.Second); len(survivorsNow(mark)) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if len(survivorsNow(mark)) == 0 {
		t.Fatal("the parent's command left nothing running")
	}
	var pr wsProblem
	st := s.DoJSON(t, "POST", "/agents/"+c.ID+"/workspace/apply", map[string]any{}, &pr)
	if st != 200 && (st != 409 || pr.Code != "workspace_busy") {
		t.Errorf("apply while the parent's leftover runs = %d %s %s, want 200 or a rolled back 409 workspace_busy", st, pr.Code, pr.Detail)
	}
	t.Logf("apply while the parent's leftover runs = %d %s", st, pr.Code)
	killPIDs(survivorsNow(mark))
	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Errorf("the apply wrote outside: %v", ents)
	}
	check := func(s *testServer, when string) {
		t.Helper()
		if out := s.run(t, p.ID, "ls -a | grep dshd-apply || true"); out != "" {
			t.Errorf("%s: staging in the parent's view: %q", when, out)
		}
		if out := s.run(t, p.ID, "cat a.txt z.txt 2>/dev/null || true"); out != "" && out != "a\nz\n" {
			t.Errorf("%s: the parent's view is half applied: a.txt and z.txt read %q", when, out)
		}
		if ents, _ := os.ReadDir(filepath.Join(home, "workspaces", "applies")); len(ents) > 0 {
			t.Errorf("%s: %d apply journal(s) left, first %s", when, len(ents), ents[0].Name())
		}
	}
	check(s, "after the apply")
	s.stop(t)
	s = startServer(t, withHome(home), config)
	check(s, "after a restart")
}

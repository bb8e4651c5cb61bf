package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

// The crash tests of snapshot workspaces: dshd is started with one of its
// crash points armed (DSHD_CRASH_AT, internal/faults), kills itself with
// SIGKILL in the middle of an apply or a fork, and is started again on the
// same home. What the next start finds must be one of the two states the
// operation was between, never a mix of them.

// viewListing prints a workspace as its commands see it, every entry with
// its type, mode and link target, then every file's digest: two views print
// the same only when they hold the same bytes under the same names.
const viewListing = `find . -mindepth 1 -printf '%y %m %p %l\n' | LC_ALL=C sort; find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r md5sum`

// applyCrashTree writes files (path → content; a content starting with
// "->" makes a link to the rest, a path ending in "/" a directory) into
// dir, with mode 0644 for files and 0755 for directories unless modes says
// otherwise.
func applyCrashTree(t *testing.T, dir string, files map[string]string, modes map[string]os.FileMode) {
	t.Helper()
	for rel, body := range files {
		p := filepath.Join(dir, rel)
		if strings.HasSuffix(rel, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(body, "->"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Modes exactly as asked, whatever the umask.
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir || fi.Mode()&os.ModeSymlink != 0 {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		mode := os.FileMode(0o644)
		if fi.IsDir() {
			mode = 0o755
		}
		if m, ok := modes[rel]; ok {
			mode = m
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// localListing is viewListing of a directory of the test's own.
func localListing(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", viewListing)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	return string(out)
}

// The apply crash tests' workspace: the base, what the parent does after
// the fork (a file of its own, no conflict) and what the child does (a
// modification, deletions of a file and of a directory tree, new files, a
// new nested directory, a file with its own mode, a link).
var (
	crashBase = map[string]string{
		"keep.txt":     "keep\n",
		"mod.txt":      "old\n",
		"del.txt":      "delete me\n",
		"gone/x.txt":   "x\n",
		"gone/y/z.txt": "z\n",
		"dir/a.txt":    "a\n",
	}
	crashParentCmd = "echo mine > parent.txt"
	crashChildCmd  = "echo new > mod.txt && rm del.txt && rm -r gone && echo added > added.txt && " +
		"mkdir -p new/deep/er && echo deep > new/deep/er/f.txt && printf 'bin\\0ary' > dir/b.bin && " +
		"ln -s keep.txt link && chmod 755 new new/deep new/deep/er && chmod 644 mod.txt added.txt new/deep/er/f.txt && chmod 600 dir/b.bin"
	// The moves an apply of the child stages: added.txt, dir/b.bin, link,
	// mod.txt, new, new/deep, new/deep/er, new/deep/er/f.txt.
	crashApplied = map[string]string{
		"keep.txt":          "keep\n",
		"mod.txt":           "new\n",
		"dir/a.txt":         "a\n",
		"dir/b.bin":         "bin\x00ary",
		"added.txt":         "added\n",
		"new/deep/er/f.txt": "deep\n",
		"link":              "->keep.txt",
		"parent.txt":        "mine\n",
	}
)

// crashSetup makes, on a server of its own that it stops, a parent agent
// on a fresh copy of crashBase with a snapshot child, both having made
// their changes. It returns the home, the workspace, the two agents and the
// parent's view as it is then.
func crashSetup(t *testing.T) (home, ws string, parent, child wsAgent, before string) {
	t.Helper()
	ws = filepath.Join(t.TempDir(), "ws")
	applyCrashTree(t, ws, crashBase, nil)
	home = filepath.Join(t.TempDir(), "home")
	s := startServer(t, withHome(home))
	needSnapshots(t, s)
	parent = s.newAgent(t, "/agents", map[string]any{"cwd": ws})
	child = s.newAgent(t, "/agents/"+parent.ID+"/fork", map[string]any{"workspace": "snapshot"})
	s.run(t, parent.ID, crashParentCmd)
	s.run(t, child.ID, crashChildCmd)
	before = s.run(t, parent.ID, viewListing)
	s.stop(t)
	return home, ws, parent, child, before
}

// crashOn sends method path body to s, whose armed crash point the request
// reaches: the request gets no answer, and s dies of SIGKILL.
func crashOn(t *testing.T, s *testServer, method, path string, body any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, s.URL+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		msg, _ := readAllString(resp)
		t.Fatalf("%s %s answered %d before the crash point: %s", method, path, resp.StatusCode, msg)
	}
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s %s failed but dshd still runs", method, path)
	}
	var ee *exec.ExitError
	if !errors.As(s.err, &ee) {
		t.Fatalf("dshd ended with %v, want a SIGKILL", s.err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("dshd ended with %v, want a SIGKILL (its crash point)", s.err)
	}
}

func readAllString(resp *http.Response) (string, error) {
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err := b.ReadFrom(resp.Body)
	return b.String(), err
}

// noStaging fails t when anything of an apply's staging shows in the
// parent's view or its changes, or a journal is left under the home.
func noStaging(t *testing.T, s *testServer, parent string) {
	t.Helper()
	if out := s.run(t, parent, "find . -name '.dshd-apply-*'"); out != "" {
		t.Errorf("staging left in the parent's view:\n%s", out)
	}
	for _, c := range s.changes(t, parent, false) {
		if strings.Contains(c.Path, ".dshd-apply-") {
			t.Errorf("the parent's changes list the staging: %+v", c)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(s.Home, "workspaces", "applies")); err == nil && len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("apply journals left after the restart: %v", names)
	}
}

// TestWorkspaceApplyCrash: for each crash point of an apply, a parent with
// a snapshot child that changed files (modified, deleted a file and a
// directory tree, added files, a nested directory, a link, a mode) is
// applied to by a dshd that SIGKILLs itself at that point; the next start
// on the same home leaves the parent's view byte for byte untouched (a
// crash before the journal says commit) or fully applied (after), with no
// staging left in the view, its changes or the home; and a second apply
// then succeeds, no conflict, into the fully applied view.
func TestWorkspaceApplyCrash(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "overlayfs mounts and mount namespaces need CAP_SYS_ADMIN")
	expect := t.TempDir()
	applyCrashTree(t, filepath.Join(expect, "before"), crashBase, nil)
	applyCrashTree(t, filepath.Join(expect, "before"), map[string]string{"parent.txt": "mine\n"}, nil)
	applyCrashTree(t, filepath.Join(expect, "after"), crashApplied, map[string]os.FileMode{"dir/b.bin": 0o600})
	untouched, applied := localListing(t, filepath.Join(expect, "before")), localListing(t, filepath.Join(expect, "after"))

	for _, tc := range []struct {
		point   string
		applied bool
	}{
		{"workspace.apply.journaled", false},
		{"workspace.apply.staged", false},
		{"workspace.apply.committed", true},
		{"workspace.apply.moved:1", true},
		{"workspace.apply.moved:2", true},
	} {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			home, _, p, c, before := crashSetup(t)
			if before != untouched {
				t.Fatalf("the parent's view before the apply:\n%s\nwant\n%s", before, untouched)
			}
			s := startServer(t, withHome(home), withEnv("DSHD_CRASH_AT="+tc.point))
			crashOn(t, s, "POST", "/agents/"+c.ID+"/workspace/apply", map[string]any{})

			s = startServer(t, withHome(home))
			want, state := untouched, "untouched"
			if tc.applied {
				want, state = applied, "fully applied"
			}
			// The start found the journal the crash left, and said what it
			// did with it.
			if log := s.stderr.String(); !strings.Contains(log, "finished an apply interrupted by a crash") || !strings.Contains(log, fmt.Sprintf("completed=%v", tc.applied)) {
				t.Errorf("the restart did not report the interrupted apply (completed=%v):\n%s", tc.applied, log)
			}
			if got := s.run(t, p.ID, viewListing); got != want {
				t.Errorf("after a crash at %s the parent's view is not %s:\n%s\nwant\n%s", tc.point, state, got, want)
			}
			noStaging(t, s, p.ID)

			var res struct {
				ParentID string     `json:"parentId"`
				Changes  []wsChange `json:"changes"`
			}
			var pr wsProblem
			if st := s.DoJSON(t, "POST", "/agents/"+c.ID+"/workspace/apply", map[string]any{}, &res); st != 200 || res.ParentID != p.ID {
				t.Fatalf("apply after the restart = %d %+v", st, res)
			}
			if got := s.run(t, p.ID, viewListing); got != applied {
				t.Errorf("after the second apply the parent's view:\n%s\nwant\n%s", got, applied)
			}
			noStaging(t, s, p.ID)
			// And once more: nothing to do, nothing changed.
			if st := s.DoJSON(t, "POST", "/agents/"+c.ID+"/workspace/apply", map[string]any{}, &pr); st != 200 {
				t.Errorf("a third apply = %d %+v", st, pr)
			}
			if got := s.run(t, p.ID, viewListing); got != applied {
				t.Errorf("a third apply changed the parent's view:\n%s", got)
			}
		})
	}
}

// healthLayers is /healthz's count of the workspace layers (counted afresh
// by the first call of a server's life).
func healthLayers(t *testing.T, s *testServer) int64 {
	t.Helper()
	var h struct {
		Details struct {
			Workspaces *struct {
				Layers int64 `json:"layers"`
			} `json:"workspaces"`
		} `json:"details"`
	}
	if st := s.DoJSON(t, "GET", "/healthz", nil, &h); st != 200 || h.Details.Workspaces == nil {
		t.Fatalf("healthz = %d %+v", st, h.Details.Workspaces)
	}
	return h.Details.Workspaces.Layers
}

func agentIDs(t *testing.T, s *testServer) []string {
	t.Helper()
	var list []wsAgent
	if st := s.DoJSON(t, "GET", "/agents", nil, &list); st != 200 {
		t.Fatalf("GET /agents = %d", st)
	}
	var ids []string
	for _, a := range list {
		ids = append(ids, a.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestWorkspaceForkCrash: dshd SIGKILLs itself after a fork recorded the
// child's workspace and before the child's header (agents.create.prepared),
// in a snapshot fork of a snapshot agent and in a shared fork of one. The
// next start has no such child (GET /agents as before), forgets what was
// recorded for it (/healthz's layers as before the fork: the child's upper
// layer is removed), and the agent
// forked works on as it was; a fork then succeeds.
func TestWorkspaceForkCrash(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "overlayfs mounts and mount namespaces need CAP_SYS_ADMIN")
	for _, tc := range []struct {
		name string
		// from: fork the parent (p) or its snapshot child (c).
		from string
		body map[string]any
		// point: the crash point armed. A snapshot fork first forks once
		// without a crash, so that the parent's layer holds nothing: the
		// fork cut by the crash then has no layer of the parent's to
		// freeze, and every layer it made is the child's.
		point string
	}{
		{"snapshot fork", "p", map[string]any{"workspace": "snapshot"}, "agents.create.prepared:2"},
		{"shared fork of a snapshot agent", "c", map[string]any{"workspace": "shared"}, "agents.create.prepared"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home, _, p, c, _ := crashSetup(t)
			from := p.ID
			if tc.from == "c" {
				from = c.ID
			}
			s := startServer(t, withHome(home), withEnv("DSHD_CRASH_AT="+tc.point))
			if strings.HasSuffix(tc.point, ":2") {
				s.newAgent(t, "/agents/"+from+"/fork", tc.body)
			}
			ids := agentIDs(t, s)
			layers := healthLayers(t, s)
			view := s.run(t, from, viewListing)
			crashOn(t, s, "POST", "/agents/"+from+"/fork", tc.body)

			s = startServer(t, withHome(home))
			if log := s.stderr.String(); !strings.Contains(log, "forgetting the workspace of an agent a crash left unmade") {
				t.Errorf("the restart did not forget the unmade child's workspace:\n%s", log)
			}
			if got := agentIDs(t, s); !slices.Equal(got, ids) {
				t.Errorf("agents after the crash = %v, want %v (no child)", got, ids)
			}
			if got := healthLayers(t, s); got != layers {
				t.Errorf("workspace layers after the crash = %d, want %d as before the fork", got, layers)
			}
			if got := s.run(t, from, viewListing); got != view {
				t.Errorf("the forked agent's view after the crash:\n%s\nwant\n%s", got, view)
			}
			var got wsAgent
			if s.DoJSON(t, "GET", "/agents/"+from, nil, &got); got.Workspace.Mode != "snapshot" {
				t.Errorf("the forked agent's workspace after the crash: %+v", got.Workspace)
			}
			s.run(t, from, "echo after > after.txt")
			// The fork, done again, works, and the child sees the view.
			n := s.newAgent(t, "/agents/"+from+"/fork", tc.body)
			if want := tc.body["workspace"]; n.Workspace.Mode != want || n.Workspace.ParentID != from {
				t.Errorf("the fork after the crash: %+v", n.Workspace)
			}
			if out := s.run(t, n.ID, "cat after.txt"); out != "after\n" {
				t.Errorf("the new child sees after.txt = %q", out)
			}
		})
	}
}

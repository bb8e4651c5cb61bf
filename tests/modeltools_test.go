package tests

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/testenv"
)

// fileTool runs a file tool as a model would, with a call id, and returns
// its result; the harness's answer is 200 whatever the model got wrong.
func (s *testServer) fileTool(t *testing.T, agent, callID, name string, args map[string]any) toolResult {
	t.Helper()
	var r toolResult
	body := map[string]any{"callId": callID, "arguments": args}
	if st := s.DoJSON(t, "POST", "/agents/"+agent+"/tools/"+name, body, &r); st != 200 {
		t.Fatalf("%s %v = %d", name, args, st)
	}
	return r
}

// wantTool runs a file tool and checks whether it is an error result and
// that its text holds want.
func (s *testServer) wantTool(t *testing.T, agent, name string, args map[string]any, isError bool, want string) toolResult {
	t.Helper()
	r := s.fileTool(t, agent, "", name, args)
	if r.IsError != isError || !strings.Contains(r.Text, want) {
		t.Errorf("%s %v = isError %v %q; want isError %v and %q", name, args, r.IsError, r.Text, isError, want)
	}
	return r
}

// TestModelFileTools drives read_file, write_file, edit_file and
// apply_patch as a shared agent and as a snapshot fork, under each
// mechanism: what they write is what the agent's bash reads, each mistake
// is the model's error result, each refusal changes nothing, and a
// snapshot agent's call ends with a checkpoint holding its change.
func TestModelFileTools(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "snapshot views and both mechanisms need root")
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) { testModelFileTools(t, mech) })
	}
}

func testModelFileTools(t *testing.T, mech string) {
	s := startSandboxServer(t, mech)
	outside := filesDir(t, "tools-outside")
	tokenFile := tokenFileOf(t, s)
	newWS := func(name string) string {
		ws := filesDir(t, name)
		if err := os.MkdirAll(filepath.Join(ws, ".git"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "bin.dat"), []byte("\x00\x01\x02binary"), 0o644); err != nil {
			t.Fatal(err)
		}
		for link, to := range map[string]string{"out": outside, "tok": tokenFile} {
			if err := os.Symlink(to, filepath.Join(ws, link)); err != nil {
				t.Fatal(err)
			}
		}
		return ws
	}
	ww := map[string]any{"policy": "workspace-write", "network": "off"}
	type agentCase struct{ name, id, ws string }
	wsShared := newWS("tools-shared")
	agents := []agentCase{{name: "shared", id: s.newAgent(t, "/agents", map[string]any{"cwd": wsShared, "sandbox": ww}).ID, ws: wsShared}}
	var h struct {
		Details struct {
			Workspaces *struct{ Snapshot bool } `json:"workspaces"`
		} `json:"details"`
	}
	if s.DoJSON(t, "GET", "/healthz", nil, &h); h.Details.Workspaces != nil && h.Details.Workspaces.Snapshot {
		wsSnap := newWS("tools-snap")
		parent := s.newAgent(t, "/agents", map[string]any{"cwd": wsSnap, "sandbox": ww})
		fork := s.newAgent(t, "/agents/"+parent.ID+"/fork", map[string]any{"workspace": "snapshot", "sandbox": ww})
		agents = append(agents, agentCase{name: "snapshot", id: fork.ID, ws: wsSnap})
	} else {
		testenv.Need(t, "snapshot workspaces")
	}

	for _, a := range agents {
		t.Run(a.name, func(t *testing.T) {
			// Happy paths, each seen by the agent's bash.
			r := s.fileTool(t, a.id, "w1", "write_file", map[string]any{"file_path": "w/a.txt", "content": "alpha\nbeta\nbeta\n"})
			if r.IsError || r.CallID != "w1" {
				t.Fatalf("write_file = %+v", r)
			}
			if got := s.run(t, a.id, "cat w/a.txt"); got != "alpha\nbeta\nbeta\n" {
				t.Errorf("the bash reads %q", got)
			}
			if a.name == "snapshot" {
				var list checkpointList
				if st := s.DoJSON(t, "GET", "/agents/"+a.id+"/checkpoints", nil, &list); st != 200 || len(list.Checkpoints) == 0 {
					t.Fatalf("checkpoints = %d %+v", st, list)
				}
				c := list.Checkpoints[0]
				if c.CallID != "w1" || !slices.Contains(changeList(c.Changes), "added w/a.txt") {
					t.Errorf("the checkpoint after write_file: %+v", c)
				}
				if _, err := os.Stat(filepath.Join(a.ws, "w")); err == nil {
					t.Error("the fork's write reached the shared directory")
				}
			}
			s.wantTool(t, a.id, "read_file", map[string]any{"file_path": "w/a.txt", "offset": 2, "limit": 1}, false, "     2\tbeta")
			s.wantTool(t, a.id, "edit_file", map[string]any{"file_path": "w/a.txt", "old_string": "beta", "new_string": "gamma"}, true, "2 matches")
			s.wantTool(t, a.id, "edit_file", map[string]any{"file_path": "w/a.txt", "old_string": "delta", "new_string": "gamma"}, true, "was not found")
			s.wantTool(t, a.id, "edit_file", map[string]any{"file_path": "w/a.txt", "old_string": "alpha", "new_string": "ALPHA"}, false, "1 replacement")
			s.wantTool(t, a.id, "edit_file", map[string]any{"file_path": "w/a.txt", "old_string": "beta", "new_string": "b", "replace_all": true}, false, "2 replacement")
			if got := s.run(t, a.id, "cat w/a.txt"); got != "ALPHA\nb\nb\n" {
				t.Errorf("after the edits the bash reads %q", got)
			}
			patch := "*** Begin Patch\n*** Add File: p/new.txt\n+one\n*** Update File: p/new.txt\n@@\n-one\n+two\n" +
				"*** Update File: w/a.txt\n*** Move to: moved/a.txt\n@@\n ALPHA\n-b\n+c\n*** End Patch\n"
			s.wantTool(t, a.id, "apply_patch", map[string]any{"input": patch}, false, "A p/new.txt\nM moved/a.txt")
			if got := s.run(t, a.id, "cat p/new.txt moved/a.txt; test -e w/a.txt && echo left || echo gone"); got != "two\nALPHA\nc\nb\ngone\n" {
				t.Errorf("after the patch the bash reads %q", got)
			}
			s.wantTool(t, a.id, "read_file", map[string]any{"file_path": "bin.dat"}, true, "binary file")
			s.wantTool(t, a.id, "read_file", map[string]any{"file_path": "missing.txt"}, true, "no such file")

			// Refusals, nothing written.
			s.wantTool(t, a.id, "write_file", map[string]any{"file_path": outside + "/new", "content": "x"}, true, "not writable")
			s.wantTool(t, a.id, "write_file", map[string]any{"file_path": "/etc/dshd-tools-test", "content": "x"}, true, "not writable")
			s.wantTool(t, a.id, "write_file", map[string]any{"file_path": ".git/config", "content": "x"}, true, "protected")
			s.wantTool(t, a.id, "edit_file", map[string]any{"file_path": ".git/config", "old_string": "core", "new_string": "x"}, true, "protected")
			s.wantTool(t, a.id, "apply_patch", map[string]any{"input": "*** Begin Patch\n*** Add File: ok.txt\n+x\n*** Add File: .git/hooks/pre-commit\n+x\n*** End Patch"}, true, "protected")
			s.wantTool(t, a.id, "write_file", map[string]any{"file_path": "out/new", "content": "x"}, true, "symbolic link")
			s.wantTool(t, a.id, "write_file", map[string]any{"file_path": filepath.Join(s.Home, "planted"), "content": "x"}, true, "hidden")
			s.wantTool(t, a.id, "write_file", map[string]any{"file_path": "../x", "content": "x"}, true, "invalid path")
			for _, p := range []string{outside + "/new", "/etc/dshd-tools-test", filepath.Join(s.Home, "planted"), filepath.Join(a.ws, "ok.txt")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
			if got := s.run(t, a.id, "cat .git/config; test -e ok.txt && echo ok.txt || true; test -e .git/hooks/pre-commit && echo hook || true"); got != "[core]\n" {
				t.Errorf("the agent sees %q after the refusals", got)
			}
			// Reads of the token and the home.
			s.wantTool(t, a.id, "read_file", map[string]any{"file_path": tokenFile}, true, "hidden")
			s.wantTool(t, a.id, "read_file", map[string]any{"file_path": filepath.Join(s.Home, "sessions")}, true, "hidden")
			tok := s.fileTool(t, a.id, "", "read_file", map[string]any{"file_path": "tok"})
			if !tok.IsError || strings.Contains(tok.Text, s.Token) {
				t.Errorf("read through a link to the token = %+v", tok)
			}
		})
	}

	// A read-only agent reads, and writes nothing.
	ws := filesDir(t, "tools-ro")
	if err := os.WriteFile(filepath.Join(ws, "f"), []byte("ro\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ro := s.newAgent(t, "/agents", map[string]any{"cwd": ws, "sandbox": map[string]any{"policy": "read-only", "network": "off"}})
	s.wantTool(t, ro.ID, "read_file", map[string]any{"file_path": "f"}, false, "     1\tro")
	s.wantTool(t, ro.ID, "write_file", map[string]any{"file_path": "g", "content": "x"}, true, "read-only")
	s.wantTool(t, ro.ID, "edit_file", map[string]any{"file_path": "f", "old_string": "ro", "new_string": "rw"}, true, "read-only")
	s.wantTool(t, ro.ID, "apply_patch", map[string]any{"input": "*** Begin Patch\n*** Delete File: f\n*** End Patch"}, true, "read-only")
	if b, err := os.ReadFile(filepath.Join(ws, "f")); err != nil || string(b) != "ro\n" {
		t.Errorf("the read-only agent's file: %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "g")); err == nil {
		t.Error("the read-only agent wrote g")
	}
	// The transcript records each call and its result.
	var n int
	for _, e := range s.transcriptEvents(t, ro.ID) {
		if e["type"] == "tool/call" || e["type"] == "tool/result" {
			n++
		}
	}
	if n != 8 {
		t.Errorf("the read-only agent's transcript has %d tool events, want 8", n)
	}
}

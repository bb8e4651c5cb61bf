package tests

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/testenv"
)

// TestFilesMove drives op=move as a shared agent and as a snapshot fork,
// under each mechanism: a move is what the agent's bash sees (in its view:
// the fork's parent sees none of it), an existing target is 409 unless
// overwrite, and each refusal answers its code with nothing moved.
func TestFilesMove(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "snapshot views and both mechanisms need root")
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) { testFilesMove(t, mech) })
	}
}

func testFilesMove(t *testing.T, mech string) {
	s := startSandboxServer(t, mech)
	outside := filesDir(t, "move-outside")
	if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("v"), 0o644); err != nil {
		t.Fatal(err)
	}
	tokenFile := tokenFileOf(t, s)
	newWS := func(name string) string {
		ws := filesDir(t, name)
		for p, body := range map[string]string{".git/config": "[core]\n", "lower/f": "lower\n", "a.txt": "a\n", "b.txt": "b\n"} {
			if err := os.MkdirAll(filepath.Join(ws, filepath.Dir(p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ws, p), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
			t.Fatal(err)
		}
		return ws
	}
	ww := map[string]any{"policy": "workspace-write", "network": "off"}
	type agentCase struct{ name, id, ws, other string }
	wsShared := newWS("move-shared")
	agents := []agentCase{{name: "shared", id: s.newAgent(t, "/agents", map[string]any{"cwd": wsShared, "sandbox": ww}).ID, ws: wsShared}}
	var h struct {
		Details struct {
			Workspaces *struct{ Snapshot bool } `json:"workspaces"`
		} `json:"details"`
	}
	if s.DoJSON(t, "GET", "/healthz", nil, &h); h.Details.Workspaces != nil && h.Details.Workspaces.Snapshot {
		wsSnap := newWS("move-snap")
		parent := s.newAgent(t, "/agents", map[string]any{"cwd": wsSnap, "sandbox": ww})
		fork := s.newAgent(t, "/agents/"+parent.ID+"/fork", map[string]any{"workspace": "snapshot", "sandbox": ww})
		agents = append(agents, agentCase{name: "snapshot", id: fork.ID, ws: wsSnap, other: parent.ID})
	} else {
		testenv.Need(t, "snapshot workspaces")
	}
	for _, a := range agents {
		t.Run(a.name, func(t *testing.T) {
			f := "/agents/" + a.id + "/files/"
			mv := func(from, to, extra string) string { return f + from + "?op=move&to=" + url.QueryEscape(to) + extra }
			var got struct{ From, Path string }
			if err := json.Unmarshal(s.wantFile(t, "POST", mv("a.txt", "moved/a.txt", "&parents=true"), nil, 200, ""), &got); err != nil {
				t.Fatal(err)
			}
			if got.From != filepath.Join(a.ws, "a.txt") || got.Path != filepath.Join(a.ws, "moved/a.txt") {
				t.Errorf("the answer = %+v", got)
			}
			if out := s.run(t, a.id, "cat moved/a.txt; test -e a.txt && echo still; true"); out != "a\n" {
				t.Errorf("after the move the agent's bash reads %q", out)
			}
			s.wantFile(t, "POST", mv("b.txt", "moved/a.txt", ""), nil, 409, "path_exists")
			if out := s.run(t, a.id, "cat b.txt moved/a.txt"); out != "b\na\n" {
				t.Errorf("a refused move changed %q", out)
			}
			s.wantFile(t, "POST", mv("b.txt", "moved/a.txt", "&overwrite=true"), nil, 200, "")
			if out := s.run(t, a.id, "cat moved/a.txt; test -e b.txt && echo still; true"); out != "b\n" {
				t.Errorf("after the overwrite the agent's bash reads %q", out)
			}
			if a.name == "snapshot" {
				if out := s.run(t, a.other, "cat a.txt b.txt; test -e moved && echo seen; true"); out != "a\nb\n" {
					t.Errorf("the fork's moves: its parent's bash reads %q", out)
				}
				// A directory of the lower layer: renamed where overlayfs
				// can, 409 cross_device where it cannot, never half.
				st, code, b := s.fileReq(t, "POST", mv("lower", "lower2", ""), nil)
				out := s.run(t, a.id, "cat lower/f lower2/f 2>/dev/null; true")
				switch {
				case st == 200 && out == "lower\n":
				case st == 409 && code == "cross_device" && out == "lower\n":
				default:
					t.Errorf("moving a lower directory = %d %q (%s), the bash reads %q", st, code, b, out)
				}
			} else {
				if _, err := os.Stat(filepath.Join(a.ws, "moved/a.txt")); err != nil {
					t.Errorf("the shared agent's move is not in its directory: %v", err)
				}
				s.wantFile(t, "POST", mv("lower", "lower2", ""), nil, 200, "")
			}

			// Refusals, each with its code, nothing moved.
			s.wantFile(t, "POST", mv("moved/a.txt", ".git/hooks/pre-commit", "&parents=true"), nil, 403, "path_protected")
			s.wantFile(t, "POST", mv(".git/config", "config", ""), nil, 403, "path_protected")
			s.wantFile(t, "POST", mv("moved/a.txt", "out/planted", ""), nil, 403, "path_through_link")
			s.wantFile(t, "POST", mv("out/victim", "stolen", ""), nil, 403, "path_through_link")
			s.wantFile(t, "POST", mv("moved/a.txt", outside+"/abs", ""), nil, 403, "path_not_writable")
			s.wantFile(t, "POST", mv(tokenFile, "stolen", ""), nil, 403, "path_hidden")
			s.wantFile(t, "POST", mv("moved/a.txt", s.Home+"/planted", ""), nil, 403, "path_hidden")
			s.wantFile(t, "POST", mv("moved", "moved/sub", ""), nil, 422, "invalid_path")
			s.wantFile(t, "POST", mv("moved/a.txt", "../x", ""), nil, 422, "invalid_path")
			s.wantFile(t, "POST", mv("nothing", "x", ""), nil, 404, "path_not_found")
			s.wantFile(t, "POST", f+"moved/a.txt?op=move", nil, 400, "bad_request")
			s.wantFile(t, "POST", f+"moved/a.txt?op=mkdir&to=x", nil, 400, "bad_request")
			for _, p := range []string{filepath.Join(outside, "planted"), filepath.Join(outside, "abs"), filepath.Join(s.Home, "planted")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
			if out := s.run(t, a.id, "cat moved/a.txt .git/config; test -e .git/hooks/pre-commit && echo hooked; true"); out != "b\n[core]\n" {
				t.Errorf("after the refusals the agent's bash reads %q", out)
			}
			if b, err := os.ReadFile(filepath.Join(outside, "victim")); err != nil || string(b) != "v" {
				t.Errorf("the victim outside: %q, %v", b, err)
			}
			if b, err := os.ReadFile(tokenFile); err != nil || !strings.Contains(string(b), s.Token) {
				t.Errorf("the token file: %v", err)
			}
		})
	}

	// A read-only agent moves nothing.
	ws := newWS("move-ro")
	ro := s.newAgent(t, "/agents", map[string]any{"cwd": ws, "sandbox": map[string]any{"policy": "read-only", "network": "off"}})
	s.wantFile(t, "POST", "/agents/"+ro.ID+"/files/a.txt?op=move&to=c.txt", nil, 403, "path_not_writable")
	if _, err := os.Stat(filepath.Join(ws, "a.txt")); err != nil {
		t.Errorf("the read-only agent's move: %v", err)
	}
}

package tests

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/testenv"
)

// TestAdversarialFileTools: the model's file tools (read_file, write_file,
// edit_file, apply_patch) under hostile arguments, over the HTTP tools
// route and over /mcp, as a confined (workspace-write) and an unrestricted
// agent, each row beside a baseline that proves its path really leads
// where the attack wants (the model's own unconfined bash gets there, or
// the unrestricted agent's tool does where only the policy stops it).
// Every answer is a tool result (never a server error) that changes
// nothing outside and carries no token.
func TestAdversarialFileTools(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "both mechanisms need root")
	mcp := startMCPClient(t)
	for _, mech := range sandboxMechanisms {
		t.Run(mech, func(t *testing.T) { testAdversarialFileTools(t, mcp, mech) })
	}
}

// toolAttack is one row: a tool call and what must not have happened.
type toolAttack struct {
	name, tool string
	args       map[string]any
	// harmed, when set, reports from the host's side that the attack
	// worked (a file appeared or changed outside).
	harmed func() bool
}

func testAdversarialFileTools(t *testing.T, mcp *mcpClient, mech string) {
	s := startSandboxServer(t, mech)
	base, err := os.MkdirTemp("/var/tmp", "dshd-adversarial-tools-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	outside := filepath.Join(base, "outside")
	token := filepath.Join(s.Home, "server.token")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	out := func(name string) string { return filepath.Join(outside, name) }
	victim := func() string { b, _ := os.ReadFile(out("victim")); return string(b) }
	if err := os.WriteFile(out("victim"), []byte("v\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type agentCase struct{ who, id, ws, session string }
	mk := func(who, pol string) agentCase {
		ws := filepath.Join(base, who)
		for _, d := range []string{ws, filepath.Join(ws, ".git", "hooks")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		id := s.newAgent(t, "/agents", map[string]any{"cwd": ws, "sandbox": map[string]any{"policy": pol}}).ID
		// The model plants its links and a file of its own with its bash.
		if r := s.callTool(t, id, "bash", map[string]any{"command": "ln -s " + outside + " link && ln -s " + token + " toklink && echo mine > mine.txt && echo planted"}); !strings.Contains(r.Text, "planted") {
			t.Fatalf("planting the links: %q", r.Text)
		}
		session := "advtools-" + mech + "-" + who
		mcp.connect(s, session, "?agentId="+id, nil)
		return agentCase{who, id, ws, session}
	}
	confined, free := mk("confined", "workspace-write"), mk("free", "unrestricted")
	bash := func(id, cmd string) string { return s.callTool(t, id, "bash", map[string]any{"command": cmd}).Text }

	// Baselines: the links and ../ lead out, the model's unconfined bash
	// gets there, and where only the policy stands in the way the
	// unrestricted agent's own tools get there too.
	bash(free.id, "echo x > link/pwned-bash; echo x > ../outside/dotdot-bash")
	if !exists(out("pwned-bash")) || !exists(out("dotdot-bash")) {
		t.Fatal("baseline: the unconfined bash did not write through the link and ../: the rows below prove nothing")
	}
	if got := bash(free.id, "cat toklink"); !strings.Contains(got, s.Token) {
		t.Fatalf("baseline: the planted link does not lead to the token (the unconfined bash read %q)", got)
	}
	if r := s.callTool(t, free.id, "write_file", map[string]any{"file_path": out("abs-free"), "content": "x"}); r.IsError || !exists(out("abs-free")) {
		t.Fatalf("baseline: write_file outside as the unrestricted agent = %+v", r)
	}
	if r := s.callTool(t, free.id, "write_file", map[string]any{"file_path": ".git/hooks/post-checkout", "content": "x"}); r.IsError {
		t.Fatalf("baseline: write_file into .git as the unrestricted agent = %+v", r)
	}

	patch := func(body string) map[string]any {
		return map[string]any{"input": "*** Begin Patch\n" + body + "*** End Patch\n"}
	}
	hookFile := filepath.Join(s.Home, "hooks", "claude-code.json")
	rows := []toolAttack{
		{"write_file through the planted link", "write_file", map[string]any{"file_path": "link/pwned", "content": "x"}, func() bool { return exists(out("pwned")) }},
		{"write_file ../", "write_file", map[string]any{"file_path": "../outside/dotdot", "content": "x"}, func() bool { return exists(out("dotdot")) }},
		{"edit_file through the planted link", "edit_file", map[string]any{"file_path": "link/victim", "old_string": "v", "new_string": "pwned"}, func() bool { return victim() != "v\n" }},
		{"apply_patch add through the link", "apply_patch", patch("*** Add File: link/pwned-patch\n+x\n"), func() bool { return exists(out("pwned-patch")) }},
		{"apply_patch add with ../", "apply_patch", patch("*** Add File: ../outside/dotdot-patch\n+x\n"), func() bool { return exists(out("dotdot-patch")) }},
		{"apply_patch delete through the link", "apply_patch", patch("*** Delete File: link/victim\n"), func() bool { return !exists(out("victim")) }},
		{"apply_patch update through the link", "apply_patch", patch("*** Update File: link/victim\n@@\n-v\n+pwned\n"), func() bool { return victim() != "v\n" }},
		{"apply_patch move through the link", "apply_patch", patch("*** Update File: mine.txt\n*** Move to: link/moved\n@@\n-mine\n+moved\n"), func() bool { return exists(out("moved")) }},
		{"write_file a hook into the home", "write_file", map[string]any{"file_path": hookFile, "content": "{}"}, func() bool { return exists(hookFile) }},
		{"apply_patch a hook into the home", "apply_patch", patch("*** Add File: " + hookFile + "\n+{}\n"), func() bool { return exists(hookFile) }},
		{"edit_file the token", "edit_file", map[string]any{"file_path": token, "old_string": s.Token[:8], "new_string": "x"}, nil},
		{"read_file the token through the planted link", "read_file", map[string]any{"file_path": "toklink"}, nil},
		{"read_file the token", "read_file", map[string]any{"file_path": token}, nil},
		{"read_file dshd's environment", "read_file", map[string]any{"file_path": "/proc/self/environ"}, nil},
		{"read_file dshd's environment by pid", "read_file", map[string]any{"file_path": fmt.Sprintf("/proc/%d/environ", s.cmd.Process.Pid)}, nil},
		{"read_file the home's sessions", "read_file", map[string]any{"file_path": filepath.Join(s.Home, "sessions")}, nil},
	}
	confinedRows := []toolAttack{
		{"write_file outside the roots", "write_file", map[string]any{"file_path": out("abs"), "content": "x"}, func() bool { return exists(out("abs")) }},
		{"write_file /etc", "write_file", map[string]any{"file_path": "/etc/dshd-adversarial-tools", "content": "x"}, func() bool { return exists("/etc/dshd-adversarial-tools") }},
		{"apply_patch delete outside the roots", "apply_patch", patch("*** Delete File: " + out("victim") + "\n"), func() bool { return !exists(out("victim")) }},
		{"write_file a git hook", "write_file", map[string]any{"file_path": ".git/hooks/pre-commit", "content": "x"}, func() bool { return exists(filepath.Join(confined.ws, ".git/hooks/pre-commit")) }},
		{"apply_patch a git hook", "apply_patch", patch("*** Add File: .git/hooks/pre-push\n+x\n"), func() bool { return exists(filepath.Join(confined.ws, ".git/hooks/pre-push")) }},
	}
	for _, a := range []agentCase{confined, free} {
		all := rows
		if a == confined {
			all = append(append([]toolAttack(nil), rows...), confinedRows...)
		}
		for _, r := range all {
			t.Run(a.who+"/"+r.name, func(t *testing.T) {
				for _, tr := range []string{"http", "mcp"} {
					var text string
					var isErr bool
					if tr == "http" {
						var res toolResult
						if st := s.DoJSON(t, "POST", "/agents/"+a.id+"/tools/"+r.tool, map[string]any{"arguments": r.args}, &res); st != http.StatusOK {
							t.Errorf("http: %s = %d, want 200 (a tool result, never a server error)", r.tool, st)
						}
						text, isErr = res.Text, res.IsError
					} else {
						res := mcp.call(a.session, r.tool, r.args)
						text, isErr = res.text(), res.Result.IsError
					}
					if !isErr {
						t.Errorf("%s: not an error result: %q", tr, text)
					}
					if strings.Contains(text, s.Token) {
						t.Errorf("%s: the answer carries the token", tr)
					}
					if r.harmed != nil && r.harmed() {
						t.Errorf("%s: the attack worked (%q)", tr, text)
					}
				}
			})
		}
	}
	if b, err := os.ReadFile(token); err != nil || !strings.Contains(string(b), s.Token) {
		t.Errorf("the token file changed: %q, %v", b, err)
	}
}

package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/apitest"
)

// TestFileToolHooks runs published-style hook scripts, unchanged, around
// the file tools through the real server: a Claude Code formatter after
// Edit|Write, a Claude Code guard of .env files (exit 2 and a reason: the
// model's result, nothing written), and a Codex apply_patch guard (JSON
// deny) beside a Codex recorder whose Edit|Write matcher selects
// apply_patch too, as Codex's does.
func TestFileToolHooks(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"jq", "gofmt", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the hook scripts need %s", tool)
		}
	}
	home := filepath.Join(t.TempDir(), "home")
	testdata, err := filepath.Abs("testdata/hooks")
	if err != nil {
		t.Fatal(err)
	}
	codexLog := filepath.Join(t.TempDir(), "codex.jsonl")
	command := func(c string) []any { return []any{map[string]any{"type": "command", "command": c, "timeout": 20}} }
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "claude-code.json"), map[string]any{"hooks": map[string]any{
		"PreToolUse":  []any{map[string]any{"matcher": "Edit|Write", "hooks": command(testdata + "/protect-env.py")}},
		"PostToolUse": []any{map[string]any{"matcher": "Edit|Write", "hooks": command(testdata + "/format-go.sh")}},
	}})
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "codex.json"), map[string]any{"hooks": map[string]any{
		"PreToolUse":  []any{map[string]any{"matcher": "^apply_patch$", "hooks": command(testdata + "/codex-patch-guard.sh")}},
		"PostToolUse": []any{map[string]any{"matcher": "Edit|Write", "hooks": command("HOOK_LOG=" + codexLog + " " + testdata + "/record.py")}},
	}})
	s := startServer(t, withHome(home))
	cwd := t.TempDir()
	a := s.newAgent(t, "/agents", map[string]any{"cwd": cwd})
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(cwd, name))
		if err != nil {
			return "<missing>"
		}
		return string(b)
	}

	// The formatter runs after Write and after Edit.
	s.wantTool(t, a.ID, "write_file", map[string]any{"file_path": "main.go", "content": "package main\nfunc  main( ) {}\n"}, false, "Created")
	if got := read("main.go"); got != "package main\n\nfunc main() {}\n" {
		t.Errorf("after Write and the formatter: %q", got)
	}
	s.wantTool(t, a.ID, "edit_file", map[string]any{"file_path": filepath.Join(cwd, "main.go"), "old_string": "func main() {}", "new_string": "func  main()  { println( 1 ) }"}, false, "1 replacement")
	if got := read("main.go"); got != "package main\n\nfunc main() { println(1) }\n" {
		t.Errorf("after Edit and the formatter: %q", got)
	}

	// The .env guard's exit 2 is the model's result; nothing is written.
	r := s.wantTool(t, a.ID, "write_file", map[string]any{"file_path": ".env", "content": "TOKEN=x\n"}, true, "holds secrets: edit it by hand")
	if !strings.Contains(r.Text, "[blocked by PreToolUse hook: "+filepath.Join(cwd, ".env")) {
		t.Errorf("blocked Write = %q", r.Text)
	}
	if got := read(".env"); got != "<missing>" {
		t.Errorf(".env was written: %q", got)
	}

	// The Codex guard denies a patch into vendor/, nothing written; a
	// patch elsewhere applies, and the Codex recorder sees it.
	s.wantTool(t, a.ID, "apply_patch", map[string]any{"input": "*** Begin Patch\n*** Add File: ok.txt\n+ok\n*** Add File: vendor/x.go\n+package x\n*** End Patch"},
		true, "vendor/ is generated: change its source instead")
	if read("ok.txt") != "<missing>" || read("vendor/x.go") != "<missing>" {
		t.Error("a denied patch wrote files")
	}
	patch := "*** Begin Patch\n*** Add File: notes.txt\n+hello\n*** End Patch\n"
	s.wantTool(t, a.ID, "apply_patch", map[string]any{"input": patch}, false, "A notes.txt")
	// It ran after the Write, the Edit and the applied patch (a denied
	// call has no PostToolUse).
	calls := readHookLog(t, codexLog)
	var names []string
	var p struct {
		HookEventName string         `json:"hook_event_name"`
		ToolName      string         `json:"tool_name"`
		ToolInput     map[string]any `json:"tool_input"`
		ToolResponse  any            `json:"tool_response"`
	}
	for _, c := range calls {
		if err := json.Unmarshal([]byte(c.Raw), &p); err != nil {
			t.Fatal(err)
		}
		names = append(names, p.ToolName)
	}
	if strings.Join(names, ",") != "Write,Edit,apply_patch" {
		t.Fatalf("the Codex recorder saw %v, want Write, Edit and apply_patch", names)
	}
	if p.HookEventName != "PostToolUse" || p.ToolName != "apply_patch" || p.ToolInput["command"] != patch ||
		p.ToolResponse != "Success. Updated the following files:\nA notes.txt" {
		t.Errorf("the Codex payload: %+v", p)
	}
}

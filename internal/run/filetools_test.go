package run

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/files"
	"github.com/dshd/dshd/internal/hooks"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/tools"
)

func TestReadFile(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	var lines []string
	for i := 1; i <= 2500; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(a.Cwd, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("long.txt", strings.Join(lines, "\n")+"\n")
	write("crlf.txt", "a\r\nb\r\n")
	write("empty.txt", "")
	write("bin", "\x7fELF\x00\x01\x02")
	write("wide.txt", strings.Repeat("x", 3000)+"\nnext\n")
	long := filepath.Join(a.Cwd, "long.txt")

	for _, tt := range []struct {
		name    string
		args    map[string]any
		isError bool
		want    []string // substrings of the text, in order
		not     string
	}{
		{"default reads 2000 lines", map[string]any{"file_path": "long.txt"}, false,
			[]string{"     1\tline 1\n", "  2000\tline 2000\n[lines 1-2000 shown; the file goes on: read_file {\"file_path\":\"" + long + "\",\"offset\":2001}]"}, "line 2001"},
		{"offset and limit", map[string]any{"file_path": long, "offset": 2499, "limit": 5}, false, []string{"  2499\tline 2499\n  2500\tline 2500"}, "file goes on"},
		{"crlf lines", map[string]any{"file_path": "crlf.txt"}, false, []string{"     1\ta\n     2\tb"}, "\r"},
		{"empty", map[string]any{"file_path": "empty.txt"}, false, []string{"(empty file"}, ""},
		{"long line cut", map[string]any{"file_path": "wide.txt"}, false, []string{"…[line cut]\n     2\tnext"}, ""},
		{"past the end", map[string]any{"file_path": "crlf.txt", "offset": 9}, true, []string{"offset 9 is past the end", "has 2 lines"}, ""},
		{"binary refused", map[string]any{"file_path": "bin"}, true, []string{"is a binary file"}, "ELF"},
		{"directory refused", map[string]any{"file_path": "."}, true, []string{"is a directory"}, ""},
		{"missing", map[string]any{"file_path": "nope.txt"}, true, []string{"no such file"}, ""},
		{"the home is hidden", map[string]any{"file_path": filepath.Join(w.home, "sessions")}, true, []string{"hidden path"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := w.call(t, a.ID, tools.ToolReadFile, tt.args)
			if res.IsError != tt.isError {
				t.Fatalf("isError = %v, want %v: %s", res.IsError, tt.isError, res.Text)
			}
			rest := res.Text
			for _, s := range tt.want {
				i := strings.Index(rest, s)
				if i < 0 {
					t.Fatalf("text lacks %q (in order):\n%.600s", s, res.Text)
				}
				rest = rest[i+len(s):]
			}
			if tt.not != "" && strings.Contains(res.Text, tt.not) {
				t.Errorf("text holds %q:\n%.300s", tt.not, res.Text)
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	res := w.call(t, a.ID, tools.ToolWriteFile, map[string]any{"file_path": "sub/dir/new.txt", "content": "hello\n"})
	p := filepath.Join(a.Cwd, "sub/dir/new.txt")
	if res.IsError || res.Text != "Created "+p+" (6 bytes)" {
		t.Fatalf("result = %+v", res)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "hello\n" {
		t.Fatalf("file = %q, %v", b, err)
	}
	if err := os.Chmod(p, 0o750); err != nil {
		t.Fatal(err)
	}
	res = w.call(t, a.ID, tools.ToolWriteFile, map[string]any{"file_path": p, "content": ""})
	if res.IsError || !strings.HasPrefix(res.Text, "Wrote "+p) {
		t.Fatalf("result = %+v", res)
	}
	if fi, err := os.Stat(p); err != nil || fi.Size() != 0 || fi.Mode().Perm() != 0o750 {
		t.Errorf("rewritten file: %v, %v (want empty, mode 0750 kept)", fi, err)
	}
	// Into the home: refused, nothing written.
	res = w.call(t, a.ID, tools.ToolWriteFile, map[string]any{"file_path": filepath.Join(w.home, "planted"), "content": "x"})
	if !res.IsError || !strings.Contains(res.Text, "hidden path") {
		t.Errorf("write into the home = %+v", res)
	}
	if _, err := os.Stat(filepath.Join(w.home, "planted")); err == nil {
		t.Error("a file was written into the home")
	}
	// The argument rules: content may be empty, but must be given.
	res = w.call(t, a.ID, tools.ToolWriteFile, map[string]any{"file_path": "x"})
	if !res.IsError || !strings.Contains(res.Text, "content is required") {
		t.Errorf("no content = %+v", res)
	}
}

// TestFileToolHooks: hooks see the vendors' names and shapes, a PreToolUse
// block is the model's result and changes nothing, and PostToolUse sees the
// response.
func TestFileToolHooks(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	w.hooks.decide = func(in hooks.Input) hooks.Outcome {
		if in.Event == hooks.PreToolUse && strings.HasSuffix(fmt.Sprint(in.ToolInput.(map[string]any)["file_path"]), ".env") {
			return hooks.Outcome{Blocked: true, Decision: hooks.DecisionDeny, Reason: "no writes to .env"}
		}
		return hooks.Outcome{}
	}
	raw := json.RawMessage(`{"file_path":".env","content":"SECRET=1"}`)
	res, err := w.svc.Call(context.Background(), a.ID, tools.ToolWriteFile, "toolu_1", raw)
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.Text != "[blocked by PreToolUse hook: no writes to .env]" {
		t.Errorf("result = %+v", res)
	}
	if _, err := os.Stat(filepath.Join(a.Cwd, ".env")); err == nil {
		t.Error("a blocked write wrote")
	}
	res = w.call(t, a.ID, tools.ToolWriteFile, map[string]any{"file_path": "ok.txt", "content": "v"})
	if res.IsError {
		t.Fatalf("result = %+v", res)
	}
	w.call(t, a.ID, tools.ToolReadFile, map[string]any{"file_path": "ok.txt", "limit": 3})

	seen := w.hooks.seen()
	var got []string
	for _, in := range seen {
		got = append(got, fmt.Sprintf("%s %s %v", in.Event, in.ToolName, in.ToolInput))
	}
	// file_path is absolute, as Claude Code gives it.
	want := []string{
		"PreToolUse Write map[content:SECRET=1 file_path:" + a.Cwd + "/.env]",
		"PreToolUse Write map[content:v file_path:" + a.Cwd + "/ok.txt]",
		"PostToolUse Write map[content:v file_path:" + a.Cwd + "/ok.txt]",
		"PreToolUse Read map[file_path:" + a.Cwd + "/ok.txt limit:3]",
		"PostToolUse Read map[file_path:" + a.Cwd + "/ok.txt limit:3]",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hook runs (-want +got):\n%s", diff)
	}
	okPath := filepath.Join(a.Cwd, "ok.txt")
	if diff := cmp.Diff(map[string]any{"type": "create", "filePath": okPath, "content": "v"}, seen[2].ToolResponse); diff != "" {
		t.Errorf("Write's tool_response (-want +got):\n%s", diff)
	}
	var types []string
	for _, e := range w.events(t, a.ID, agents.EventToolCall, agents.EventToolResult) {
		types = append(types, e.Type)
	}
	if len(types) != 6 {
		t.Errorf("transcript has %v, want a tool/call and a tool/result per call", types)
	}
}

func TestEditFile(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	for _, tt := range []struct {
		name       string
		file       string // "" for none
		args       map[string]any
		isError    bool
		wantText   string // a substring
		wantResult string // the file after the call
	}{
		{"unique", "a\nb\nc\n", map[string]any{"old_string": "b", "new_string": "B"}, false, "1 replacement", "a\nB\nc\n"},
		{"not unique", "x\nx\n", map[string]any{"old_string": "x", "new_string": "y"}, true, "2 matches", "x\nx\n"},
		{"replace all", "x\nx\n", map[string]any{"old_string": "x", "new_string": "y", "replace_all": true}, false, "2 replacement", "y\ny\n"},
		{"missing", "a\n", map[string]any{"old_string": "zzz", "new_string": "y"}, true, "was not found", "a\n"},
		{"no change", "a\n", map[string]any{"old_string": "a", "new_string": "a"}, true, "the same", "a\n"},
		{"crlf kept", "one\r\ntwo\r\n", map[string]any{"old_string": "one\ntwo", "new_string": "1\n2"}, false, "1 replacement", "1\r\n2\r\n"},
		{"no trailing newline kept", "end", map[string]any{"old_string": "end", "new_string": "fin"}, false, "", "fin"},
		{"deletion", "keep\ndrop\n", map[string]any{"old_string": "drop\n", "new_string": ""}, false, "", "keep\n"},
		{"empty old makes a file", "", map[string]any{"old_string": "", "new_string": "new\n"}, false, "Created", "new\n"},
		{"empty old on a file", "a\n", map[string]any{"old_string": "", "new_string": "b"}, true, "old_string is empty", "a\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(a.Cwd, strings.ReplaceAll(tt.name, " ", "_"))
			if tt.file != "" || !strings.HasPrefix(tt.name, "empty old makes") {
				if err := os.WriteFile(p, []byte(tt.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			args := map[string]any{"file_path": p}
			for k, v := range tt.args {
				args[k] = v
			}
			res := w.call(t, a.ID, tools.ToolEditFile, args)
			if res.IsError != tt.isError || !strings.Contains(res.Text, tt.wantText) {
				t.Errorf("result = %+v, want isError %v and %q", res, tt.isError, tt.wantText)
			}
			if b, err := os.ReadFile(p); err != nil || string(b) != tt.wantResult {
				t.Errorf("file = %q, %v; want %q", b, err, tt.wantResult)
			}
		})
	}
}

func TestApplyPatch(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	write := func(name, content string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(a.Cwd, name), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(a.Cwd, name))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	write("app.py", "def greet():\n    print(\"Hi\")\n", 0o755)
	write("old.txt", "bye\n", 0o644)

	patch := "*** Begin Patch\n*** Add File: notes/new.txt\n+first\n*** Update File: notes/new.txt\n@@\n-first\n+second\n" +
		"*** Update File: app.py\n*** Move to: src/main.py\n@@ def greet():\n-    print(\"Hi\")\n+    print(\"Hello, world!\")\n" +
		"*** Delete File: old.txt\n*** End Patch\n"
	res := w.call(t, a.ID, tools.ToolApplyPatch, map[string]any{"input": patch})
	want := "Success. Updated the following files:\nA notes/new.txt\nM src/main.py\nD old.txt"
	if res.IsError || res.Text != want {
		t.Fatalf("result = %+v, want %q", res, want)
	}
	if got := read("notes/new.txt"); got != "second\n" {
		t.Errorf("added then updated = %q", got)
	}
	if got := read("src/main.py"); got != "def greet():\n    print(\"Hello, world!\")\n" {
		t.Errorf("moved = %q", got)
	}
	if fi, err := os.Stat(filepath.Join(a.Cwd, "src/main.py")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("moved file's mode: %v, %v", fi, err)
	}
	for _, gone := range []string{"app.py", "old.txt"} {
		if _, err := os.Stat(filepath.Join(a.Cwd, gone)); err == nil {
			t.Errorf("%s still exists", gone)
		}
	}

	// A hunk that does not match changes nothing, the add before it included.
	res = w.call(t, a.ID, tools.ToolApplyPatch, map[string]any{"input": "*** Begin Patch\n*** Add File: x.txt\n+x\n" +
		"*** Update File: src/main.py\n@@\n-no such line\n+y\n*** End Patch"})
	if !res.IsError || !strings.Contains(res.Text, "nothing was changed") {
		t.Errorf("mismatch = %+v", res)
	}
	if got := read("x.txt"); !strings.HasPrefix(got, "<") {
		t.Errorf("x.txt written by a failed patch: %q", got)
	}
	// One file named two ways (relative, absolute, with ./) is one file:
	// each op sees what the ops before it made of it.
	write("two.txt", "one\n", 0o644)
	res = w.call(t, a.ID, tools.ToolApplyPatch, map[string]any{"input": "*** Begin Patch\n*** Update File: two.txt\n@@\n-one\n+two\n" +
		"*** Update File: " + filepath.Join(a.Cwd, "two.txt") + "\n@@\n-two\n+three\n*** Update File: ./two.txt\n@@\n-three\n+four\n*** End Patch"})
	if want := "Success. Updated the following files:\nM two.txt"; res.IsError || res.Text != want {
		t.Errorf("one file named three ways = %+v, want %q", res, want)
	}
	if got := read("two.txt"); got != "four\n" {
		t.Errorf("one file named three ways = %q, want every op's change", got)
	}
	// Not a patch at all.
	res = w.call(t, a.ID, tools.ToolApplyPatch, map[string]any{"input": "diff --git a b"})
	if !res.IsError || !strings.Contains(res.Text, "invalid patch") {
		t.Errorf("garbage = %+v", res)
	}
	// A path into the home is refused before anything is written.
	res = w.call(t, a.ID, tools.ToolApplyPatch, map[string]any{"input": "*** Begin Patch\n*** Add File: y.txt\n+y\n*** Add File: " +
		filepath.Join(w.home, "planted") + "\n+x\n*** End Patch"})
	if !res.IsError || !strings.Contains(res.Text, "hidden path") {
		t.Errorf("into the home = %+v", res)
	}
	if got := read("y.txt"); !strings.HasPrefix(got, "<") {
		t.Errorf("y.txt written by a refused patch: %q", got)
	}
	// So is one through a link on the way (a place Plan reads as free).
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(a.Cwd, "link")); err != nil {
		t.Fatal(err)
	}
	res = w.call(t, a.ID, tools.ToolApplyPatch, map[string]any{"input": "*** Begin Patch\n*** Add File: z.txt\n+z\n*** Add File: link/x\n+x\n*** End Patch"})
	if !res.IsError || !strings.Contains(res.Text, "nothing was changed") || !strings.Contains(res.Text, "symbolic link") {
		t.Errorf("through a link = %+v", res)
	}
	if got := read("z.txt"); !strings.HasPrefix(got, "<") {
		t.Errorf("z.txt written by a refused patch: %q", got)
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Error("a patch wrote through the link")
	}
}

// TestApplyPatchHooks: Codex's hooks see apply_patch with the patch as
// tool_input.command, and a matcher for Write or Edit selects it too.
func TestApplyPatchHooks(t *testing.T) {
	w := newWorld(t)
	a := w.agent(t)
	patch := "*** Begin Patch\n*** Add File: h.txt\n+h\n*** End Patch\n"
	w.call(t, a.ID, tools.ToolApplyPatch, map[string]any{"input": patch})
	seen := w.hooks.seen()
	if len(seen) != 2 {
		t.Fatalf("hook runs = %+v", seen)
	}
	for _, in := range seen {
		if in.ToolName != "apply_patch" || !cmp.Equal(in.MatcherAliases, []string{"Write", "Edit"}) ||
			!cmp.Equal(in.ToolInput, map[string]any{"command": patch}) {
			t.Errorf("%s input = %+v", in.Event, in)
		}
	}
	if seen[1].ToolResponse != "Success. Updated the following files:\nA h.txt" {
		t.Errorf("tool_response = %#v", seen[1].ToolResponse)
	}
}

// TestTighten: a caller's declared sandbox (an MCP client's) tightens the
// file tools' scope, never loosens it.
func TestTighten(t *testing.T) {
	ww := sandbox.Policy{FS: sandbox.WorkspaceWrite, Network: sandbox.NetworkOff}
	for _, tt := range []struct {
		agent sandbox.Policy
		call  sandbox.FS
		want  sandbox.FS
	}{
		{ww, "", sandbox.WorkspaceWrite},
		{ww, sandbox.ReadOnly, sandbox.ReadOnly},
		{ww, sandbox.Unrestricted, sandbox.WorkspaceWrite},
		{sandbox.Policy{FS: sandbox.Unrestricted, Network: sandbox.NetworkOn}, sandbox.WorkspaceWrite, sandbox.WorkspaceWrite},
		{sandbox.Policy{FS: sandbox.ReadOnly, Network: sandbox.NetworkOn}, sandbox.Unrestricted, sandbox.ReadOnly},
	} {
		sc := &files.Scope{FS: tt.agent.FS}
		tighten(sc, tt.agent, sandbox.Policy{FS: tt.call})
		if sc.FS != tt.want {
			t.Errorf("agent %s, call %q: scope %s, want %s", tt.agent, tt.call, sc.FS, tt.want)
		}
	}
}

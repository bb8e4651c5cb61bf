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
	"github.com/dshd/dshd/internal/hooks"
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
	want := []string{
		"PreToolUse Write map[content:SECRET=1 file_path:.env]",
		"PreToolUse Write map[content:v file_path:ok.txt]",
		"PostToolUse Write map[content:v file_path:ok.txt]",
		"PreToolUse Read map[file_path:ok.txt limit:3]",
		"PostToolUse Read map[file_path:ok.txt limit:3]",
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

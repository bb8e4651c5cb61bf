package hooks

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// writeHooks writes the given dialect files under a fresh home and returns it.
func writeHooks(tb testing.TB, files map[Dialect]string) string {
	tb.Helper()
	home := tb.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "hooks"), 0o700); err != nil {
		tb.Fatal(err)
	}
	for d, content := range files {
		if err := os.WriteFile(File(home, d), []byte(content), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return home
}

func mustLoad(tb testing.TB, files map[Dialect]string) *Config {
	tb.Helper()
	cfg, err := Load(writeHooks(tb, files))
	if err != nil {
		tb.Fatalf("Load: %v", err)
	}
	return cfg
}

func TestLoadMissingFiles(t *testing.T) {
	cfg, err := Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if hs := cfg.Handlers(); len(hs) != 0 {
		t.Errorf("Handlers = %v, want none", hs)
	}
	d := cfg.Describe()
	if len(d) != 2 || d[0].Dialect != DialectClaudeCode || d[1].Dialect != DialectCodex || d[0].Present || d[1].Present {
		t.Errorf("Describe = %+v, want two absent dialects, claude-code first", d)
	}
	var nilCfg *Config
	if nilCfg.Handlers() != nil || nilCfg.Describe() != nil {
		t.Error("nil Config is not empty")
	}
}

func TestLoadHandlersInOrder(t *testing.T) {
	cfg := mustLoad(t, map[Dialect]string{
		DialectClaudeCode: `{
		  "permissions": {"allow": ["Bash(ls:*)"]},
		  "hooks": {
		    "PostToolUse": [{"hooks": [{"type": "command", "command": "post.sh"}]}],
		    "PreToolUse": [
		      {"matcher": "Bash", "hooks": [
		        {"type": "command", "command": "first.sh", "timeout": 5},
		        {"type": "command", "command": "second.sh", "timeout": 0.5, "async": false}
		      ]},
		      {"matcher": "*", "hooks": [{"type": "command", "command": "third.sh"}]}
		    ],
		    "Stop": [{"hooks": [{"type": "prompt", "prompt": "ignored"}]}],
		    "SessionStart": [{"matcher": "startup|resume", "hooks": [{"type": "command", "command": "start.sh"}]}]
		  }
		}`,
		DialectCodex: `{
		  "PreToolUse": [{"matcher": "^Bash$", "hooks": [{"type": "command", "command": "codex.sh", "timeoutSec": 7, "statusMessage": "checking"}]}],
		  "UserPromptSubmit": []
		}`,
	})
	want := []Handler{
		{DialectClaudeCode, SessionStart, "startup|resume", "start.sh", DefaultTimeout, "claude-code:SessionStart[0].hooks[0]"},
		{DialectClaudeCode, PreToolUse, "Bash", "first.sh", 5 * time.Second, "claude-code:PreToolUse[0].hooks[0]"},
		{DialectClaudeCode, PreToolUse, "Bash", "second.sh", 500 * time.Millisecond, "claude-code:PreToolUse[0].hooks[1]"},
		{DialectClaudeCode, PreToolUse, "*", "third.sh", DefaultTimeout, "claude-code:PreToolUse[1].hooks[0]"},
		{DialectClaudeCode, PostToolUse, "", "post.sh", DefaultTimeout, "claude-code:PostToolUse[0].hooks[0]"},
		{DialectCodex, PreToolUse, "^Bash$", "codex.sh", 7 * time.Second, "codex:PreToolUse[0].hooks[0]"},
	}
	if diff := cmp.Diff(want, cfg.Handlers()); diff != "" {
		t.Errorf("Handlers (-want +got):\n%s", diff)
	}

	desc := cfg.Describe()
	if len(desc) != 2 {
		t.Fatalf("Describe has %d dialects, want 2", len(desc))
	}
	cc := desc[0]
	if !cc.Present || cc.Path == "" || !strings.HasSuffix(cc.Path, filepath.Join("hooks", "claude-code.json")) {
		t.Errorf("claude-code file info = %+v", cc)
	}
	if diff := cmp.Diff([]string{"Stop"}, cc.Ignored); diff != "" {
		t.Errorf("claude-code ignored (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"UserPromptSubmit"}, desc[1].Ignored); diff != "" {
		t.Errorf("codex ignored (-want +got):\n%s", diff)
	}
	wantPre := []HandlerInfo{
		{"claude-code:PreToolUse[0].hooks[0]", "Bash", "first.sh", 5},
		{"claude-code:PreToolUse[0].hooks[1]", "Bash", "second.sh", 0.5},
		{"claude-code:PreToolUse[1].hooks[0]", "*", "third.sh", 60},
	}
	if len(cc.Events) != 3 || cc.Events[1].Event != PreToolUse {
		t.Fatalf("claude-code events = %+v, want SessionStart, PreToolUse, PostToolUse", cc.Events)
	}
	if diff := cmp.Diff(wantPre, cc.Events[1].Handlers); diff != "" {
		t.Errorf("claude-code PreToolUse handlers (-want +got):\n%s", diff)
	}
	if h := desc[1].Events[0].Handlers; h == nil || len(h) != 0 {
		t.Errorf("codex SessionStart handlers = %#v, want an empty list", h)
	}
}

func TestLoadBareAndEmpty(t *testing.T) {
	cfg := mustLoad(t, map[Dialect]string{
		DialectClaudeCode: `{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"x"}]}]}`,
		DialectCodex:      "  \n",
	})
	if hs := cfg.Handlers(); len(hs) != 1 || hs[0].Command != "x" {
		t.Errorf("Handlers = %+v, want the bare map's one handler", hs)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		dialect Dialect
		content string
		want    []string // substrings of the error
	}{
		{"invalid json names the file", DialectClaudeCode, `{"hooks":`, []string{"claude-code.json", "invalid JSON"}},
		{"not an object", DialectCodex, `[1,2]`, []string{"codex.json", "invalid JSON"}},
		{"hooks not an object", DialectClaudeCode, `{"hooks":[]}`, []string{"claude-code.json", `"hooks" must be an object`}},
		{"unknown event", DialectClaudeCode, `{"hooks":{"PreToolUSe":[]}}`, []string{`unknown event "PreToolUSe"`}},
		{"codex does not know claude-only events", DialectCodex, `{"Notification":[]}`, []string{`unknown event "Notification"`}},
		{"groups not a list", DialectClaudeCode, `{"hooks":{"PreToolUse":{}}}`, []string{"claude-code:PreToolUse must be a list"}},
		{"bad regex names the hook", DialectClaudeCode, `{"hooks":{"PreToolUse":[{"matcher":"Bash(","hooks":[{"type":"command","command":"x"}]}]}}`,
			[]string{"claude-code:PreToolUse[0]", `invalid matcher "Bash("`}},
		{"bad codex regex", DialectCodex, `{"PostToolUse":[{"hooks":[{"type":"command","command":"x"}]},{"matcher":"[","hooks":[{"type":"command","command":"x"}]}]}`,
			[]string{"codex:PostToolUse[1]", `invalid matcher "["`}},
		{"non-string matcher", DialectCodex, `{"PreToolUse":[{"matcher":3,"hooks":[]}]}`, []string{"codex:PreToolUse must be a list"}},
		{"prompt type", DialectClaudeCode, `{"hooks":{"PreToolUse":[{"hooks":[{"type":"prompt","prompt":"is it safe?"}]}]}}`,
			[]string{"claude-code:PreToolUse[0].hooks[0]", `type "prompt" is not supported`}},
		{"missing type", DialectCodex, `{"PreToolUse":[{"hooks":[{"command":"x"}]}]}`, []string{"codex:PreToolUse[0].hooks[0]", `"type" is missing`}},
		{"blank command", DialectClaudeCode, `{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"  "}]}]}}`,
			[]string{"claude-code:SessionStart[0].hooks[0]", `"command" is blank`}},
		{"missing command", DialectCodex, `{"PreToolUse":[{"hooks":[{"type":"command"}]}]}`, []string{`"command" is blank`}},
		{"empty hooks list", DialectCodex, `{"PreToolUse":[{"matcher":"Bash"}]}`, []string{"codex:PreToolUse[0]", `"hooks" is missing or empty`}},
		{"zero timeout", DialectClaudeCode, `{"hooks":{"PreToolUse":[{"hooks":[{"type":"command","command":"x","timeout":0}]}]}}`,
			[]string{"timeout 0 must be a positive number"}},
		{"string timeout", DialectClaudeCode, `{"hooks":{"PreToolUse":[{"hooks":[{"type":"command","command":"x","timeout":"60"}]}]}}`,
			[]string{"claude-code:PreToolUse[0].hooks[0]", "invalid handler"}},
		{"both codex timeouts", DialectCodex, `{"PreToolUse":[{"hooks":[{"type":"command","command":"x","timeout":1,"timeoutSec":2}]}]}`,
			[]string{`not both`}},
		{"negative timeoutSec", DialectCodex, `{"PreToolUse":[{"hooks":[{"type":"command","command":"x","timeoutSec":-1}]}]}`,
			[]string{"timeout -1 must be a positive number"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeHooks(t, map[Dialect]string{tt.dialect: tt.content}))
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Load err = %v, want ErrInvalidConfig", err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("Load err %v is not a *ConfigError with problems", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	_, err := Load(writeHooks(t, map[Dialect]string{
		DialectClaudeCode: `{"hooks":{"Bogus":[],"PreToolUse":[{"matcher":"(","hooks":[{"type":"command","command":"x"}]}]}}`,
		DialectCodex:      `{"PreToolUse":[{"hooks":[{"type":"agent"}]}]}`,
	}))
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("Load err = %v, want *ConfigError", err)
	}
	if len(ce.Problems) != 3 {
		t.Errorf("problems = %q, want 3 (unknown event, bad matcher, agent type)", ce.Problems)
	}
}

func TestMatchers(t *testing.T) {
	tests := []struct {
		dialect Dialect
		matcher string
		subject string
		want    bool
	}{
		// Match-all forms, both dialects.
		{DialectClaudeCode, "", "Bash", true},
		{DialectClaudeCode, "*", "Bash", true},
		{DialectCodex, "", "Bash", true},
		{DialectCodex, "*", "anything", true},
		// Claude Code: plain names are exact, '|' separates alternatives.
		{DialectClaudeCode, "Bash", "Bash", true},
		{DialectClaudeCode, "Bash", "BashOutput", false},
		{DialectClaudeCode, "Bash", "bash", false},
		{DialectClaudeCode, "Edit|Write", "Write", true},
		{DialectClaudeCode, "Edit|Bash", "Bash", true},
		{DialectClaudeCode, "Edit|Write", "Bash", false},
		{DialectClaudeCode, "mcp__memory", "mcp__memory__create", false},
		{DialectClaudeCode, "startup|resume", "resume", true},
		{DialectClaudeCode, "startup", "resume", false},
		// Claude Code: anything else is an unanchored regular expression.
		{DialectClaudeCode, "^Bash$", "Bash", true},
		{DialectClaudeCode, "^Bash$", "BashOutput", false},
		{DialectClaudeCode, "Ba.*", "Bash", true},
		{DialectClaudeCode, "a.h", "Bash", true},
		{DialectClaudeCode, "mcp__.*", "Bash", false},
		{DialectClaudeCode, "(?i)bash", "Bash", true},
		{DialectClaudeCode, "Bash(rm", "Bash", false}, // compile error: caught at Load, see TestLoadErrors
		// Codex: every matcher other than ""/"*" is an unanchored regular expression.
		{DialectCodex, "Bash", "Bash", true},
		{DialectCodex, "Bash", "BashOutput", true},
		{DialectCodex, "^Bash$", "BashOutput", false},
		{DialectCodex, "Edit|Bash", "Bash", true},
		{DialectCodex, "Edit|Write", "Bash", false},
		{DialectCodex, "^(startup|resume)$", "resume", true},
		{DialectCodex, "start", "startup", true},
	}
	for _, tt := range tests {
		t.Run(string(tt.dialect)+"/"+tt.matcher+"/"+tt.subject, func(t *testing.T) {
			match, err := compileMatcher(tt.dialect, tt.matcher)
			if err != nil {
				if tt.want {
					t.Fatalf("compileMatcher: %v", err)
				}
				return
			}
			if got := match(tt.subject); got != tt.want {
				t.Errorf("%s matcher %q on %q = %v, want %v", tt.dialect, tt.matcher, tt.subject, got, tt.want)
			}
		})
	}
}

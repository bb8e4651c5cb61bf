package tests

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/apitest"
)

type hookCall struct {
	Raw        string   `json:"raw"`
	Cwd        string   `json:"cwd"`
	Managed    []string `json:"managed"`
	ProjectDir *string  `json:"project_dir"`
}

func readHookLog(t *testing.T, path string) []hookCall {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("hook log: %v", err)
	}
	defer f.Close()
	var out []hookCall
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c hookCall
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// TestHooksThroughServer configures real Claude Code and Codex hook scripts
// in the home and drives model tool calls through the real server.
func TestHooksThroughServer(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	testdata, err := filepath.Abs("testdata/hooks")
	if err != nil {
		t.Fatal(err)
	}
	claudeLog := filepath.Join(t.TempDir(), "claude.jsonl")
	codexLog := filepath.Join(t.TempDir(), "codex.jsonl")
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "claude-code.json"), map[string]any{"hooks": map[string]any{
		"SessionStart": []any{map[string]any{"hooks": []any{map[string]any{"type": "command", "command": "HOOK_LOG=" + claudeLog + " " + testdata + "/record.py"}}}},
		"PreToolUse": []any{
			map[string]any{"matcher": "Bash", "hooks": []any{map[string]any{"type": "command", "command": testdata + "/validate-bash.sh", "timeout": 10}}},
			map[string]any{"matcher": "Bash", "hooks": []any{map[string]any{"type": "command", "command": "HOOK_LOG=" + claudeLog + " " + testdata + "/record.py"}}},
		},
		"PostToolUse": []any{map[string]any{"matcher": "Ba.*", "hooks": []any{map[string]any{"type": "command", "command": "HOOK_LOG=" + claudeLog + " " + testdata + "/record.py"}}}},
	}})
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "codex.json"), map[string]any{"hooks": map[string]any{
		"PreToolUse": []any{map[string]any{"matcher": "^Bash$", "hooks": []any{
			map[string]any{"type": "command", "command": "HOOK_LOG=" + codexLog + " " + testdata + "/record.py", "timeoutSec": 10},
			map[string]any{"type": "command", "command": "exit 1"},
			map[string]any{"type": "command", "command": "sleep 30", "timeout": 1},
		}}},
	}})

	s := startServer(t, withHome(home), withEnv("DSH_STALE=stale"))
	var listed []map[string]any
	if st := s.DoJSON(t, "GET", "/hooks", nil, &listed); st != 200 || len(listed) != 7 {
		t.Fatalf("GET /hooks = %d with %d hooks, want 7: %v", st, len(listed), listed)
	}

	cwd := t.TempDir()
	var a agent
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{"cwd": cwd}, &a); st != 201 {
		t.Fatalf("create agent = %d", st)
	}

	// The validator blocks: no process starts, the marker never appears.
	marker := filepath.Join(t.TempDir(), "marker")
	victim := t.TempDir()
	r := s.callTool(t, a.ID, "bash", map[string]any{"command": "touch " + marker + " && rm -rf " + victim})
	if !r.IsError || !strings.Contains(r.Text, "recursive forced removal is not allowed") {
		t.Errorf("blocked call = %+v, want isError with the validator's reason", r)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("a blocked command ran (marker exists: %v)", err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("the blocked rm -rf removed %s", victim)
	}

	// An allowed call runs, despite a hook exiting 1 and one timing out.
	r = s.callTool(t, a.ID, "bash", map[string]any{"command": "echo allowed"})
	if r.IsError || strings.TrimSpace(r.Text) != "allowed" {
		t.Errorf("allowed call = %+v", r)
	}

	calls := readHookLog(t, claudeLog)
	// SessionStart, then PreToolUse for the second call (the first was
	// blocked by the earlier validator, but every matching hook still runs),
	// then PostToolUse.
	var events []string
	for _, c := range calls {
		var p map[string]any
		if err := json.Unmarshal([]byte(c.Raw), &p); err != nil {
			t.Fatalf("payload %q: %v", c.Raw, err)
		}
		events = append(events, p["hook_event_name"].(string))
		if !strings.HasSuffix(c.Raw, "\n") {
			t.Errorf("Claude Code payload does not end with a newline: %q", c.Raw)
		}
		if p["session_id"] != a.ID || p["transcript_path"] != "" || p["cwd"] != cwd {
			t.Errorf("payload session_id=%v transcript_path=%q cwd=%v", p["session_id"], p["transcript_path"], p["cwd"])
		}
		if len(c.Managed) != 0 {
			t.Errorf("hook saw managed variables %v", c.Managed)
		}
		if c.Cwd != cwd || c.ProjectDir == nil || *c.ProjectDir != cwd {
			t.Errorf("hook ran in %q with CLAUDE_PROJECT_DIR %v, want %q", c.Cwd, c.ProjectDir, cwd)
		}
		if p["hook_event_name"] == "PostToolUse" && p["tool_response"] == nil {
			t.Errorf("PostToolUse payload has no tool_response: %s", c.Raw)
		}
		if p["hook_event_name"] == "SessionStart" && p["source"] != "startup" {
			t.Errorf("SessionStart source = %v, want startup", p["source"])
		}
	}
	if got := strings.Join(events, ","); got != "SessionStart,PreToolUse,PreToolUse,PostToolUse" {
		t.Errorf("Claude Code events = %s", got)
	}

	codex := readHookLog(t, codexLog)
	if len(codex) != 2 {
		t.Fatalf("codex hook ran %d times, want 2", len(codex))
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(codex[0].Raw), &p); err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(codex[0].Raw, "\n") {
		t.Errorf("Codex payload ends with a newline: %q", codex[0].Raw)
	}
	if v, ok := p["transcript_path"]; !ok || v != nil {
		t.Errorf("Codex transcript_path = %v (present %v), want null", v, ok)
	}
	for _, k := range []string{"turn_id", "model", "permission_mode", "tool_use_id", "tool_input"} {
		if _, ok := p[k]; !ok {
			t.Errorf("Codex payload lacks %s: %s", k, codex[0].Raw)
		}
	}
	if len(codex[0].Managed) != 0 || codex[0].ProjectDir != nil {
		t.Errorf("Codex hook saw managed %v, CLAUDE_PROJECT_DIR %v", codex[0].Managed, codex[0].ProjectDir)
	}

	// The transcript records each hook and its result.
	resp := s.Do(t, "GET", "/agents/"+a.ID+"/transcript", nil)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var invoked, results, timedOut int
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, `"type":"hook/invoked"`):
			invoked++
		case strings.Contains(line, `"type":"hook/result"`):
			results++
			if strings.Contains(line, `"timedOut":true`) {
				timedOut++
			}
		}
	}
	if invoked == 0 || invoked != results || timedOut != 2 {
		t.Errorf("transcript has %d hook/invoked, %d hook/result, %d timed out; want equal counts and 2 timeouts", invoked, results, timedOut)
	}
}

func TestInvalidHookConfigRefusesToStart(t *testing.T) {
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "claude-code.json"), map[string]any{"hooks": map[string]any{
		"PreToolUse": []any{map[string]any{"matcher": "Bash(", "hooks": []any{map[string]any{"type": "command", "command": "true"}}}},
	}})
	cmd := exec.Command(serverBinary, "--addr", "127.0.0.1:0", "--home", home)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("server started with an invalid matcher:\n%s", out)
	}
	checkNoCgroupLeft(t, home)
	if !strings.Contains(string(out), "Bash(") || !strings.Contains(string(out), "claude-code.json") {
		t.Errorf("error does not name the hook and file:\n%s", out)
	}
}

// transcriptEvents reads an agent's transcript through the API.
func (s *testServer) transcriptEvents(t *testing.T, agentID string) []map[string]any {
	t.Helper()
	resp := s.Do(t, "GET", "/agents/"+agentID+"/transcript", nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("transcript = %d", resp.StatusCode)
	}
	var out []map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestHookMessagesReachModel runs, through the real server, a hook that
// answers as hookify does (a deny whose only explanation is systemMessage, a
// warning that is only a systemMessage) and a SessionStart hook offering
// additionalContext, both unchanged, and checks that what they said reaches
// the API, the tool result the model sees and the transcript.
func TestHookMessagesReachModel(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is needed to run the hookify-like hook")
	}
	scripts, err := filepath.Abs("../internal/hooks/testdata/scripts")
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(t.TempDir(), "home")
	apitest.WriteJSON(t, filepath.Join(home, "hooks", "claude-code.json"), map[string]any{"hooks": map[string]any{
		"SessionStart": []any{map[string]any{"hooks": []any{map[string]any{"type": "command", "command": scripts + "/session_context.sh"}}}},
		"PreToolUse":   []any{map[string]any{"matcher": "Bash", "hooks": []any{map[string]any{"type": "command", "command": "python3 " + scripts + "/hookify.py"}}}},
	}})
	cwd := t.TempDir()
	rule := func(name, action, pattern, message string) {
		body := "---\nname: " + name + "\nenabled: true\nevent: bash\npattern: " + pattern + "\naction: " + action + "\n---\n\n" + message + "\n"
		if err := os.MkdirAll(filepath.Join(cwd, ".claude"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cwd, ".claude", "hookify."+name+".local.md"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rule("no-force-push", "block", `git push.*--force`, "Force pushes rewrite shared history.")
	rule("warn-sudo", "warn", `\bsudo\b`, "sudo is rarely needed here.")
	s := startServer(t, withHome(home))

	type session struct {
		ID           string `json:"id"`
		SessionStart *struct {
			AdditionalContext []string `json:"additionalContext"`
			SystemMessages    []string `json:"systemMessages"`
		} `json:"sessionStart"`
	}
	var a session
	if st := s.DoJSON(t, "POST", "/agents", map[string]any{"cwd": cwd}, &a); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	const startCtx = "Session startup: this repository deploys with make release."
	if a.SessionStart == nil || len(a.SessionStart.AdditionalContext) != 1 || a.SessionStart.AdditionalContext[0] != startCtx {
		t.Errorf("create agent sessionStart = %+v, want additionalContext [%q]", a.SessionStart, startCtx)
	}
	var resumed session
	if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/resume", nil, &resumed); st != 200 ||
		resumed.SessionStart == nil || len(resumed.SessionStart.AdditionalContext) != 1 ||
		!strings.HasPrefix(resumed.SessionStart.AdditionalContext[0], "Session resume:") {
		t.Errorf("resume = %d %+v, want the resume context", st, resumed.SessionStart)
	}

	type result struct {
		IsError           bool     `json:"isError"`
		Text              string   `json:"text"`
		SystemMessages    []string `json:"systemMessages"`
		AdditionalContext []string `json:"additionalContext"`
	}
	const denyMsg = "**[no-force-push]**\nForce pushes rewrite shared history."
	var denied result
	if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/tools/bash", map[string]any{"callId": "call_push",
		"arguments": map[string]any{"command": "git push origin main --force"}}, &denied); st != 200 {
		t.Fatalf("bash tool = %d", st)
	}
	if !denied.IsError || !strings.Contains(denied.Text, denyMsg) || strings.Contains(denied.Text, "without a reason") {
		t.Errorf("denied call text = %q, want the hook's message as the reason", denied.Text)
	}
	if len(denied.SystemMessages) != 1 || denied.SystemMessages[0] != denyMsg {
		t.Errorf("denied call systemMessages = %q", denied.SystemMessages)
	}
	// The session's first tool result carries what SessionStart offered
	// (startup, then resume) to the model.
	if len(denied.AdditionalContext) != 2 || denied.AdditionalContext[0] != startCtx ||
		!strings.HasPrefix(denied.AdditionalContext[1], "Session resume:") ||
		!strings.Contains(denied.Text, "[hook context: "+startCtx+"]") {
		t.Errorf("first tool result = %+v, want the SessionStart context in it", denied)
	}
	const warnMsg = "**[warn-sudo]**\nsudo is rarely needed here."
	var warned result
	if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/tools/bash", map[string]any{"callId": "call_sudo",
		"arguments": map[string]any{"command": "echo sudo is a word"}}, &warned); st != 200 {
		t.Fatalf("bash tool = %d", st)
	}
	if warned.IsError || !strings.HasPrefix(warned.Text, "sudo is a word\n") || !strings.Contains(warned.Text, "[hook message: "+warnMsg+"]") {
		t.Errorf("warned call = %+v, want the output and the hook's message", warned)
	}
	if len(warned.AdditionalContext) != 0 || strings.Contains(warned.Text, startCtx) {
		t.Errorf("second tool result = %+v, want the SessionStart context only in the first", warned)
	}

	// The transcript carries all of it.
	var sawStartCtx, sawStartCtxResult, sawDenyResult, sawDenyHook, sawWarn bool
	for _, e := range s.transcriptEvents(t, a.ID) {
		data, _ := e["data"].(map[string]any)
		switch e["type"] {
		case "hook/result":
			if data["additionalContext"] == startCtx {
				sawStartCtx = true
			}
			if data["callId"] == "call_push" && data["systemMessage"] == denyMsg && data["reason"] == denyMsg {
				sawDenyHook = true
			}
		case "tool/result":
			text, _ := data["text"].(string)
			if data["callId"] == "call_push" && strings.Contains(text, denyMsg) {
				sawDenyResult = true
			}
			if data["callId"] == "call_push" && strings.Contains(text, "[hook context: "+startCtx+"]") {
				sawStartCtxResult = true
			}
			if data["callId"] == "call_sudo" && strings.Contains(text, warnMsg) {
				sawWarn = true
			}
		}
	}
	if !sawStartCtx || !sawStartCtxResult || !sawDenyHook || !sawDenyResult || !sawWarn {
		t.Errorf("transcript: SessionStart context %v, in the first tool/result %v, deny hook/result %v, deny tool/result %v, warning %v; want all",
			sawStartCtx, sawStartCtxResult, sawDenyHook, sawDenyResult, sawWarn)
	}
}
